import XCTest
import HTTPTypes
import PorterTestSupport
@testable import Porter
@testable import PorterWebSocket

final class WebSocketFramingTests: XCTestCase {
    func testAcceptValueOfRFC6455Example() {
        // RFC 6455 §1.3's example key and answer.
        XCTAssertEqual(WebSocketHandshake.accept(forKey: "dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    func testFramesParseTheSameInAnyPieces() throws {
        let frames = [WebSocketFrame(fin: false, opcode: .text, payload: Array("héllo".utf8)),
                      WebSocketFrame(fin: true, opcode: .ping, payload: [1, 2]),
                      WebSocketFrame(fin: true, opcode: .continuation, payload: Array(repeating: 65, count: 70_000))]
        var bytes: [UInt8] = []
        for f in frames { bytes += Self.serverBytes(f) }
        for step in [1, 2, 3, 7, 126, bytes.count] {
            var p = WebSocketFrameParser(maximumPayload: 1 << 20)
            var got: [WebSocketFrame] = []
            var i = 0
            while i < bytes.count {
                p.append(bytes[i..<min(bytes.count, i + step)])
                i += step
                while let piece = try p.next() {
                    switch piece {
                    case .control(let f): got.append(f)
                    case .dataHead(let fin, let opcode, _, _): got.append(WebSocketFrame(fin: fin, opcode: opcode, payload: []))
                    case .payload(let bytes, _): got[got.count - 1].payload += bytes
                    }
                }
            }
            XCTAssertEqual(got, frames, "step \(step)")
        }
    }

    /// A frame header claiming 2^63-1 bytes with the limit at its largest: refused (1009),
    /// not an overflow.
    func testHugeLengthWithTheLargestLimit() {
        var p = WebSocketFrameParser(maximumPayload: .max)
        p.append([0x82, 0x7F, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF])
        XCTAssertThrowsError(try p.next()) { XCTAssertEqual(($0 as? WebSocketProtocolError)?.code, .messageTooBig) }
        XCTAssertEqual(WebSocketTask.closeReason(Data(String(repeating: "é", count: 100).utf8)).count, 122,
                       "a close reason is cut at a character boundary")
    }

    func testClientFramesAreMasked() {
        let f = WebSocketFrame(fin: true, opcode: .text, payload: Array("abc".utf8))
        let bytes = f.encoded(mask: (1, 2, 3, 4))
        XCTAssertEqual(bytes, [0x81, 0x83, 1, 2, 3, 4, 0x61 ^ 1, 0x62 ^ 2, 0x63 ^ 3])
        // Every length around the 8-byte steps and the 16- and 64-bit length forms.
        for n in [0, 1, 7, 8, 9, 15, 16, 17, 125, 126, 127, 65535, 65536, 70001] {
            let payload = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let encoded = WebSocketFrame(fin: true, opcode: .binary, payload: payload).encoded(mask: (9, 8, 7, 6))
            let key = [UInt8](encoded[(encoded.count - n - 4)..<(encoded.count - n)])
            XCTAssertEqual(key, [9, 8, 7, 6], "length \(n)")
            let unmasked = encoded.suffix(n).enumerated().map { $0.element ^ key[$0.offset & 3] }
            XCTAssertEqual(unmasked, payload, "length \(n)")
        }
    }

    /// Feeds a whole frame to an assembler as the parser would.
    private static func take(_ a: inout WebSocketMessageAssembler, _ f: WebSocketFrame) throws -> WebSocketEvent? {
        if f.opcode.isControl { return try a.take(.control(f)) }
        _ = try a.take(.dataHead(fin: f.fin, opcode: f.opcode, rsv1: f.rsv1, length: f.payload.count))
        return try a.take(.payload(f.payload[...], frameEnds: true))
    }

    func testAssemblerRules() throws {
        var a = WebSocketMessageAssembler(maximumMessageSize: 10)
        XCTAssertNil(try Self.take(&a, WebSocketFrame(fin: false, opcode: .binary, payload: [1])))
        XCTAssertEqual(try Self.take(&a, WebSocketFrame(fin: true, opcode: .ping, payload: [])), .ping([]))
        XCTAssertThrowsError(try Self.take(&a, WebSocketFrame(fin: true, opcode: .text, payload: [])))
        var b = WebSocketMessageAssembler(maximumMessageSize: 10)
        XCTAssertNil(try Self.take(&b, WebSocketFrame(fin: false, opcode: .binary, payload: Array(repeating: 0, count: 6))))
        XCTAssertThrowsError(try Self.take(&b, WebSocketFrame(fin: true, opcode: .continuation, payload: Array(repeating: 0, count: 6)))) {
            XCTAssertEqual(($0 as? WebSocketProtocolError)?.code, .messageTooBig)
        }
        var c = WebSocketMessageAssembler(maximumMessageSize: 10)
        XCTAssertEqual(try Self.take(&c, WebSocketFrame(fin: true, opcode: .close, payload: [])), .close(nil, Data()))
        XCTAssertThrowsError(try Self.take(&c, WebSocketFrame(fin: true, opcode: .close, payload: [3, 0xE8, 0xFF])))   // bad UTF-8 reason
        XCTAssertThrowsError(try Self.take(&c, WebSocketFrame(fin: true, opcode: .close, payload: [0x03, 0xEE])))   // 1006
        XCTAssertEqual(try Self.take(&c, WebSocketFrame(fin: true, opcode: .close, payload: [0x0F, 0xA1, 0x62])),
                       .close(WebSocketTask.CloseCode(rawValue: 4001), Data("b".utf8)))
        // RSV1 with no compression agreed; RSV1 on a continuation.
        var d = WebSocketMessageAssembler(maximumMessageSize: 10)
        XCTAssertThrowsError(try Self.take(&d, WebSocketFrame(fin: true, opcode: .text, payload: [], rsv1: true)))
    }

    /// UTF-8 is checked a piece at a time: a character cut between pieces is fine, a bad
    /// byte fails in the piece that carries it, an open sequence at the end fails.
    func testIncrementalUTF8() {
        func check(_ pieces: [[UInt8]]) -> [Bool] {
            var v = UTF8Validator()
            return pieces.map { p in p.withUnsafeBytes { v.take($0) } } + [v.isComplete]
        }
        let check1 = Array("✓".utf8)   // E2 9C 93
        XCTAssertEqual(check([[check1[0]], [check1[1]], [check1[2], 0x41]]), [true, true, true, true])
        XCTAssertEqual(check([[0x41], [0xFF], [0x41]]), [true, false, true, true])
        XCTAssertEqual(check([[0xE2, 0x9C]]), [true, false])
        // Overlong, surrogate, past U+10FFFF.
        XCTAssertEqual(check([[0xC0, 0x80]]).first, false)
        XCTAssertEqual(check([[0xED, 0xA0, 0x80]]).first, false)
        XCTAssertEqual(check([[0xF4, 0x90, 0x80, 0x80]]).first, false)
        XCTAssertEqual(check([[0xF0, 0x9F, 0x98, 0x80]]), [true, true])
    }

    func testDeflateNegotiation() throws {
        let offer = PerMessageDeflate(clientMaxWindowBits: 10, serverMaxWindowBits: 11, clientNoContextTakeover: true,
                                      serverNoContextTakeover: true)
        XCTAssertEqual(offer.offer, "permessage-deflate; client_no_context_takeover; server_no_context_takeover; "
                       + "server_max_window_bits=11; client_max_window_bits=10")
        XCTAssertNil(try PerMessageDeflate.agreed([], offered: offer))
        let agreed = try PerMessageDeflate.agreed(["permessage-deflate; server_no_context_takeover; server_max_window_bits=9"],
                                                  offered: offer)
        XCTAssertEqual(agreed, PerMessageDeflate(clientMaxWindowBits: 10, serverMaxWindowBits: 9, clientNoContextTakeover: true,
                                                 serverNoContextTakeover: true))
        for bad in ["permessage-deflate; server_no_context_takeover; server_max_window_bits=12",   // larger than asked
                    "permessage-deflate; server_max_window_bits=9",                              // dropped no_context_takeover
                    "permessage-deflate; server_no_context_takeover; server_no_context_takeover; server_max_window_bits=9",
                    "permessage-deflate; server_no_context_takeover; server_max_window_bits=7",
                    "permessage-deflate; server_no_context_takeover; server_max_window_bits=9; x=1",
                    "x-webkit-deflate-frame", "permessage-deflate, permessage-deflate"] {
            XCTAssertThrowsError(try PerMessageDeflate.agreed([bad], offered: offer), bad)
        }
        XCTAssertThrowsError(try PerMessageDeflate.agreed(["permessage-deflate"], offered: nil))
        XCTAssertThrowsError(try PerMessageDeflate.agreed(["permessage-deflate; client_max_window_bits=10"],
                                                          offered: PerMessageDeflate(clientMaxWindowBits: 9)))
    }

    /// A compressed message inflates into the message buffer a step at a time: one that
    /// passes the limit fails with 1009 without being inflated whole.
    func testInflateIsBoundedByTheMessageLimit() throws {
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        guard let deflater = WebSocketDeflateStream.deflater(windowBits: 15),
              let compressed = zeros.withUnsafeBytes({ deflater.deflate($0) }) else { return XCTFail("zlib") }
        XCTAssertLessThan(compressed.count, 2048)
        var a = WebSocketMessageAssembler(maximumMessageSize: 1 << 20)
        a.inflater = WebSocketDeflateStream.inflater()
        _ = try a.take(.dataHead(fin: true, opcode: .binary, rsv1: true, length: compressed.count))
        XCTAssertEqual(try a.take(.payload(Array(compressed)[...], frameEnds: true)), .message(.data(Data(zeros))))
        var b = WebSocketMessageAssembler(maximumMessageSize: (1 << 20) - 1)
        b.inflater = WebSocketDeflateStream.inflater()
        _ = try b.take(.dataHead(fin: true, opcode: .binary, rsv1: true, length: compressed.count))
        XCTAssertThrowsError(try b.take(.payload(Array(compressed)[...], frameEnds: true))) {
            XCTAssertEqual(($0 as? WebSocketProtocolError)?.code, .messageTooBig)
        }
    }

    static func serverBytes(_ f: WebSocketFrame) -> [UInt8] {
        var out: [UInt8] = [(f.fin ? 0x80 : 0) | f.opcode.rawValue]
        let n = f.payload.count
        if n < 126 { out.append(UInt8(n)) } else if n < 65536 { out += [126, UInt8(n >> 8), UInt8(n & 0xFF)] } else {
            out.append(127)
            for s in stride(from: 56, through: 0, by: -8) { out.append(UInt8((n >> s) & 0xFF)) }
        }
        return out + f.payload
    }
}
