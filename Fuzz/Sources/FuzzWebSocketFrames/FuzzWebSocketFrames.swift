// RFC 6455 framing (Sources/PorterWebSocket/WebSocketFrames.swift): bytes from a WebSocket
// server. Whatever arrives, in whatever pieces, the parser hands out the same frames and
// the same first error and stays failed; the assembler turns them into the same events
// without trapping (with permessage-deflate on for an odd second byte: any compressed
// data inflates within the message limit or fails); a frame that parses is the frame a
// server would have sent; and the handshake answer's parser and checks (the extension
// negotiation included) never trap on any head.
import Foundation
import FuzzDriver
@testable import PorterWebSocket

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let deflate = bytes.count > 1 && bytes[1] & 1 == 1
    func run(step: Int) -> ([WebSocketFrame], [WebSocketEvent], WebSocketProtocolError?) {
        // An odd first byte: the largest limit an application can set (lengths near
        // Int.max must be refused, not overflow).
        var parser = WebSocketFrameParser(maximumPayload: (bytes.first ?? 0) & 1 == 1 ? .max : 4096)
        var assembler = WebSocketMessageAssembler(maximumMessageSize: 8192)
        if deflate {
            parser.allowsRSV1 = true
            assembler.inflater = WebSocketDeflateStream.inflater()
        }
        var frames: [WebSocketFrame] = []
        var events: [WebSocketEvent] = []
        var i = 0
        while i < bytes.count {
            parser.append(bytes[i..<min(bytes.count, i + step)])
            i += step
            while true {
                let piece: WebSocketFramePiece?
                do {
                    piece = try parser.next()
                } catch {
                    // A failed parser stays failed.
                    guard (try? parser.next()) == nil else { fatalError("the parser went on after an error") }
                    return (frames, events, error)
                }
                guard let piece else { break }
                // Frames joined from their pieces (a data frame's bytes may come in several).
                switch piece {
                case .control(let f): frames.append(f)
                case .dataHead(let fin, let opcode, let rsv1, _): frames.append(WebSocketFrame(fin: fin, opcode: opcode, payload: [], rsv1: rsv1))
                case .payload(let b, _): frames[frames.count - 1].payload += b
                }
                do {
                    if let e = try assembler.take(piece) { events.append(e) }
                } catch {
                    return (frames, events, error)
                }
            }
        }
        return (frames, events, nil)
    }
    let whole = run(step: max(1, bytes.count))
    let pieces = run(step: Int(bytes.first ?? 1) % 13 + 1)
    // After an error the last frame holds what had come of it, which depends on the cut.
    let settled = whole.2 == nil ? whole.0.count : max(0, whole.0.count - 1)
    guard whole.0.count == pieces.0.count, Array(whole.0.prefix(settled)) == Array(pieces.0.prefix(settled)),
          whole.1 == pieces.1, whole.2 == pieces.2 else {
        fatalError("the frames depend on how the bytes were cut")
    }
    for frame in whole.0 where whole.2 == nil {
        // A client's encoding of the same frame, unmasked, is the server's bytes again.
        var encoded = frame.encoded(mask: (0, 0, 0, 0))
        encoded[1] &= 0x7F
        let keyStart = encoded.count - frame.payload.count - 4
        encoded.removeSubrange(keyStart..<(keyStart + 4))
        var again = WebSocketFrameParser(maximumPayload: .max)
        again.allowsRSV1 = true
        again.append(encoded)
        var rebuilt: WebSocketFrame?
        while let piece = try? again.next() {
            switch piece {
            case .control(let f): rebuilt = f
            case .dataHead(let fin, let opcode, let rsv1, _): rebuilt = WebSocketFrame(fin: fin, opcode: opcode, payload: [], rsv1: rsv1)
            case .payload(let b, _): rebuilt?.payload += b
            }
        }
        guard rebuilt == frame else { fatalError("a parsed frame does not survive encoding") }
    }
    if let head = try? WebSocketHandshake.parseHead(bytes) {
        _ = try? WebSocketHandshake.validate(head, key: "dGhlIHNhbXBsZSBub25jZQ==", offered: ["chat"], deflate: PerMessageDeflate())
    }
    _ = WebSocketTask.endOfHead(bytes)
    return 0
}

@_cdecl("FuzzWebSocketFrames_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
