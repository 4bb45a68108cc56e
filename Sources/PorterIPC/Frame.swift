import Foundation

/// One unit on a PorterIPC connection. On the wire: the length of what follows as a
/// 4-byte big-endian integer, then one byte of kind, then the payload. Both process
/// boundaries (the background daemon, plugin workers) speak it.
public struct Frame: Sendable, Equatable {
    public enum Kind: UInt8, Sendable {
        /// The version handshake (`Hello`), first on every connection, both ways.
        case hello = 1
        /// A message: one JSON-encoded value of the service's message type.
        case message = 2
        /// Raw bytes (a body chunk), for services that move bodies.
        case data = 3
        /// The sender is closing the connection; the payload says why (UTF-8).
        case goodbye = 4
    }

    public var kind: Kind
    public var payload: [UInt8]

    public init(kind: Kind, payload: [UInt8]) {
        self.kind = kind
        self.payload = payload
    }

    /// The frame as bytes on the wire.
    public func encoded() -> [UInt8] {
        let length = UInt32(payload.count + 1)
        var out = [UInt8]()
        out.reserveCapacity(payload.count + 5)
        out.append(UInt8(truncatingIfNeeded: length >> 24))
        out.append(UInt8(truncatingIfNeeded: length >> 16))
        out.append(UInt8(truncatingIfNeeded: length >> 8))
        out.append(UInt8(truncatingIfNeeded: length))
        out.append(kind.rawValue)
        out.append(contentsOf: payload)
        return out
    }
}

/// Why a connection cannot go on. A malformed or oversized frame ends the connection it
/// came on (the stream cannot be resynchronised), never the process.
public struct IPCError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// A frame announced more than the connection's limit.
        case frameTooLarge
        /// The bytes are not a frame of this protocol (an unknown kind, a zero length, a
        /// message that does not decode, a handshake that does not parse).
        case malformed
        /// The two sides share no protocol version, or speak for another service.
        case versionMismatch
        /// The peer closed the connection (mid-frame, or with a goodbye).
        case closed
        /// The peer is not allowed to connect (another user).
        case refused
        /// A system call failed.
        case system
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}

/// Cuts a byte stream into frames. Bytes go in as they arrive; `next()` hands out each
/// complete frame and holds back a partial one. After an error the decoder stays failed.
public struct FrameDecoder: Sendable {
    /// The largest payload accepted; a frame announcing more is refused before any of
    /// it is buffered.
    public let maximumPayload: Int
    private var buffer: [UInt8] = []
    private var start = 0
    private var failure: IPCError?

    /// 1 MiB by default: messages are small, and a body moves in many data frames.
    public init(maximumPayload: Int = 1 << 20) {
        self.maximumPayload = maximumPayload
    }

    /// Bytes not yet handed out as frames.
    public var bufferedCount: Int { buffer.count - start }

    public mutating func append(_ bytes: some Collection<UInt8>) {
        if start > 0, start >= buffer.count / 2 {
            buffer.removeFirst(start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next complete frame, nil when more bytes are needed.
    public mutating func next() throws(IPCError) -> Frame? {
        if let failure { throw failure }
        let available = buffer.count - start
        guard available >= 4 else { return nil }
        var length = 0
        for i in 0..<4 { length = length << 8 | Int(buffer[start + i]) }
        guard length >= 1 else { return try fail(.malformed, "a frame of length 0") }
        guard length - 1 <= maximumPayload else {
            return try fail(.frameTooLarge, "a frame of \(length - 1) bytes (the limit is \(maximumPayload))")
        }
        // The kind is checked as soon as its byte is here (as `takeLargeFrameHead` does):
        // a bad frame fails the same way however much of it has arrived.
        guard available >= 5 else { return nil }
        let kindByte = buffer[start + 4]
        guard let kind = Frame.Kind(rawValue: kindByte) else {
            return try fail(.malformed, "unknown frame kind \(kindByte)")
        }
        guard available >= 4 + length else { return nil }
        let payload = Array(buffer[(start + 5)..<(start + 4 + length)])
        start += 4 + length
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 16)
            start = 0
        }
        return Frame(kind: kind, payload: payload)
    }

    /// The frame at the head of the buffer when it is large (a payload of at least
    /// `minimum` bytes) and not all here yet: its kind, its payload's length, and the part
    /// of the payload already buffered, which is taken out of the decoder. The caller reads
    /// the rest of the payload itself, straight into the payload's own storage (a body
    /// chunk is then copied once from the kernel, not through a read buffer and this
    /// decoder's). Nil when the head is a complete frame, a small one, or not yet a whole
    /// header; a bad header fails as `next()` would.
    public mutating func takeLargeFrameHead(minimum: Int) throws(IPCError) -> (kind: Frame.Kind, length: Int, head: [UInt8])? {
        if let failure { throw failure }
        let available = buffer.count - start
        guard available >= 5 else { return nil }
        var length = 0
        for i in 0..<4 { length = length << 8 | Int(buffer[start + i]) }
        guard length >= 1 else { _ = try fail(.malformed, "a frame of length 0"); return nil }
        guard length - 1 <= maximumPayload else {
            _ = try fail(.frameTooLarge, "a frame of \(length - 1) bytes (the limit is \(maximumPayload))")
            return nil
        }
        guard available < 4 + length, length - 1 >= max(1, minimum) else { return nil }
        let kindByte = buffer[start + 4]
        guard let kind = Frame.Kind(rawValue: kindByte) else { _ = try fail(.malformed, "unknown frame kind \(kindByte)"); return nil }
        let head = Array(buffer[(start + 5)...])
        buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 16)
        start = 0
        return (kind, length - 1, head)
    }

    private mutating func fail(_ code: IPCError.Code, _ message: String) throws(IPCError) -> Frame? {
        let e = IPCError(code, message)
        failure = e
        throw e
    }
}
