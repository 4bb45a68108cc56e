// RFC 6455 framing (Sources/PorterSession/WebSocketFrames.swift): bytes from a WebSocket
// server. Whatever arrives, in whatever pieces, the parser hands out the same frames and
// the same first error and stays failed; the assembler turns them into the same events
// without trapping; a frame that parses is the frame a server would have sent; and the
// handshake answer's parser and checks never trap on any head.
import Foundation
import FuzzDriver
@testable import PorterSession

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    func run(step: Int) -> ([WebSocketFrame], [WebSocketEvent], WebSocketProtocolError?) {
        // An odd first byte: the largest limit an application can set (lengths near
        // Int.max must be refused, not overflow).
        var parser = WebSocketFrameParser(maximumPayload: (bytes.first ?? 0) & 1 == 1 ? .max : 4096)
        var assembler = WebSocketMessageAssembler(maximumMessageSize: 8192)
        var frames: [WebSocketFrame] = []
        var events: [WebSocketEvent] = []
        var i = 0
        while i < bytes.count {
            parser.append(bytes[i..<min(bytes.count, i + step)])
            i += step
            while true {
                let frame: WebSocketFrame?
                do {
                    frame = try parser.next()
                } catch {
                    // A failed parser stays failed.
                    guard (try? parser.next()) == nil else { fatalError("the parser went on after an error") }
                    return (frames, events, error)
                }
                guard let frame else { break }
                frames.append(frame)
                do {
                    if let e = try assembler.take(frame) { events.append(e) }
                } catch {
                    return (frames, events, error)
                }
            }
        }
        return (frames, events, nil)
    }
    let whole = run(step: max(1, bytes.count))
    let pieces = run(step: Int(bytes.first ?? 1) % 13 + 1)
    guard whole.0 == pieces.0, whole.1 == pieces.1, whole.2 == pieces.2 else {
        fatalError("the frames depend on how the bytes were cut")
    }
    for frame in whole.0 {
        // A client's encoding of the same frame, unmasked, is the server's bytes again.
        var encoded = frame.encoded(mask: (0, 0, 0, 0))
        encoded[1] &= 0x7F
        let keyStart = encoded.count - frame.payload.count - 4
        encoded.removeSubrange(keyStart..<(keyStart + 4))
        var again = WebSocketFrameParser(maximumPayload: .max)
        again.append(encoded)
        guard (try? again.next()) == frame else { fatalError("a parsed frame does not survive encoding") }
    }
    if let head = try? WebSocketHandshake.parseHead(bytes) {
        _ = try? WebSocketHandshake.validate(head, key: "dGhlIHNhbXBsZSBub25jZQ==", offered: ["chat"])
    }
    _ = WebSocketTask.endOfHead(bytes)
    return 0
}

@_cdecl("FuzzWebSocketFrames_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
