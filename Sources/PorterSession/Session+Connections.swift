import Foundation
import PorterCore

/// What the tasks on a connection of their own (PorterWebSocket's stream and WebSocket
/// tasks) need of a session: a stream from the http handler, and a place in the
/// session's list so `invalidateAndCancel()` reaches them.

/// A task of any kind a session makes — data, upload, download, stream or WebSocket — as
/// `allTasks` lists them: what every kind has in common (URLSessionTask's part that
/// URLSessionStreamTask and URLSessionWebSocketTask share). Cast to the kind for the rest.
public protocol AnySessionTask: AnyObject, Sendable, CustomStringConvertible {
    var taskIdentifier: Int { get }
    var state: TaskState { get }
    var taskDescription: String? { get set }
    func resume()
    func cancel()
}

extension SessionTask: AnySessionTask {}

/// A task on a connection of its own (stream, WebSocket): listed in `allTasks` from its
/// making to its end, and cancelled by `invalidateAndCancel()`.
package protocol ConnectionTask: AnySessionTask {}

extension Session {
    /// A byte stream from the handler of `scheme` (http or https), if it carries streams.
    package func openStream(to target: ByteStreamTarget, scheme: String) -> (any ByteStream)? {
        let host = target.host.contains(":") ? "[\(target.host)]" : target.host
        guard let url = URL(string: "\(scheme)://\(host):\(target.port)/") else { return nil }
        let probe = Request(url: url)
        guard let factory = TaskDriver.factory(for: probe, in: configuration) else { return nil }
        return factory.openStream(to: target, context: SessionContext(configuration: configuration, sessionIdentifier: identifier))
    }
}
