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
        /// A message in the service's own fixed binary layout: for the few sent per body
        /// chunk or per flow-control step, where JSON's cost shows. The service decodes and
        /// checks it (a layout it does not know is malformed).
        case compact = 5
    }

    /// The bytes before a frame's payload: its length (payload + kind) and its kind.
    public static let headerLength = 5

    /// Writes the header of a frame of `kind` with a payload of `payloadLength` bytes into
    /// the first 5 bytes of `to`.
    public static func writeHeader(kind: Kind, payloadLength: Int, to out: UnsafeMutableRawPointer) {
        let length = UInt32(truncatingIfNeeded: payloadLength + 1)
        out.storeBytes(of: length.bigEndian, as: UInt32.self)
        out.storeBytes(of: kind.rawValue, toByteOffset: 4, as: UInt8.self)
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

    /// The frame at the head of the buffer: its payload's length, and its kind once that
    /// byte is here. Fails (and stays failed) on a zero length, a length over the limit,
    /// or an unknown kind — as soon as the byte that shows it has arrived, so a bad frame
    /// fails the same way however much of it has arrived and whoever reads it.
    private mutating func head() throws(IPCError) -> (length: Int, kind: Frame.Kind?)? {
        if let failure { throw failure }
        let available = buffer.count - start
        guard available >= 4 else { return nil }
        var length = 0
        for i in 0..<4 { length = length << 8 | Int(buffer[start + i]) }
        guard length >= 1 else { _ = try fail(.malformed, "a frame of length 0"); return nil }
        guard length - 1 <= maximumPayload else {
            _ = try fail(.frameTooLarge, "a frame of \(length - 1) bytes (the limit is \(maximumPayload))")
            return nil
        }
        guard available >= 5 else { return (length - 1, nil) }
        let kindByte = buffer[start + 4]
        guard let kind = Frame.Kind(rawValue: kindByte) else {
            _ = try fail(.malformed, "unknown frame kind \(kindByte)")
            return nil
        }
        return (length - 1, kind)
    }

    /// The kind of the frame at the head of the buffer, once its header is here.
    public mutating func headKind() throws(IPCError) -> Frame.Kind? {
        try head()?.kind
    }

    /// The next complete frame, nil when more bytes are needed.
    public mutating func next() throws(IPCError) -> Frame? {
        guard let (length, kind) = try head(), let kind, buffer.count - start >= 5 + length else { return nil }
        let payload = Array(buffer[(start + 5)..<(start + 5 + length)])
        consume(5 + length)
        return Frame(kind: kind, payload: payload)
    }

    private mutating func consume(_ n: Int) {
        start += n
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 16)
            start = 0
        }
    }

    /// The length of a data frame's tag (`takeTaggedDataHead`).
    public static let tagLength = 8

    /// When the frame at the head is a data frame whose header and tag (the first 8 bytes
    /// of its payload, big-endian: which stream the bytes belong to) are here: takes them
    /// out and returns the tag and the length of the rest of the payload (the body). The
    /// body follows: first what is buffered (`takeBuffered`), then the stream. Nil for a
    /// frame of another kind or a head not yet here; a data frame too short for its tag is
    /// malformed.
    public mutating func takeTaggedDataHead() throws(IPCError) -> (tag: UInt64, bodyLength: Int)? {
        guard let (length, kind) = try head(), kind == .data else { return nil }
        guard length >= Self.tagLength else {
            _ = try fail(.malformed, "a data frame of \(length) bytes, too short for its tag")
            return nil
        }
        guard buffer.count - start >= 5 + Self.tagLength else { return nil }
        var tag: UInt64 = 0
        for i in 0..<Self.tagLength { tag = tag << 8 | UInt64(buffer[start + 5 + i]) }
        consume(5 + Self.tagLength)
        return (tag, length - Self.tagLength)
    }

    /// Moves up to `target.count` buffered bytes into `target` (the body of a data frame
    /// whose head `takeTaggedDataHead` took); returns how many.
    public mutating func takeBuffered(into target: UnsafeMutableRawBufferPointer) -> Int {
        let n = min(target.count, buffer.count - start)
        guard n > 0, let to = target.baseAddress else { return 0 }
        buffer.withUnsafeBytes { to.copyMemory(from: $0.baseAddress! + start, byteCount: n) }
        consume(n)
        return n
    }

    /// The frame at the head of the buffer when it is large (a payload of at least
    /// `minimum` bytes) and not all here yet: its kind, its payload's length, and the part
    /// of the payload already buffered, which is taken out of the decoder. The caller reads
    /// the rest of the payload itself, straight into the payload's own storage (a body
    /// chunk is then copied once from the kernel, not through a read buffer and this
    /// decoder's). Nil when the head is a complete frame, a small one, or not yet a whole
    /// header; a bad header fails as `next()` would.
    public mutating func takeLargeFrameHead(minimum: Int) throws(IPCError) -> (kind: Frame.Kind, length: Int, head: [UInt8])? {
        guard let (length, kind) = try head(), let kind else { return nil }
        guard buffer.count - start < 5 + length, length >= max(1, minimum) else { return nil }
        let buffered = Array(buffer[(start + 5)...])
        buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 16)
        start = 0
        return (kind, length, buffered)
    }

    private mutating func fail(_ code: IPCError.Code, _ message: String) throws(IPCError) -> Frame? {
        let e = IPCError(code, message)
        failure = e
        throw e
    }
}
