import Foundation

/// RFC 6455 framing, client side: frames from the server are parsed with every check
/// §5 asks of a client (no mask, no reserved bits without an extension, known opcodes,
/// short unfragmented control frames, bounded lengths); frames to the server are masked.
/// No extension is offered, so permessage-deflate never applies.
struct WebSocketFrame: Equatable, Sendable {
    enum Opcode: UInt8, Sendable {
        case continuation = 0, text = 1, binary = 2, close = 8, ping = 9, pong = 10
        var isControl: Bool { rawValue >= 8 }
    }
    var fin: Bool
    var opcode: Opcode
    var payload: [UInt8]

    /// The bytes of this frame as a client sends it, masked with `key`.
    func encoded(mask key: (UInt8, UInt8, UInt8, UInt8)) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(payload.count + 14)
        out.append((fin ? 0x80 : 0) | opcode.rawValue)
        let n = payload.count
        if n < 126 {
            out.append(0x80 | UInt8(n))
        } else if n <= 0xFFFF {
            out.append(0x80 | 126)
            out.append(UInt8(n >> 8))
            out.append(UInt8(n & 0xFF))
        } else {
            out.append(0x80 | 127)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8((UInt64(n) >> UInt64(shift)) & 0xFF)) }
        }
        let mask = [key.0, key.1, key.2, key.3]
        out.append(contentsOf: mask)
        let start = out.count
        out.append(contentsOf: payload)
        // Eight bytes at a time (a large message is masked in a moment even unoptimised):
        // the mask repeats every four bytes, so one word holds it twice.
        let word = (mask + mask).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
        out.withUnsafeMutableBytes { raw in
            var i = start
            while i + 8 <= raw.count {
                raw.storeBytes(of: raw.loadUnaligned(fromByteOffset: i, as: UInt64.self) ^ word, toByteOffset: i, as: UInt64.self)
                i += 8
            }
            while i < raw.count {
                raw[i] ^= mask[(i - start) & 3]
                i += 1
            }
        }
        return out
    }
}

/// A violation of RFC 6455 by the server: the connection fails with `code`.
struct WebSocketProtocolError: Error, Equatable, Sendable {
    var code: WebSocketTask.CloseCode
    var message: String
}

/// Cuts the server's bytes into frames. Bytes may come in any pieces; the frames and
/// the first error are the same however they were cut, and after an error the parser
/// stays failed.
struct WebSocketFrameParser: Sendable {
    /// The largest payload one frame may carry (a larger one fails with 1009 before its
    /// bytes are buffered).
    var maximumPayload: Int
    private var buffer: [UInt8] = []
    private var start = 0
    private var failure: WebSocketProtocolError?

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

    /// The next whole frame, nil when more bytes are needed.
    mutating func next() throws(WebSocketProtocolError) -> WebSocketFrame? {
        if let failure { throw failure }
        do {
            return try parse()
        } catch {
            failure = error
            throw error
        }
    }

    private mutating func parse() throws(WebSocketProtocolError) -> WebSocketFrame? {
        let available = buffer.count - start
        guard available >= 2 else { return nil }
        let b0 = buffer[start], b1 = buffer[start + 1]
        if b0 & 0x70 != 0 {
            throw WebSocketProtocolError(code: .protocolError, message: "a frame has reserved bits set, and no extension was agreed")
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
        }
        guard length <= UInt64(maximumPayload), length <= UInt64(Int.max - header) else {
            throw WebSocketProtocolError(code: .messageTooBig, message: "a frame of \(length) bytes is larger than the limit (\(maximumPayload))")
        }
        let total = header + Int(length)
        guard available >= total else { return nil }
        let payload = Array(buffer[(start + header)..<(start + total)])
        start += total
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        }
        return WebSocketFrame(fin: fin, opcode: opcode, payload: payload)
    }
}

/// What the frames of a connection mean, in order: whole messages (fragments joined,
/// text checked as UTF-8), pings, pongs and the close.
enum WebSocketEvent: Equatable, Sendable {
    case message(WebSocketTask.Message)
    case ping([UInt8])
    case pong([UInt8])
    /// The server's close: its code (nil when it sent none) and reason.
    case close(WebSocketTask.CloseCode?, Data)
}

/// Joins fragments into messages (RFC 6455 §5.4): a continuation needs a message in
/// progress, a new message may not start inside one, control frames may come between
/// fragments, and a message may not pass `maximumMessageSize`.
struct WebSocketMessageAssembler: Sendable {
    var maximumMessageSize: Int
    private var kind: WebSocketFrame.Opcode?
    private var fragments: [UInt8] = []

    init(maximumMessageSize: Int) {
        self.maximumMessageSize = maximumMessageSize
    }

    /// Bytes of a message still in fragments.
    var pendingCount: Int { fragments.count }

    mutating func take(_ frame: WebSocketFrame) throws(WebSocketProtocolError) -> WebSocketEvent? {
        switch frame.opcode {
        case .ping: return .ping(frame.payload)
        case .pong: return .pong(frame.payload)
        case .close: return try WebSocketMessageAssembler.close(frame.payload)
        case .text, .binary:
            guard kind == nil else {
                throw WebSocketProtocolError(code: .protocolError, message: "a new message began before the last one ended")
            }
            guard frame.payload.count <= maximumMessageSize else { throw tooBig(frame.payload.count) }
            if frame.fin { return try WebSocketMessageAssembler.message(frame.opcode, frame.payload) }
            kind = frame.opcode
            fragments = frame.payload
            return nil
        case .continuation:
            guard let kind else {
                throw WebSocketProtocolError(code: .protocolError, message: "a continuation frame came with no message to continue")
            }
            guard fragments.count + frame.payload.count <= maximumMessageSize else {
                throw tooBig(fragments.count + frame.payload.count)
            }
            fragments.append(contentsOf: frame.payload)
            guard frame.fin else { return nil }
            let whole = fragments
            fragments = []
            self.kind = nil
            return try WebSocketMessageAssembler.message(kind, whole)
        }
    }

    private func tooBig(_ size: Int) -> WebSocketProtocolError {
        WebSocketProtocolError(code: .messageTooBig,
                               message: "a message of at least \(size) bytes is larger than maximumMessageSize (\(maximumMessageSize))")
    }

    private static func message(_ kind: WebSocketFrame.Opcode, _ bytes: [UInt8]) throws(WebSocketProtocolError) -> WebSocketEvent {
        if kind == .binary { return .message(.data(Data(bytes))) }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw WebSocketProtocolError(code: .invalidFramePayloadData, message: "a text message is not valid UTF-8")
        }
        return .message(.string(text))
    }

    /// The close frame's code and reason (§5.5.1, §7.4): no body, or a code the server
    /// may send and a UTF-8 reason.
    private static func close(_ payload: [UInt8]) throws(WebSocketProtocolError) -> WebSocketEvent {
        if payload.isEmpty { return .close(nil, Data()) }
        guard payload.count >= 2 else {
            throw WebSocketProtocolError(code: .protocolError, message: "a close frame has a one-byte body")
        }
        let raw = Int(payload[0]) << 8 | Int(payload[1])
        guard WebSocketTask.CloseCode.maySend(raw) else {
            throw WebSocketProtocolError(code: .protocolError, message: "a close frame has the code \(raw), which may not be sent")
        }
        let reason = Array(payload[2...])
        guard String(validating: reason, as: UTF8.self) != nil else {
            throw WebSocketProtocolError(code: .invalidFramePayloadData, message: "a close reason is not valid UTF-8")
        }
        return .close(WebSocketTask.CloseCode(rawValue: raw), Data(reason))
    }
}

/// The opening handshake (RFC 6455 §4.1): the request a client sends, and the checks of
/// the server's answer.
enum WebSocketHandshake {
    static let acceptSuffix = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// Sec-WebSocket-Accept for a key.
    static func accept(forKey key: String) -> String {
        Data(SHA1.hash(Array((key + acceptSuffix).utf8))).base64EncodedString()
    }

    /// The server's answer head, parsed: the status, the fields in order.
    struct Head: Sendable {
        var status: Int
        var reason: String
        var fields: [(name: String, value: String)]
        func values(_ name: String) -> [String] {
            fields.filter { $0.name.caseInsensitiveCompare(name) == .orderedSame }.map(\.value)
        }
    }

    /// Parses a response head (without its final empty line). Throws on anything that
    /// is not HTTP/1.1 with a three-digit status and name: value fields.
    static func parseHead(_ bytes: [UInt8]) throws(WebSocketProtocolError) -> Head {
        guard let text = String(validating: bytes, as: UTF8.self) ?? String(bytes: bytes, encoding: .isoLatin1) else {
            throw WebSocketProtocolError(code: .protocolError, message: "the handshake answer is not text")
        }
        var lines = text.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst()
        let parts = statusLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1].count == 3, let status = Int(parts[1]) else {
            throw WebSocketProtocolError(code: .protocolError, message: "the handshake answer has no HTTP status line")
        }
        var fields: [(String, String)] = []
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex,
                  !line[..<colon].contains(where: { $0 == " " || $0 == "\t" }) else {
                throw WebSocketProtocolError(code: .protocolError, message: "the handshake answer has a malformed field")
            }
            fields.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        return Head(status: status, reason: parts.count > 2 ? String(parts[2]) : "", fields: fields)
    }

    /// Checks a 101 answer against the request: the upgrade, the accept value, and a
    /// subprotocol among those offered. Returns the agreed subprotocol.
    static func validate(_ head: Head, key: String, offered: [String]) throws(WebSocketProtocolError) -> String? {
        guard head.values("Upgrade").contains(where: { $0.caseInsensitiveCompare("websocket") == .orderedSame }) else {
            throw WebSocketProtocolError(code: .protocolError, message: "the server's answer has no 'Upgrade: websocket'")
        }
        let connection = head.values("Connection").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard connection.contains("upgrade") else {
            throw WebSocketProtocolError(code: .protocolError, message: "the server's answer has no 'Connection: Upgrade'")
        }
        guard head.values("Sec-WebSocket-Accept") == [accept(forKey: key)] else {
            throw WebSocketProtocolError(code: .protocolError, message: "the server's Sec-WebSocket-Accept does not answer our key")
        }
        if !head.values("Sec-WebSocket-Extensions").allSatisfy({ $0.isEmpty }) {
            throw WebSocketProtocolError(code: .mandatoryExtensionMissing, message: "the server chose an extension that was not offered")
        }
        let chosen = head.values("Sec-WebSocket-Protocol")
        guard let first = chosen.first else { return nil }
        guard chosen.count == 1, offered.contains(first) else {
            throw WebSocketProtocolError(code: .protocolError, message: "the server chose the subprotocol '\(first)', which was not offered")
        }
        return first
    }
}

/// SHA-1 (FIPS 180-4), only for Sec-WebSocket-Accept, which RFC 6455 defines with it.
enum SHA1 {
    static func hash(_ message: [UInt8]) -> [UInt8] {
        var h: [UInt32] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0]
        var bytes = message
        let bitLength = UInt64(message.count) &* 8
        bytes.append(0x80)
        while bytes.count % 64 != 56 { bytes.append(0) }
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8((bitLength >> UInt64(shift)) & 0xFF)) }
        var w = [UInt32](repeating: 0, count: 80)
        for chunk in stride(from: 0, to: bytes.count, by: 64) {
            for i in 0..<16 {
                let j = chunk + i * 4
                w[i] = UInt32(bytes[j]) << 24 | UInt32(bytes[j + 1]) << 16 | UInt32(bytes[j + 2]) << 8 | UInt32(bytes[j + 3])
            }
            for i in 16..<80 {
                let x = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]
                w[i] = x << 1 | x >> 31
            }
            var (a, b, c, d, e) = (h[0], h[1], h[2], h[3], h[4])
            for i in 0..<80 {
                let f: UInt32, k: UInt32
                switch i {
                case 0..<20: f = (b & c) | (~b & d); k = 0x5A827999
                case 20..<40: f = b ^ c ^ d; k = 0x6ED9EBA1
                case 40..<60: f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC
                default: f = b ^ c ^ d; k = 0xCA62C1D6
                }
                let t = (a << 5 | a >> 27) &+ f &+ e &+ k &+ w[i]
                e = d
                d = c
                c = b << 30 | b >> 2
                b = a
                a = t
            }
            h[0] = h[0] &+ a
            h[1] = h[1] &+ b
            h[2] = h[2] &+ c
            h[3] = h[3] &+ d
            h[4] = h[4] &+ e
        }
        return h.flatMap { v in [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }
    }
}
