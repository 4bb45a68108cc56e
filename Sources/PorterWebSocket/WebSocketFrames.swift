import Foundation
import PorterCore
import PorterSession

/// RFC 6455 framing, client side: frames from the server are parsed with every check
/// §5 asks of a client (no mask, no reserved bits beyond an agreed extension's, known
/// opcodes, short unfragmented control frames, bounded lengths); frames to the server
/// are masked.
struct WebSocketFrame: Equatable, Sendable {
    enum Opcode: UInt8, Sendable {
        case continuation = 0, text = 1, binary = 2, close = 8, ping = 9, pong = 10
        var isControl: Bool { rawValue >= 8 }
    }
    var fin: Bool
    var opcode: Opcode
    var payload: [UInt8]
    /// RSV1: the message is compressed (permessage-deflate), on its first frame only.
    var rsv1 = false

    /// The bytes of this frame as a client sends it, masked with `key`.
    func encoded(mask key: (UInt8, UInt8, UInt8, UInt8)) -> [UInt8] {
        let data = payload.withUnsafeBytes { WebSocketFrame.encode(fin: fin, opcode: opcode, rsv1: rsv1, payload: $0, mask: key) }
        return Array(data)
    }

    /// A client frame's header for a payload of `length` bytes: at most 14 bytes.
    static func header(fin: Bool, opcode: Opcode, rsv1: Bool, length n: Int, mask key: (UInt8, UInt8, UInt8, UInt8)) -> [UInt8] {
        var header: [UInt8] = [(fin ? 0x80 : 0) | (rsv1 ? 0x40 : 0) | opcode.rawValue]
        if n < 126 {
            header.append(0x80 | UInt8(n))
        } else if n <= 0xFFFF {
            header += [0x80 | 126, UInt8(n >> 8), UInt8(n & 0xFF)]
        } else {
            header.append(0x80 | 127)
            for shift in stride(from: 56, through: 0, by: -8) { header.append(UInt8((UInt64(n) >> UInt64(shift)) & 0xFF)) }
        }
        return header + [key.0, key.1, key.2, key.3]
    }
    static let largestHeader = 14

    /// One client frame in one buffer: the header, then `payload` masked while it is
    /// copied (the only copy of a message on its way out).
    static func encode(fin: Bool, opcode: Opcode, rsv1: Bool, payload: UnsafeRawBufferPointer,
                       mask key: (UInt8, UInt8, UInt8, UInt8)) -> Data {
        masked(header: header(fin: fin, opcode: opcode, rsv1: rsv1, length: payload.count, mask: key), payload: payload, key: key)
    }

    /// `header` (possibly empty), then `payload` masked while it is copied. A frame sent a
    /// piece at a time gives each piece that starts at a multiple of 4 of its payload
    /// here (the mask's phase starts over every four bytes), the header with the first.
    static func masked(header: [UInt8], payload: UnsafeRawBufferPointer, key: (UInt8, UInt8, UInt8, UInt8)) -> Data {
        var out = Data(count: header.count + payload.count)
        out.withUnsafeMutableBytes { raw in
            raw.copyBytes(from: header)
            mask(UnsafeMutableRawBufferPointer(rebasing: raw[header.count...]), from: payload, key: key)
        }
        return out
    }

    /// A frame around a payload already in `buffer` after `largestHeader` bytes of room:
    /// the header goes into the room, the payload is masked where it is, and the unused
    /// room is dropped (no second buffer for a compressed message).
    static func encodeInPlace(_ buffer: inout Data, fin: Bool, opcode: Opcode, rsv1: Bool,
                              mask key: (UInt8, UInt8, UInt8, UInt8)) {
        let length = buffer.count - largestHeader
        let header = header(fin: fin, opcode: opcode, rsv1: rsv1, length: length, mask: key)
        let skip = largestHeader - header.count
        buffer.withUnsafeMutableBytes { raw in
            UnsafeMutableRawBufferPointer(rebasing: raw[skip..<largestHeader]).copyBytes(from: header)
            let payload = UnsafeMutableRawBufferPointer(rebasing: raw[largestHeader...])
            mask(payload, from: UnsafeRawBufferPointer(payload), key: key)
        }
        if skip > 0 { buffer.removeSubrange(0..<skip) }
    }

    /// `out` = `payload` XOR the mask (they may be the same bytes).
    private static func mask(_ out: UnsafeMutableRawBufferPointer, from payload: UnsafeRawBufferPointer,
                             key: (UInt8, UInt8, UInt8, UInt8)) {
        let mask = [key.0, key.1, key.2, key.3]
        let n = payload.count
        // Eight bytes at a time (a large message is masked in a moment even unoptimised):
        // the mask repeats every four bytes, so one word holds it twice.
        let word = (mask + mask).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
        var i = 0
        while i + 8 <= n {
            out.storeBytes(of: payload.loadUnaligned(fromByteOffset: i, as: UInt64.self) ^ word, toByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < n {
            out[i] = payload[i] ^ mask[i & 3]
            i += 1
        }
    }
}

/// A violation of RFC 6455 by the server: the connection fails with `code`.
struct WebSocketProtocolError: Error, Equatable, Sendable {
    var code: WebSocketTask.CloseCode
    var message: String
}

/// What the parser gives, in order: a control frame whole (at most 125 bytes), or a data
/// frame as its head and then its payload in the pieces it arrived in, so a large message
/// is never held twice (once in frames, once joined).
enum WebSocketFramePiece: Equatable, Sendable {
    case control(WebSocketFrame)
    /// A text, binary or continuation frame begins; `length` bytes follow as `.payload`.
    case dataHead(fin: Bool, opcode: WebSocketFrame.Opcode, rsv1: Bool, length: Int)
    /// Bytes of the current data frame's payload; `frameEnds` on its last (an empty
    /// frame gives one empty piece).
    case payload(ArraySlice<UInt8>, frameEnds: Bool)
}

/// Cuts the server's bytes into frames. Bytes may come in any pieces; the frames and
/// the first error are the same however they were cut, and after an error the parser
/// stays failed.
struct WebSocketFrameParser: Sendable {
    /// The largest payload one frame may carry (a larger one fails with 1009 before its
    /// bytes are buffered).
    var maximumPayload: Int
    /// RSV1 is allowed (permessage-deflate was agreed).
    var allowsRSV1 = false
    private var buffer: [UInt8] = []
    private var start = 0
    private var failure: WebSocketProtocolError?
    /// Bytes of the current data frame's payload still to come; nil between frames.
    private var remaining: Int?

    init(maximumPayload: Int) {
        self.maximumPayload = min(max(125, maximumPayload), WebSocketTask.largestMessageSize)
    }

    /// Bytes waiting to form a frame.
    var bufferedCount: Int { buffer.count - start }

    mutating func append<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        if start > 0 && start >= buffer.count / 2 {
            buffer.removeFirst(start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next piece, nil when more bytes are needed.
    mutating func next() throws(WebSocketProtocolError) -> WebSocketFramePiece? {
        if let failure { throw failure }
        do {
            return try parse()
        } catch {
            failure = error
            throw error
        }
    }

    private mutating func consume(_ n: Int) {
        start += n
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        }
    }

    private mutating func parse() throws(WebSocketProtocolError) -> WebSocketFramePiece? {
        let available = buffer.count - start
        if let left = remaining {
            guard available > 0 || left == 0 else { return nil }
            let n = min(left, available)
            let piece = buffer[start..<(start + n)]
            remaining = left - n == 0 ? nil : left - n
            consume(n)
            return .payload(piece, frameEnds: remaining == nil)
        }
        guard available >= 2 else { return nil }
        let b0 = buffer[start], b1 = buffer[start + 1]
        let rsv1 = b0 & 0x40 != 0
        if b0 & 0x30 != 0 || (rsv1 && !allowsRSV1) {
            throw WebSocketProtocolError(code: .protocolError, message: "a frame has reserved bits set that no agreed extension uses")
        }
        guard let opcode = WebSocketFrame.Opcode(rawValue: b0 & 0x0F) else {
            throw WebSocketProtocolError(code: .protocolError, message: "a frame has the unknown opcode \(b0 & 0x0F)")
        }
        let fin = b0 & 0x80 != 0
        if b1 & 0x80 != 0 {
            throw WebSocketProtocolError(code: .protocolError, message: "the server masked a frame (RFC 6455 §5.1)")
        }
        var length = UInt64(b1 & 0x7F)
        var header = 2
        if length == 126 {
            guard available >= 4 else { return nil }
            length = UInt64(buffer[start + 2]) << 8 | UInt64(buffer[start + 3])
            header = 4
        } else if length == 127 {
            guard available >= 10 else { return nil }
            length = 0
            for i in 0..<8 { length = length << 8 | UInt64(buffer[start + 2 + i]) }
            if length >> 63 != 0 {
                throw WebSocketProtocolError(code: .protocolError, message: "a frame length has its most significant bit set")
            }
            header = 10
        }
        if opcode.isControl {
            guard fin else {
                throw WebSocketProtocolError(code: .protocolError, message: "a control frame was fragmented")
            }
            guard length <= 125 else {
                throw WebSocketProtocolError(code: .protocolError, message: "a control frame carries more than 125 bytes")
            }
            guard !rsv1 else {
                throw WebSocketProtocolError(code: .protocolError, message: "a control frame has RSV1 set")
            }
            let total = header + Int(length)
            guard available >= total else { return nil }
            let payload = Array(buffer[(start + header)..<(start + total)])
            consume(total)
            return .control(WebSocketFrame(fin: fin, opcode: opcode, payload: payload))
        }
        guard length <= UInt64(maximumPayload) else {
            throw WebSocketProtocolError(code: .messageTooBig, message: "a frame of \(length) bytes is larger than the limit (\(maximumPayload))")
        }
        consume(header)
        remaining = Int(length)
        return .dataHead(fin: fin, opcode: opcode, rsv1: rsv1, length: Int(length))
    }
}
