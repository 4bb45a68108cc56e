import Foundation

/// Instrumentation of a session's tasks (tracing spans, metrics): the one hook the
/// session calls. `PorterObservability.PorterInstrumentation` is the implementation
/// `Porter.bootstrap()` installs; it does nothing until the program bootstraps a tracing
/// or metrics backend.
///
/// The session asks the observer for an observation when it creates a task, on the
/// thread (and in the Swift task) that creates it, so task-local values such as the
/// current tracing context are visible there and can be kept. Unlike `TaskEventCenter`
/// (which tells process-wide listeners what happened), an observation may change the
/// request that is about to be sent.
public protocol TaskObserver: Sendable {
    /// An observation for a new task whose first request is `request`; nil to leave
    /// the task alone.
    func observeTask(_ request: Request) -> (any TaskObservation)?

    /// A background session's queue at porterd, as porterd last reported it: `depth` of
    /// its tasks are resumed there and not yet completed (queued, waiting to begin or to
    /// retry, or transferring). Called when the session attaches and whenever the number
    /// changes, from the session's link to porterd; must return promptly.
    func backgroundQueueDepth(_ depth: Int, session identifier: String)
}

extension TaskObserver {
    public func backgroundQueueDepth(_ depth: Int, session identifier: String) {}
}

/// What one task tells its observation, in this order: `willLoad` for each request
/// sent (the first, each redirect, each retry after a network change), `didReceive` for
/// each response head (a redirect's and the final one), then `didComplete` exactly once,
/// even for a task that failed before any request was sent. Calls come one at a time
/// from the task's executor and must return promptly.
public protocol TaskObservation: AnyObject, Sendable {
    /// The request, in its final form (session headers, cookies), is about to go to
    /// its handler: the moment to add header fields such as `traceparent`.
    func willLoad(_ request: inout Request)
    func didReceive(_ response: Response)
    /// The task ended; `error` is nil when it succeeded (an HTTP error status is a
    /// success here: look at the response).
    func didComplete(error: PorterError?, bytesSent: Int64, bytesReceived: Int64)
}

extension SessionConfiguration {
    private static let defaultObserver = Locked<(any TaskObserver)?>(nil)

    /// Sets the `taskObserver` new configurations start with (`Porter.bootstrap()`
    /// installs `PorterInstrumentation()`). Configurations made before keep theirs.
    public static func installDefaultTaskObserver(_ observer: (any TaskObserver)?) {
        defaultObserver.withLock { $0 = observer }
    }

    static var defaultTaskObserver: (any TaskObserver)? { defaultObserver.current }
}
