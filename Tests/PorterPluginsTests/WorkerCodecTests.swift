import Foundation
import PorterIPC
import XCTest
@testable import PorterPlugins

/// The worker protocol's codec (WorkerCodec): the messages sent per chunk or per
/// flow-control step travel as compact binary frames, the rest as JSON; both decode to
/// what was sent, and a compact frame that is not one of ours is refused, never a trap.
final class WorkerCodecTests: XCTestCase {
    /// Cuts `bytes` (one encoded frame) back into a frame, as a receiver does.
    private func frame(_ bytes: [UInt8]?) throws -> Frame {
        var d = FrameDecoder(maximumPayload: 4 << 20)
        d.append(try XCTUnwrap(bytes))
        let f = try XCTUnwrap(try d.next())
        XCTAssertEqual(d.bufferedCount, 0, "one frame, whole")
        return f
    }

    func testHotWorkerMessagesAreCompactAndRoundTrip() throws {
        let big = Int64.max, negative = Int64.min
        let messages: [FromWorker] = [
            .finish(load: 1), .destroyed(load: UInt64.max), .readBody(load: 7, capacity: 262_144),
            .sent(load: 9, bytes: 1, total: big, expected: negative), .cachedValid(load: 3, revalidated: true),
            .cachedValid(load: 3, revalidated: false),
        ]
        for m in messages {
            let bytes = WorkerCodec.encoded(m)
            let f = try frame(bytes)
            XCTAssertEqual(f.kind, .compact, "\(m)")
            XCTAssertLessThanOrEqual(f.payload.count, 9 + 3 * 8)
            let back = try WorkerCodec.decode(FromWorker.self, from: f)
            XCTAssertEqual(WorkerCodec.encoded(back), bytes, "\(m) survives the round trip")
            XCTAssertEqual("\(back)", "\(m)")
        }
    }

    func testHotHostMessagesAreCompactAndRoundTrip() throws {
        let messages: [ToWorker] = [.stop(load: 1), .pause(load: 2), .resume(load: 1 << 40), .bodyEnd(load: 4, failure: nil)]
        for m in messages {
            let bytes = WorkerCodec.encoded(m)
            let f = try frame(bytes)
            XCTAssertEqual(f.kind, .compact, "\(m)")
            let back = try WorkerCodec.decode(ToWorker.self, from: f)
            XCTAssertEqual(WorkerCodec.encoded(back), bytes)
            XCTAssertEqual("\(back)", "\(m)")
        }
    }

    /// Rare messages, and those with text, stay JSON and decode through the same codec.
    func testRareMessagesStayJSON() throws {
        let from: [FromWorker] = [
            .fail(load: 5, code: 42, message: "nope ü", causeDomain: "libssh2", causeCode: -7),
            .log(load: nil, level: 2, text: "hello"), .ready(subscriptions: ["task.created"], sandbox: "seccomp"),
            .connectService(load: 1, request: 2, service: 1),
        ]
        for m in from {
            let f = try frame(WorkerCodec.encoded(m))
            XCTAssertEqual(f.kind, .message)
            XCTAssertEqual("\(try WorkerCodec.decode(FromWorker.self, from: f))", "\(m)")
        }
        let to: [ToWorker] = [.bodyEnd(load: 3, failure: "disk on fire"), .service(load: 1, request: 2, code: 0, message: "")]
        for m in to {
            let f = try frame(WorkerCodec.encoded(m))
            XCTAssertEqual(f.kind, .message)
            XCTAssertEqual("\(try WorkerCodec.decode(ToWorker.self, from: f))", "\(m)")
        }
    }

    /// A compact frame of the wrong length, an unknown name, a field out of range or a
    /// frame of another kind is refused as malformed, on both sides.
    func testMalformedCompactMessagesAreRefused() throws {
        let load: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 1]
        let field: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 2]
        let bad: [[UInt8]] = [
            [], [1], [1] + load.prefix(7),            // shorter than name and load
            [1] + load + [0],                          // a field cut short
            [1] + load + field,                        // finish / stop with a field
            [3] + load,                                // readBody / bodyEnd without its field (worker side)
            [4] + load + field,                        // sent with one field of three
            [5] + load + field,                        // cachedValid 2
            [0] + load, [99] + load, [255] + load,     // no such message
            [1] + load + Array(repeating: 0, count: 8 * 9),  // more fields than any message
        ]
        for payload in bad {
            let f = Frame(kind: .compact, payload: payload)
            XCTAssertThrowsError(try WorkerCodec.decode(FromWorker.self, from: f), "\(payload)") {
                XCTAssertEqual(($0 as? IPCError)?.code, .malformed)
            }
        }
        // (Name 3 with no field is the host's resume: well formed there.)
        for payload in bad where !((1...4).contains(payload.first ?? 0) && payload.count == 9) {
            let f = Frame(kind: .compact, payload: payload)
            XCTAssertThrowsError(try WorkerCodec.decode(ToWorker.self, from: f), "\(payload)") {
                XCTAssertEqual(($0 as? IPCError)?.code, .malformed)
            }
        }
        for kind in [Frame.Kind.data, .hello, .goodbye] {
            XCTAssertThrowsError(try WorkerCodec.decode(FromWorker.self, from: Frame(kind: kind, payload: [1] + load)))
            XCTAssertThrowsError(try WorkerCodec.decode(ToWorker.self, from: Frame(kind: kind, payload: [1] + load)))
        }
        XCTAssertThrowsError(try WorkerCodec.decode(FromWorker.self, from: Frame(kind: .message, payload: Array("{\"finish\":{}}".utf8))))
    }

    /// A request body chunk is read straight into the frame that carries it; the frame is
    /// a tagged data frame of exactly what was read.
    func testAnEncodedDataFrameHoldsWhatWasRead() throws {
        let bytes = try WorkerWire.encodedDataFrame(load: 0x0102_0304_0506_0708, capacity: 100) { buffer in
            for i in 0..<37 { buffer[i] = UInt8(i) }
            return 37
        }
        var d = FrameDecoder()
        d.append(bytes)
        let head = try XCTUnwrap(try d.takeTaggedDataHead())
        XCTAssertEqual(head.tag, 0x0102_0304_0506_0708)
        XCTAssertEqual(head.bodyLength, 37)
        var body = [UInt8](repeating: 0, count: 37)
        XCTAssertEqual(body.withUnsafeMutableBytes { d.takeBuffered(into: $0) }, 37)
        XCTAssertEqual(body, (0..<37).map { UInt8($0) })
        XCTAssertEqual(d.bufferedCount, 0)
        struct Broken: Error {}
        XCTAssertThrowsError(try WorkerWire.encodedDataFrame(load: 1, capacity: 10) { _ in throw Broken() })
    }
}
