import Dispatch

/// A stream or WebSocket task's serial queue, the one its machine and shell live on.
/// `runNow` makes resume() and cancel() change the state before they return, as
/// URLSessionTask's do, without ever waiting on the queue from the queue itself.
struct TaskQueue: @unchecked Sendable {
    let queue: DispatchQueue
    private let marker = DispatchSpecificKey<Bool>()

    init(label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: marker, value: true)
    }

    var isCurrent: Bool { DispatchQueue.getSpecific(key: marker) == true }

    /// Runs `work` on the queue before returning: at once when already on it (an event
    /// met while others are performed waits in the task's inbox). In a session that
    /// delivers callbacks inline they run on the tasks' own queues, and one task's
    /// callback waiting for another's queue while that one waits for the first would never
    /// return: there the work is queued instead.
    func runNow(deliversInline: Bool, _ work: @escaping @Sendable () -> Void) {
        if isCurrent {
            work()
        } else if deliversInline {
            queue.async(execute: work)
        } else {
            queue.sync(execute: work)
        }
    }
}
