import Foundation
import PorterCore

/// One thing that happened to a task, for programs that would rather `for await` than
/// write a delegate class (which Swift 6's strict concurrency makes awkward: a delegate
/// must be `Sendable`, so it holds only `let`s or locks its state).
public enum TaskUpdate: Sendable {
    /// The response head (first, and again after nothing else: redirects are reported
    /// as `redirected`).
    case response(Response)
    /// Body bytes, in order.
    case data(Data)
    /// A redirect that is being followed: the redirect response and the next request.
    case redirected(Response, Request)
    /// Upload progress.
    case sentBody(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64)
    /// Timing, once the task is done (just before the sequence ends).
    case metrics(TaskMetrics)
    /// No route to the host: the task waits for the network (`waitsForConnectivity`).
    case waitingForConnectivity
}

/// The updates of one data (or upload) task as an `AsyncSequence`: the task starts when
/// iteration starts, the sequence ends when the task completes, and throws its
/// `PorterError` if it failed. Redirects are followed and challenges get the session's
/// default handling (credentials from its store, the URL's password); a program that must
/// decide those writes a delegate instead. The body is not held back for a slow reader:
/// use `bytes(for:)` for large bodies. Dropping the sequence before the end cancels the
/// task.
public struct TaskUpdates: AsyncSequence, Sendable {
    public typealias Element = TaskUpdate
    /// The task (for `cancel()`, progress, or its state).
    public let task: DataTask
    let stream: AsyncThrowingStream<TaskUpdate, Error>

    public struct Iterator: AsyncIteratorProtocol {
        let task: DataTask
        var inner: AsyncThrowingStream<TaskUpdate, Error>.AsyncIterator
        var started = false
        public mutating func next() async throws -> TaskUpdate? {
            if !started {
                started = true
                task.resume()
            }
            return try await inner.next()
        }
    }

    public func makeAsyncIterator() -> Iterator { Iterator(task: task, inner: stream.makeAsyncIterator()) }
}

extension Session {
    /// A data task for `request` whose updates arrive as an `AsyncSequence` (no delegate
    /// class needed). The task starts when iteration does.
    ///
    ///     for try await update in session.updates(for: request) {
    ///         if case .data(let d) = update { received += d.count }
    ///     }
    public func updates(for request: Request) -> TaskUpdates {
        let (stream, continuation) = AsyncThrowingStream<TaskUpdate, Error>.makeStream()
        let relay = UpdateRelay(continuation)
        let task = dataTask(with: request, delegate: relay)
        continuation.onTermination = { termination in
            if case .cancelled = termination { task.cancel() }
        }
        return TaskUpdates(task: task, stream: stream)
    }

    /// The same for `url`.
    public func updates(from url: URL) -> TaskUpdates { updates(for: Request(url: url)) }
}

/// The per-task delegate behind `updates(for:)`: each callback becomes an update.
final class UpdateRelay: DataDelegate, @unchecked Sendable {
    private let continuation: AsyncThrowingStream<TaskUpdate, Error>.Continuation
    init(_ continuation: AsyncThrowingStream<TaskUpdate, Error>.Continuation) { self.continuation = continuation }

    func dataTask(_ task: DataTask, didReceive response: Response,
                  completion: @escaping @Sendable (ResponseDisposition) -> Void) {
        continuation.yield(.response(response))
        completion(.allow)
    }
    func dataTask(_ task: DataTask, didReceive data: Data) { continuation.yield(.data(data)) }
    func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
              completion: @escaping @Sendable (Request?) -> Void) {
        continuation.yield(.redirected(response, newRequest))
        completion(newRequest)
    }
    func task(_ task: SessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        continuation.yield(.sentBody(bytesSent: bytesSent, totalBytesSent: totalBytesSent,
                                     totalBytesExpectedToSend: totalBytesExpectedToSend))
    }
    func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) { continuation.yield(.metrics(metrics)) }
    func taskIsWaitingForConnectivity(_ task: SessionTask) { continuation.yield(.waitingForConnectivity) }
    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        if let error { continuation.finish(throwing: error) } else { continuation.finish() }
    }
}
