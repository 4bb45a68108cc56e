import Foundation

/// Something that happened to a task, for process-wide observers (plugins' event hooks,
/// tracing, logging). Observers see every task of every session.
public enum TaskEvent: Sendable {
    /// `taskID` is unique in the process (unlike `SessionTask.taskIdentifier`, which is
    /// unique per session).
    case created(taskID: UInt64, url: URL)
    case response(taskID: UInt64, url: URL, statusCode: Int?, expectedContentLength: Int64)
    case redirected(taskID: UInt64, from: URL, to: URL)
    case challenged(taskID: UInt64, host: String, method: String, previousFailureCount: Int)
    case completed(taskID: UInt64, url: URL, bytesReceived: Int64, bytesSent: Int64, error: PorterError?)
}

/// The process-wide list of task observers. An observer is called on the thread that
/// posts the event (the libcurl loop, a task's executor, or the thread that made the
/// task) right after the event, so it must only hand the event on and return: plugins'
/// hooks run on queues of their own (PorterPlugins' `PluginEvents`). Costs one lock per
/// event when nobody observes.
public final class TaskEventCenter: @unchecked Sendable {
    public static let shared = TaskEventCenter()

    private let lock = NSLock()
    private var observers: [(UInt64, @Sendable (TaskEvent) -> Void)] = []
    private var nextID: UInt64 = 0

    public init() {}

    /// Adds an observer; returns a token for `removeObserver`.
    @discardableResult
    public func addObserver(_ observer: @escaping @Sendable (TaskEvent) -> Void) -> UInt64 {
        lock.lock(); defer { lock.unlock() }
        nextID += 1
        observers.append((nextID, observer))
        return nextID
    }

    public func removeObserver(_ token: UInt64) {
        lock.lock(); defer { lock.unlock() }
        observers.removeAll { $0.0 == token }
    }

    public var isObserved: Bool { lock.withLock { !observers.isEmpty } }

    /// Builds the event only when someone listens.
    package func post(_ make: @autoclosure () -> TaskEvent) {
        let current = lock.withLock { observers }
        guard !current.isEmpty else { return }
        let event = make()
        for (_, observer) in current { observer(event) }
    }

    package static let taskIDs = AtomicCounter()
}
