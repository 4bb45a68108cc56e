import PorterCore

/// The life cycle of a background task's mirror in the application (`SessionTask.remote`):
/// porterd runs the task and reports it; this machine decides what of those reports the
/// application sees. No I/O, no locks: the shell (`SessionTask` with `BackgroundLink`)
/// holds it under its lock and performs the action after unlocking.
///
/// Guarantees, by construction:
/// - the completion reaches the delegate at most once (`deliverCompletion`), and the
///   finished file only before it (`deliverFile`);
/// - once completed, the task's state stays `.completed`: a snapshot that was on its way
///   (a reconnect's task list) cannot make it look running again;
/// - controls (resume, suspend, cancel, schedule) go to porterd only while the task has
///   not completed.
package struct BackgroundMirrorMachine: Sendable, Equatable {
    package enum Event: Sendable, Equatable {
        /// porterd's view of the task (a task list, a reconnect), with its state.
        case snapshot(TaskState)
        /// porterd's event: the download's file is ready.
        case finishedDownloading
        /// porterd's event: the task ended (with or without an error).
        case completed
        /// The application resumes, suspends, cancels or reschedules the task.
        case control
    }

    package enum Action: Sendable, Equatable {
        /// Show this state.
        case setState(TaskState)
        /// Hand the finished file to the delegate.
        case deliverFile
        /// Show `.completed` and tell the delegate the task completed: the last thing it hears.
        case deliverCompletion
        /// Send the control to porterd.
        case sendControl
        /// Too late (after the completion): acknowledge and do nothing else.
        case drop
    }

    /// What the application sees of the task's state.
    package private(set) var state: TaskState
    /// The completion was handed to the delegate.
    package private(set) var completed = false

    package init(state: TaskState) { self.state = state }

    package mutating func handle(_ event: Event) -> Action {
        guard !completed else { return .drop }
        switch event {
        case .snapshot(let s):
            state = s
            return .setState(s)
        case .finishedDownloading:
            return .deliverFile
        case .completed:
            completed = true
            state = .completed
            return .deliverCompletion
        case .control:
            return .sendControl
        }
    }
}
