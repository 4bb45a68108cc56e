import XCTest
import HTTPTypes
import PorterTestSupport
@testable import Porter
@testable import PorterSession

/// The servers of wsserver.py: the `websockets` package from PyPI (ws and wss), a raw
/// server that breaks RFC 6455 on purpose, and a line echo server for stream tasks.
enum WSFixture {
    struct Ports { let ws, wss, raw, echo, deflate: Int; let dir: String; let process: Process }
    nonisolated(unsafe) static var setup: Result<Ports, Error>?
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func start() -> Result<Ports, Error> {
        if let setup { return setup }
        let made = Result { () throws -> Ports in
            let python = root.appendingPathComponent(".build/ftp-venv/bin/python").path
            guard FileManager.default.isExecutableFile(atPath: python) else {
                throw NginxFixture.Failure.setup("no Python venv at \(python): run `make test` (scripts/install-deps.sh makes it)")
            }
            var template = Array((NSTemporaryDirectory() + "porter-ws-XXXXXX").utf8CString)
            guard let made = mkdtemp(&template) else { throw NginxFixture.Failure.setup("mkdtemp") }
            let dir = String(cString: made)
            try NginxFixture.makeCertificates(in: dir)
            let ports = try (0..<5).map { _ in try NginxFixture.freePort() }
            let (p, port) = try startReadyServer(python, [root.appendingPathComponent("Tests/PorterHTTPTests/wsserver.py").path]
                                                 + ports.map(String.init) + [dir + "/leaf.pem", dir + "/leaf.key", dir + "/closes.log"])
            // One server for the whole run (two test classes use it): it ends itself when
            // the test process is gone.
            guard port == ports[0] else { throw NginxFixture.Failure.setup("wsserver.py did not start") }
            return Ports(ws: ports[0], wss: ports[1], raw: ports[2], echo: ports[3], deflate: ports[4], dir: dir, process: p)
        }
        setup = made
        return made
    }
}

/// What the WebSocket and stream task tests share: the servers, and a session that
/// trusts their CA. (Holds no tests: Linux XCTest runs only a class's own.)
class WSTestCase: XCTestCase {
    var ports: WSFixture.Ports!

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
    }

    override func setUpWithError() throws {
        ports = try WSFixture.start().get()
    }

    func session(_ change: (inout SessionConfiguration) -> Void = { _ in }) -> Session {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.caCertificateFile = ports.dir + "/ca.pem"
        change(&c)
        return Session(configuration: c)
    }
}

final class WebSocketTests: WSTestCase {

    private func ws(_ path: String) -> URL { URL(string: "ws://127.0.0.1:\(ports.ws)\(path)")! }
    private func raw(_ path: String) -> URL { URL(string: "ws://127.0.0.1:\(ports.raw)\(path)")! }

    final class Recorder: WebSocketDelegate, @unchecked Sendable {
        let events = Locked([String]())
        func webSocketTask(_ task: WebSocketTask, didOpenWithProtocol protocol: String?) {
            events.withLock { $0.append("open \(`protocol` ?? "-")") }
        }
        func webSocketTask(_ task: WebSocketTask, didCloseWith code: WebSocketTask.CloseCode, reason: Data?) {
            events.withLock { $0.append("close \(code.rawValue) \(String(decoding: reason ?? Data(), as: UTF8.self))") }
        }
    }

    private func porterError(_ body: () async throws -> Void) async -> PorterError? {
        do {
            try await body()
            return nil
        } catch let e as PorterError {
            return e
        } catch {
            return PorterError(.unknown, "\(error)")
        }
    }

    func testEchoTextAndBinaryThenCloseCleanly() async throws {
        let recorder = Recorder()
        let task = session().webSocketTask(with: ws("/echo"), delegate: recorder)
        task.resume()
        try await task.send(.string("hello ✓"))
        let got1 = try await task.receive()
        XCTAssertEqual(got1, .string("hello ✓"))
        try await task.send(.data(Data([0, 1, 2, 255])))
        let got2 = try await task.receive()
        XCTAssertEqual(got2, .data(Data([0, 1, 2, 255])))
        // 3 MiB each way: the 64-bit length form, masked by the client, unmasked back.
        task.maximumMessageSize = 8 << 20
        let big = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try await task.send(.data(big))
        let got3 = try await task.receive()
        XCTAssertEqual(got3, .data(big))
        task.cancel(with: .normalClosure, reason: Data("done".utf8))
        XCTAssertTrue(eventually(5) { task.state == .completed })
        XCTAssertEqual(task.closeCode, .normalClosure)
        XCTAssertNil(task.error)
        XCTAssertEqual(task.response?.statusCode, 101)
        XCTAssertTrue(eventually(5) { recorder.events.withLock { $0 } == ["open -", "close 1000 done"] })
        let after = await porterError { _ = try await task.receive() }
        XCTAssertNotNil(after, "receive after the close must fail")
    }

    /// A send asked before resume() waits for the open, as URLSession's does.
    func testSendBeforeOpenWaitsForTheHandshake() async throws {
        let task = session().webSocketTask(with: ws("/echo"))
        let sent = Task { try await task.send(.string("early")) }
        try await Task.sleep(nanoseconds: 50_000_000)
        task.resume()
        try await sent.value
        let got = try await task.receive()
        XCTAssertEqual(got, .string("early"))
        task.cancel()
    }

    func testSecureWebSocketVerifiesTheServer() async throws {
        let url = URL(string: "wss://localhost:\(ports.wss)/echo")!
        let task = session().webSocketTask(with: url)
        task.resume()
        try await task.send(.string("over TLS"))
        let got4 = try await task.receive()
        XCTAssertEqual(got4, .string("over TLS"))
        task.cancel(with: .goingAway, reason: nil)

        // Without the test CA the server is not trusted.
        let untrusted = session { $0.caCertificateFile = nil }.webSocketTask(with: url)
        untrusted.resume()
        let e = await porterError { _ = try await untrusted.receive() }
        XCTAssertTrue([.serverCertificateUntrusted, .secureConnectionFailed].contains(e?.code), "\(String(describing: e))")
    }

    func testFragmentedMessagesAreJoined() async throws {
        let task = session().webSocketTask(with: ws("/fragments"))
        task.resume()
        let got5 = try await task.receive()
        XCTAssertEqual(got5, .string("héllo wörld ✓"))
        let got6 = try await task.receive()
        XCTAssertEqual(got6, .data(Data([0, 1, 2, 3, 4, 5])))
        task.cancel(with: .normalClosure, reason: nil)
    }

    func testServerCloseCodeAndReason() async throws {
        let recorder = Recorder()
        let task = session().webSocketTask(with: ws("/close"), delegate: recorder)
        task.resume()
        let e = await porterError { _ = try await task.receive() }
        XCTAssertNotNil(e)
        XCTAssertEqual(task.closeCode.rawValue, 4001)
        XCTAssertEqual(task.closeReason, Data("bye".utf8))
        XCTAssertNil(task.error, "a close by the server is not a failure")
        XCTAssertTrue(eventually(5) { recorder.events.withLock { $0 }.last == "close 4001 bye" })
    }

    func testPingsBothWays() async throws {
        let task = session().webSocketTask(with: ws("/ping"))
        task.resume()
        // The server pings; Porter answers with the same payload.
        let got7 = try await task.receive()
        XCTAssertEqual(got7, .string("pong received"))
        task.cancel(with: .normalClosure, reason: nil)

        let echo = session().webSocketTask(with: ws("/echo"))
        echo.resume()
        try await echo.send(.string("warm up"))
        _ = try await echo.receive()
        let pong = await withCheckedContinuation { (c: CheckedContinuation<PorterError?, Never>) in
            echo.sendPing { c.resume(returning: $0) }
        }
        XCTAssertNil(pong)
        echo.cancel(with: .normalClosure, reason: nil)
    }

    func testHandshakeCarriesProtocolsHeadersAndCookies() async throws {
        let s = session()
        let cookieURL = URL(string: "http://127.0.0.1:\(ports.ws)/")!
        s.configuration.cookieStore?.storeCookies(fromHeaders: ["flavour=oat; Path=/"], for: cookieURL, mainDocumentURL: nil)
        var request = Request(url: ws("/headers"))
        request.headerFields[HTTPField.Name("X-Test")!] = "42"
        let recorder = Recorder()
        let task = s.webSocketTask(with: request, protocols: ["superchat", "other"], delegate: recorder)
        task.resume()
        let headersMessage = try await task.receive()
        guard case .string(let text) = headersMessage else { return XCTFail("not text") }
        let seen = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: String?]
        XCTAssertEqual(seen?["cookie"], "flavour=oat")
        XCTAssertEqual(seen?["x-test"], "42")
        XCTAssertEqual(seen?["protocol"], "superchat, other")
        XCTAssertEqual(seen?["subprotocol"], "superchat")
        XCTAssertEqual(task.agreedProtocol, "superchat")
        XCTAssertEqual(recorder.events.withLock { $0 }.first, "open superchat")
        task.cancel(with: .normalClosure, reason: nil)

        let setter = s.webSocketTask(with: ws("/setcookie"))
        setter.resume()
        let got8 = try await setter.receive()
        XCTAssertEqual(got8, .string("ok"))
        XCTAssertTrue(s.configuration.cookieStore?.cookieHeader(for: cookieURL, mainDocumentURL: nil)?.contains("ws=yes") == true)
        setter.cancel(with: .normalClosure, reason: nil)
    }

    func testMaximumMessageSize() async throws {
        let small = session().webSocketTask(with: ws("/big?2097152"))
        small.resume()   // the default limit is 1 MiB, as URLSession's
        let e = await porterError { _ = try await small.receive() }
        XCTAssertEqual(e?.code, .dataLengthExceedsMaximum)
        XCTAssertEqual(small.closeCode, .messageTooBig)

        let large = session().webSocketTask(with: ws("/big?2097152"))
        large.maximumMessageSize = 4 << 20
        large.resume()
        let largeMessage = try await large.receive()
        guard case .data(let d) = largeMessage else { return XCTFail("not binary") }
        XCTAssertEqual(d.count, 2 << 20)
        XCTAssertEqual(d.prefix(300), Data((0..<300).map { UInt8($0 % 251) }))
        large.cancel(with: .normalClosure, reason: nil)
    }

    /// A server that breaks RFC 6455 gets the close code the RFC names, and the task fails.
    func testProtocolViolationsFailWithTheRightCloseCode() async throws {
        let cases: [(String, Int, PorterError.Code)] = [
            ("/masked", 1002, .badServerResponse), ("/rsv", 1002, .badServerResponse),
            ("/badutf8", 1007, .badServerResponse), ("/fragmented-ping", 1002, .badServerResponse),
            ("/badclose", 1002, .badServerResponse), ("/continuation", 1002, .badServerResponse),
            ("/huge-length", 1009, .dataLengthExceedsMaximum),
        ]
        for (path, code, errorCode) in cases {
            let task = session().webSocketTask(with: raw(path))
            task.resume()
            let e = await porterError { _ = try await task.receive() }
            XCTAssertEqual(e?.code, errorCode, "\(path): \(String(describing: e))")
            XCTAssertEqual(task.closeCode.rawValue, code, path)
        }
        let log = ports.dir + "/closes.log"
        XCTAssertTrue(eventually(10) {
            let seen = Set(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init))
            return cases.allSatisfy { seen.contains("\($0.0) \($0.1)") }
        })
        let lines = Set(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init))
        for (path, code, _) in cases {
            XCTAssertTrue(lines.contains("\(path) \(code)"), "the server did not get close code \(code) for \(path): \(lines)")
        }
    }

    func testBadHandshakesAreRefused() async throws {
        for path in ["/refuse", "/badaccept", "/extension", "/unoffered-protocol"] {
            let task = session().webSocketTask(with: raw(path), protocols: ["chat"])
            // /extension agrees permessage-deflate: a failure only when it was not offered.
            task.perMessageDeflate = nil
            task.resume()
            let e = await porterError { _ = try await task.receive() }
            XCTAssertEqual(e?.code, .badServerResponse, "\(path): \(String(describing: e))")
            if path == "/refuse" { XCTAssertEqual(task.response?.statusCode, 403) }
        }
        // A connection that ends without a close frame: the message before it is kept,
        // then 1006 (abnormal closure).
        let eof = session().webSocketTask(with: raw("/eof"))
        eof.resume()
        let got9 = try await eof.receive()
        XCTAssertEqual(got9, .string("last words"))
        let e = await porterError { _ = try await eof.receive() }
        XCTAssertEqual(e?.code, .networkConnectionLost)
        XCTAssertEqual(eof.closeCode, .abnormalClosure)
    }

    func testConnectionRefusedAndBadURLs() async throws {
        let closed = try NginxFixture.freePort()
        let refused = session().webSocketTask(with: URL(string: "ws://127.0.0.1:\(closed)/")!)
        refused.resume()
        let e = await porterError { _ = try await refused.receive() }
        XCTAssertEqual(e?.code, .cannotConnectToHost)

        let ftp = session().webSocketTask(with: URL(string: "ftp://127.0.0.1/")!)
        ftp.resume()
        let e2 = await porterError { _ = try await ftp.receive() }
        XCTAssertEqual(e2?.code, .unsupportedURL)

        let fragment = session().webSocketTask(with: URL(string: "ws://127.0.0.1:\(ports.ws)/echo#frag")!)
        fragment.resume()
        let e3 = await porterError { _ = try await fragment.receive() }
        XCTAssertEqual(e3?.code, .badURL)
    }

    /// A server that answers nothing after the upgrade request: the request timeout ends
    /// the opening, as URLSession's does.
    func testASilentServerTimesTheOpeningOut() async throws {
        let task = session { $0.timeoutIntervalForRequest = 1 }.webSocketTask(with: raw("/silent"))
        let start = Date()
        task.resume()
        let e = await porterError { _ = try await task.receive() }
        XCTAssertEqual(e?.code, .timedOut, "\(String(describing: e))")
        XCTAssertLessThan(Date().timeIntervalSince(start), 30, "the server is silent forever")
    }

    /// A flood of empty messages stops being read once a message's worth waits, whatever
    /// the messages weigh: the server's writes back up.
    func testEmptyMessagesCannotFloodTheQueue() async throws {
        let task = session().webSocketTask(with: raw("/empty-flood"))
        task.maximumMessageSize = 64 * 1024   // at most 1024 queued messages (64 bytes each)
        task.resume()
        let log = ports.dir + "/closes.log"
        func sent() -> Int? {
            let lines = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
            return lines.last(where: { $0.hasPrefix("/empty-flood ") }).flatMap { Int($0.split(separator: " ")[1]) }
        }
        XCTAssertTrue(eventually(30) { sent() != nil }, "the server never stopped sending")
        XCTAssertLessThan(sent() ?? .max, 20_000_000, "every empty message was taken: nothing held the flood back")
        let first = try await task.receive()
        XCTAssertEqual(first, .string(""))
        task.cancel()
    }

    /// The server breaks the protocol while our writes are stuck behind a peer that does
    /// not read: the close frame cannot leave, and the close timer still ends the task.
    func testAClosingHandshakeThatCannotBeSentStillEnds() async throws {
        let task = session().webSocketTask(with: raw("/deaf"))
        task.resume()
        let big = Data(count: 32 << 20)
        task.send(.data(big)) { _ in }
        let start = Date()
        let e = await porterError { _ = try await task.receive() }
        XCTAssertEqual(e?.code, .badServerResponse, "\(String(describing: e))")
        XCTAssertTrue(eventually(10) { task.state == .completed }, "the task stayed open behind its close frame")
        XCTAssertLessThan(Date().timeIntervalSince(start), 40, "the close timer is 5 s; without it, never")
    }

    func testHostilePartsOfTheRequestAreRefused() async throws {
        let injected = session().webSocketTask(with: URL(string: "ws://exa%0D%0Ample.com/")!)
        injected.resume()
        let e = await porterError { _ = try await injected.receive() }
        XCTAssertEqual(e?.code, .badURL, "\(String(describing: e))")
        let badProtocol = session().webSocketTask(with: ws("/echo"), protocols: ["chat\r\nX-Evil: 1"])
        badProtocol.resume()
        let e2 = await porterError { _ = try await badProtocol.receive() }
        XCTAssertEqual(e2?.code, .unsupportedConfiguration)
    }

    /// Seven WebSockets to one host and port, and a data task there too: streams run on a
    /// loop of their own, so they take none of the session's six connections per host.
    func testManySocketsLeaveTheSessionsConnectionsFree() async throws {
        let s = session()
        var sockets: [WebSocketTask] = []
        for i in 0..<7 {
            let t = s.webSocketTask(with: ws("/echo"))
            t.resume()
            try await t.send(.string("n\(i)"))
            let got = try await t.receive()
            XCTAssertEqual(got, .string("n\(i)"))
            sockets.append(t)
        }
        var request = Request(url: URL(string: "http://127.0.0.1:\(ports.ws)/echo")!)
        request.timeoutInterval = 5
        let (_, response) = try await s.data(for: request)
        XCTAssertEqual(response.statusCode, 426, "the WebSocket server answers a plain GET with 426")
        for t in sockets { t.cancel() }
    }

    /// invalidateAndCancel() ends stream and WebSocket tasks too; one made afterwards
    /// fails with sessionInvalidated, as a data task does.
    func testInvalidatingTheSessionEndsConnections() async throws {
        let s = session()
        let socket = s.webSocketTask(with: ws("/echo"))
        socket.resume()
        try await socket.send(.string("up"))
        _ = try await socket.receive()
        let stream = s.streamTask(withHostName: "127.0.0.1", port: ports.echo)
        stream.resume()
        try await stream.write(Data("up\n".utf8))
        _ = try await stream.read(minLength: 3, maxLength: 3, timeout: 10)
        s.invalidateAndCancel()
        XCTAssertTrue(eventually(5) { socket.state == .completed && stream.state == .completed })
        XCTAssertEqual(socket.error?.code, .cancelled)
        XCTAssertEqual(stream.error?.code, .cancelled)
        let lateSocket = s.webSocketTask(with: ws("/echo"))
        lateSocket.resume()
        let e = await porterError { _ = try await lateSocket.receive() }
        XCTAssertEqual(e?.code, .sessionInvalidated)
        let lateStream = s.streamTask(withHostName: "127.0.0.1", port: ports.echo)
        lateStream.resume()
        let e2 = await porterError { _ = try await lateStream.read(minLength: 1, maxLength: 1) }
        XCTAssertEqual(e2?.code, .sessionInvalidated)
    }

    func testCancelFailsOutstandingReceives() async throws {
        let task = session().webSocketTask(with: ws("/echo"))
        task.resume()
        try await task.send(.string("x"))
        _ = try await task.receive()
        let waiting = Task { () -> PorterError? in
            do { _ = try await task.receive() } catch { return error as? PorterError }
            return nil
        }
        try await Task.sleep(nanoseconds: 100_000_000)
        task.cancel()
        let e = await waiting.value
        XCTAssertEqual(e?.code, .cancelled)
        XCTAssertEqual(task.state, .completed)
    }
}

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

final class StreamTaskTests: WSTestCase {

    private func text(_ r: (data: Data, atEOF: Bool)) -> String { String(decoding: r.data, as: UTF8.self) }

    func testEchoReadsQueuedBeforeResumeAndMinimumLength() async throws {
        let task = session().streamTask(withHostName: "127.0.0.1", port: ports.echo)
        async let first = task.read(minLength: 6, maxLength: 100, timeout: 10)   // asked before the connection
        try await Task.sleep(nanoseconds: 50_000_000)
        task.resume()
        try await task.write(Data("ab\n".utf8))
        try await task.write(Data("cd\n".utf8))
        let got10 = try await first
        XCTAssertEqual(text(got10), "ab\ncd\n")
        try await task.write(Data("0123456789\n".utf8))
        let got11 = try await task.read(minLength: 4, maxLength: 4)
        XCTAssertEqual(text(got11), "0123")
        let got12 = try await task.read(minLength: 7, maxLength: 100)
        XCTAssertEqual(text(got12), "456789\n")
        task.cancel()
    }

    func testHalfCloseThenEndOfStream() async throws {
        let task = session().streamTask(withHostName: "127.0.0.1", port: ports.echo)
        task.resume()
        try await task.write(Data("last\n".utf8))
        task.closeWrite()
        var all = Data()
        var eof = false
        while !eof {
            let r = try await task.read(minLength: 1, maxLength: 1024, timeout: 10)
            all.append(r.data)
            eof = r.atEOF || r.data.isEmpty
        }
        XCTAssertEqual(String(decoding: all, as: UTF8.self), "last\nbye\n")
        task.cancel()
    }

    /// A stream to the echo server that sent `command` (a STARTTLS variant), read its GO
    /// and started TLS.
    private func upgraded(_ command: String = "STARTTLS", _ change: (inout SessionConfiguration) -> Void = { _ in }) async throws -> StreamTask {
        let task = session(change).streamTask(withHostName: "localhost", port: ports.echo)
        task.resume()
        try await task.write(Data("\(command)\n".utf8))
        let go = try await task.read(minLength: 3, maxLength: 3, timeout: 10)
        XCTAssertEqual(text(go), "GO\n")
        task.startSecureConnection()
        return task
    }

    /// The error of the next read (of any number of reads until the end), nil when the
    /// stream ended cleanly.
    private func readError(_ task: StreamTask) async -> PorterError? {
        do {
            while true {
                let r = try await task.read(minLength: 1, maxLength: 100, timeout: 10)
                if r.atEOF || r.data.isEmpty { return nil }
            }
        } catch {
            return error as? PorterError ?? PorterError(.unknown, "\(error)")
        }
    }

    func testStartSecureConnectionVerifiesAndEncrypts() async throws {
        let task = try await upgraded()
        try await task.write(Data("secret\n".utf8))
        let got14 = try await task.read(minLength: 7, maxLength: 7, timeout: 10)
        XCTAssertEqual(text(got14), "secret\n")
        task.cancel()

        let untrusted = try await upgraded { $0.caCertificateFile = nil }
        let e = await readError(untrusted)
        XCTAssertEqual(e?.code, .serverCertificateUntrusted, "an untrusted server must fail the TLS start: \(String(describing: e))")
    }

    /// After STARTTLS, a forged record or a connection cut without close_notify is an
    /// error, never data and never a clean end of the stream (a truncation attack).
    func testTamperingAndTruncationAfterTLSAreErrors() async throws {
        for command in ["STARTTLS-TAMPER", "STARTTLS-CUT"] {
            let task = try await upgraded(command)
            try await task.write(Data("x\n".utf8))
            let e = await readError(task)
            XCTAssertEqual(e?.code, .networkConnectionLost, "\(command): \(String(describing: e)) (nil: a clean end)")
        }
    }

    /// The session's pinned key applies to STARTTLS as to https.
    func testStartTLSHonoursThePinnedKey() async throws {
        let pin = try NginxFixture.run("/bin/sh", ["-c",
            "openssl x509 -pubkey -noout -in leaf.pem | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64"],
            in: ports.dir).trimmingCharacters(in: .whitespacesAndNewlines)
        for (key, works) in [("sha256//\(pin)", true), ("sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", false)] {
            let task = try await upgraded { $0.pinnedPublicKey = key }
            try? await task.write(Data("pinned\n".utf8))
            do {
                let r = try await task.read(minLength: 7, maxLength: 7, timeout: 10)
                XCTAssertTrue(works, "a wrong pin was accepted")
                XCTAssertEqual(String(decoding: r.data, as: UTF8.self), "pinned\n")
            } catch let e as PorterError {
                XCTAssertFalse(works, "the right pin was refused: \(e)")
                XCTAssertEqual(e.code, .serverCertificateUntrusted, "\(e)")
            }
            task.cancel()
        }
    }

    /// Plain bytes that arrived and were not read when TLS is asked for are not let
    /// through as if they had come over TLS.
    func testUnreadPlainBytesStopStartTLS() async throws {
        let task = session().streamTask(withHostName: "localhost", port: ports.echo)
        task.resume()
        try await task.write(Data("injected\n".utf8))
        // A read that asks for more than arrives times out, keeping "injected\n".
        do { _ = try await task.read(minLength: 100, maxLength: 100, timeout: 0.5) } catch {}
        task.startSecureConnection()
        do {
            _ = try await task.read(minLength: 1, maxLength: 100, timeout: 10)
            XCTFail("plain bytes were served after startSecureConnection")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .secureConnectionFailed, "\(e)")
        }
    }

    func testReadTimeoutKeepsTheStream() async throws {
        let task = session().streamTask(withHostName: "127.0.0.1", port: ports.echo)
        task.resume()
        do {
            _ = try await task.read(minLength: 1, maxLength: 10, timeout: 0.3)
            XCTFail("nothing was sent: the read must time out")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .timedOut)
        }
        try await task.write(Data("after\n".utf8))
        let got15 = try await task.read(minLength: 6, maxLength: 6, timeout: 10)
        XCTAssertEqual(text(got15), "after\n")
        task.cancel()
    }

    /// A stream task let go without cancel() closes its connection: the server sees the end.
    func testAStreamLetGoClosesItsConnection() async throws {
        let log = ports.dir + "/closes.log"
        func closes() -> Int {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").components(separatedBy: "echo-closed").count - 1
        }
        var task: StreamTask? = session().streamTask(withHostName: "127.0.0.1", port: ports.echo)
        task?.resume()
        try await task?.write(Data("ping\n".utf8))
        let echoed = try await task?.read(minLength: 5, maxLength: 5, timeout: 10)
        XCTAssertEqual(echoed.map(text), "ping\n")
        let before = closes()
        task = nil
        XCTAssertTrue(eventually(5) { closes() == before + 1 }, "the connection of a task let go stays open")
    }

    func testRefusedConnectionFailsReadsAndWrites() async throws {
        let closed = try NginxFixture.freePort()
        let task = session().streamTask(withHostName: "127.0.0.1", port: closed)
        task.resume()
        do {
            _ = try await task.read(minLength: 1, maxLength: 10, timeout: 10)
            XCTFail("refused")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotConnectToHost)
        }
        XCTAssertEqual(task.state, .completed)
        do {
            try await task.write(Data("x".utf8))
            XCTFail("refused")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotConnectToHost)
        }
    }
}
