import Foundation
import PorterCore
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

    /// The value as JSON with its keys in order (comparable).
    private func json(_ v: some Encodable) throws -> Data {
        let e = JSONEncoder()
        e.outputFormatting = .sortedKeys
        return try e.encode(v)
    }

    private func sampleResponse() -> WireResponse {
        var head = WireResponse(Response(url: URL(string: "sftp://h/ü/x")!, mimeType: "text/plain", expectedContentLength: 42,
                                         textEncodingName: "utf-8", statusCode: 206, headerFields: [.contentType: "text/plain"]))
        head.resumeOffset = 7
        head.validator = "42-1700000000"
        head.headers.append(["x-ünïcode", "välue"])
        return head
    }

    /// A load's request and its response head are compact too (one of each per load):
    /// every field survives, optional ones present or not, a cached head inside a request.
    func testStartAndResponseAreCompactAndRoundTrip() throws {
        var request = Request(url: URL(string: "sftp://user@h:2222/a%20b?q=1")!)
        request.method = "PUT"
        request.headerFields[.accept] = "*/*"
        request.setProperty("yes", forKey: "seen")
        request.resumeRange = ResumeRange(offset: 99, validator: "v1")
        request.body = .data(Data(repeating: 1, count: 10))
        request.timeoutInterval = 12.5
        let cachedHead = Response(url: URL(string: "sftp://h/x")!, mimeType: nil, expectedContentLength: -1)
        let messages: [ToWorker] = [
            .start(load: 1, request: WireRequest(request, insecure: true, cached: cachedHead)),
            .start(load: 2, request: WireRequest(Request(url: URL(string: "p1://h")!), insecure: false, cached: nil)),
        ]
        for m in messages {
            let bytes = WorkerCodec.encoded(m)
            let f = try frame(bytes)
            XCTAssertEqual(f.kind, .compact)
            let back = try WorkerCodec.decode(ToWorker.self, from: f)
            XCTAssertEqual(WorkerCodec.encoded(back), bytes)
            guard case .start(_, let got) = back, case .start(_, let sent) = m else { return XCTFail("\(back)") }
            // The same request as JSON would give.
            XCTAssertEqual(try json(got), try json(sent))
        }
        for head in [sampleResponse(), WireResponse(Response(url: URL(string: "p1://h")!, mimeType: nil, expectedContentLength: -1))] {
            let m = FromWorker.response(load: 5, head: head)
            let bytes = WorkerCodec.encoded(m)
            let f = try frame(bytes)
            XCTAssertEqual(f.kind, .compact)
            guard case .response(5, let got) = try WorkerCodec.decode(FromWorker.self, from: f) else { return XCTFail() }
            XCTAssertEqual(try json(got), try json(head))
            XCTAssertEqual(WorkerCodec.encoded(FromWorker.response(load: 5, head: got)), bytes)
        }
    }

    /// A response head or request cut anywhere, with a flag that is not 0 or 1, a string
    /// that is not UTF-8, a count larger than what follows, or bytes left over is refused.
    func testMalformedStartAndResponseAreRefused() throws {
        let bytes = try XCTUnwrap(WorkerCodec.encoded(FromWorker.response(load: 5, head: sampleResponse())))
        let payload = Array(bytes[Frame.headerLength...])
        for cut in 9..<payload.count {
            XCTAssertThrowsError(try WorkerCodec.decode(FromWorker.self, from: Frame(kind: .compact, payload: Array(payload[..<cut]))),
                                 "cut at \(cut)") { XCTAssertEqual(($0 as? IPCError)?.code, .malformed) }
        }
        XCTAssertThrowsError(try WorkerCodec.decode(FromWorker.self, from: Frame(kind: .compact, payload: payload + [0])), "left over")
        // The url's length, then "sftp…": make the mime type's flag 2, then the url not UTF-8.
        let urlLength = Int(payload[9]) << 24 | Int(payload[10]) << 16 | Int(payload[11]) << 8 | Int(payload[12])
        var badFlag = payload
        badFlag[13 + urlLength] = 2
        var badText = payload
        badText[13] = 0xFF
        var lyingCount = payload
        lyingCount[9] = 0x7F
        for bad in [badFlag, badText, lyingCount] {
            XCTAssertThrowsError(try WorkerCodec.decode(FromWorker.self, from: Frame(kind: .compact, payload: bad))) {
                XCTAssertEqual(($0 as? IPCError)?.code, .malformed)
            }
        }
        let start = try XCTUnwrap(WorkerCodec.encoded(ToWorker.start(load: 1, request: WireRequest(Request(url: URL(string: "p1://h")!),
                                                                                                     insecure: false, cached: nil))))
        let startPayload = Array(start[Frame.headerLength...])
        for cut in 9..<startPayload.count {
            XCTAssertThrowsError(try WorkerCodec.decode(ToWorker.self, from: Frame(kind: .compact, payload: Array(startPayload[..<cut]))))
        }
    }
}
