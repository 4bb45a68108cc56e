import Foundation

/// A two-way byte stream to a host: what stream tasks and WebSocket tasks run on.
///
/// A handler factory offers it through `ProtocolHandlerFactory.openStream` (the http
/// handler does, on libcurl's connect-only mode, so a stream gets the session's proxy,
/// TLS trust settings and address overrides). Every method returns at once; completions
/// run on the stream's own thread, in order for each direction, never at the same time.
/// Reads and writes are independent: one read and one write may be outstanding together.
public protocol ByteStream: AnyObject, Sendable {
    /// Connects (and, for a secure stream, completes the TLS handshake). `completion`
    /// runs once: nil when the stream is ready.
    func open(_ completion: @escaping @Sendable (PorterError?) -> Void)
    /// Up to `maxLength` bytes as soon as some are there; empty data at the end of the
    /// stream. Reads are served in the order asked.
    func read(maxLength: Int, _ completion: @escaping @Sendable (Result<Data, PorterError>) -> Void)
    /// Writes all of `data` (in the order asked), then calls `completion`.
    func write(_ data: Data, _ completion: @escaping @Sendable (PorterError?) -> Void)
    /// No more writes: the peer reads the end of the stream (TCP half-close).
    func closeWrite()
    /// No more reads: outstanding and later reads end with the end of the stream.
    func closeRead()
    /// Starts TLS on an open plain stream, after the writes already asked for; reads and
    /// writes asked after it go through TLS. `completion` runs once the handshake ends.
    func startTLS(serverName: String, _ completion: @escaping @Sendable (PorterError?) -> Void)
    /// Ends the stream now: outstanding operations fail with `.cancelled`.
    func close()
}

/// How a stream connects: the host, the port, and whether TLS starts at once.
public struct ByteStreamTarget: Sendable, Hashable {
    public var host: String
    public var port: Int
    /// TLS from the first byte (wss://); a stream task starts TLS later, if asked.
    public var secure: Bool
    public init(host: String, port: Int, secure: Bool) {
        self.host = host
        self.port = port
        self.secure = secure
    }
}
