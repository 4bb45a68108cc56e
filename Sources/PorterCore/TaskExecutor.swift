import Dispatch
import Foundation

/// Where a task's life cycle runs: a serial executor, ideally the thread that does the
/// handler's I/O, so its reports are processed where they are made without a thread
/// hop (libcurl's loop thread for http and ftp). A handler type names it with
/// `ProtocolHandler.executor(for:context:)`; without one a task gets a serial queue of
/// its session's. Application callbacks never run on it: they go to the session's
/// delegate queue.
public protocol TaskExecutor: AnyObject, Sendable {
    /// Runs `work` soon, after the work given before it, never at the same time as other
    /// work of this executor. Never runs it before returning.
    func execute(_ work: @escaping @Sendable () -> Void)
    /// True while running on this executor (in work it runs, or in callbacks of the
    /// I/O it drives).
    var isCurrent: Bool { get }
}

/// A serial dispatch queue as a `TaskExecutor`.
public final class QueueExecutor: TaskExecutor, @unchecked Sendable {
    public let queue: DispatchQueue
    private let key = DispatchSpecificKey<ObjectIdentifier>()

    public init(label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: ObjectIdentifier(self))
    }

    public func execute(_ work: @escaping @Sendable () -> Void) { queue.async(execute: work) }
    public var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == ObjectIdentifier(self) }
}
