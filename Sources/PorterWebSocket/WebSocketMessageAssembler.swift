import Foundation
import PorterCore
import PorterSession

/// What the frames of a connection mean, in order: whole messages (fragments joined,
/// inflated when compressed, text checked as UTF-8), pings, pongs and the close.
enum WebSocketEvent: Equatable, Sendable {
    case message(WebSocketTask.Message)
    case ping([UInt8])
    case pong([UInt8])
    /// The server's close: its code (nil when it sent none) and reason.
    case close(WebSocketTask.CloseCode?, Data)
}

/// Joins fragments into messages (RFC 6455 §5.4): a continuation needs a message in
/// progress, a new message may not start inside one, control frames may come between
/// fragments, and a message may not pass `maximumMessageSize`. A message is assembled
/// in one buffer (sized up front when its length is known); text is checked as it
/// arrives, so invalid UTF-8 fails at the fragment that carries it.
struct WebSocketMessageAssembler {
    var maximumMessageSize: Int
    /// Inflates compressed (RSV1) messages when permessage-deflate was agreed.
    var inflater: WebSocketDeflateStream?
    /// The server starts each message with an empty window: the inflater is reset after each.
    var resetsInflaterPerMessage = false
    private var kind: WebSocketFrame.Opcode?
    private var compressed = false
    private var frameFin = false
    private var bytes = Data()
    private var utf8 = UTF8Validator()

    init(maximumMessageSize: Int) {
        self.maximumMessageSize = maximumMessageSize
    }

    /// Bytes of a message still in fragments.
    var pendingCount: Int { bytes.count }

    mutating func take(_ piece: WebSocketFramePiece) throws(WebSocketProtocolError) -> WebSocketEvent? {
        switch piece {
        case .control(let frame):
            switch frame.opcode {
            case .ping: return .ping(frame.payload)
            case .pong: return .pong(frame.payload)
            default: return try WebSocketMessageAssembler.close(frame.payload)
            }
        case .dataHead(let fin, let opcode, let rsv1, let length):
            if opcode == .continuation {
                guard kind != nil else {
                    throw WebSocketProtocolError(code: .protocolError, message: "a continuation frame came with no message to continue")
                }
                guard !rsv1 else {
                    throw WebSocketProtocolError(code: .protocolError, message: "a continuation frame has RSV1 set")
                }
            } else {
                guard kind == nil else {
                    throw WebSocketProtocolError(code: .protocolError, message: "a new message began before the last one ended")
                }
                guard !rsv1 || inflater != nil else {
                    throw WebSocketProtocolError(code: .protocolError, message: "a frame has RSV1 set and no compression was agreed")
                }
                kind = opcode
                compressed = rsv1
                utf8 = UTF8Validator()
                bytes = Data()
                // One buffer for the message: its size is known when it comes in one frame
                // (compressed, its frame's length is where the inflated bytes start: an
                // incompressible message inflates to about that, and a buffer grown by
                // doubling from nothing would leave the smaller ones behind resident).
                if fin && length <= maximumMessageSize { bytes.reserveCapacity(length) }
            }
            if !compressed && bytes.count + length > maximumMessageSize { throw tooBig(bytes.count + length) }
            frameFin = fin
            return nil
        case .payload(let slice, let frameEnds):
            guard let kind else { return nil }
            let ends = frameEnds && frameFin
            let badText = WebSocketProtocolError(code: .invalidFramePayloadData, message: "a text message is not valid UTF-8")
            if compressed, let inflater {
                // Checked as it inflates: the first fault in the message's bytes is the one reported.
                let text = kind == .text
                var validator = utf8
                try inflater.inflate(slice, end: ends, onto: &bytes, limit: maximumMessageSize) { chunk in
                    text && !validator.take(chunk) ? badText : nil
                }
                utf8 = validator
            } else {
                if kind == .text {
                    guard slice.withUnsafeBytes({ utf8.take($0) }) else { throw badText }
                }
                bytes.append(contentsOf: slice)
            }
            guard ends else { return nil }
            if kind == .text && !utf8.isComplete {
                throw WebSocketProtocolError(code: .invalidFramePayloadData, message: "a text message ends inside a UTF-8 sequence")
            }
            if compressed && resetsInflaterPerMessage { inflater?.reset() }
            self.kind = nil
            let whole = bytes
            bytes = Data()
            // Checked above: decoding cannot replace anything.
            return .message(kind == .text ? .string(String(decoding: whole, as: UTF8.self)) : .data(whole))
        }
    }

    private func tooBig(_ size: Int) -> WebSocketProtocolError {
        WebSocketProtocolError(code: .messageTooBig,
                               message: "a message of at least \(size) bytes is larger than maximumMessageSize (\(maximumMessageSize))")
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

/// UTF-8 checked a piece at a time (RFC 3629: no overlong forms, no surrogates, nothing
/// past U+10FFFF): a sequence may be cut between pieces, an invalid byte is found in the
/// piece that carries it.
struct UTF8Validator: Sendable {
    /// Continuation bytes still expected, and the range the next one must fall in.
    private var needed = 0
    private var low: UInt8 = 0x80
    private var high: UInt8 = 0xBF

    /// Whether the bytes so far could begin valid UTF-8.
    mutating func take(_ bytes: UnsafeRawBufferPointer) -> Bool {
        for b in bytes {
            if needed > 0 {
                guard b >= low && b <= high else { return false }
                needed -= 1
                low = 0x80
                high = 0xBF
                continue
            }
            switch b {
            case 0x00...0x7F: continue
            case 0xC2...0xDF: needed = 1
            case 0xE0: needed = 2; low = 0xA0
            case 0xE1...0xEC, 0xEE, 0xEF: needed = 2
            case 0xED: needed = 2; high = 0x9F
            case 0xF0: needed = 3; low = 0x90
            case 0xF1...0xF3: needed = 3
            case 0xF4: needed = 3; high = 0x8F
            default: return false
            }
        }
        return true
    }

    /// No sequence is left open.
    var isComplete: Bool { needed == 0 }
}
