import XCTest
import HTTPTypes
import PorterTestSupport
@testable import Porter
@testable import PorterWebSocket

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

    /// The PorterError `body` throws (another error as `.unknown`), nil when it returns.
    func porterError(_ body: () async throws -> Void) async -> PorterError? {
        do {
            try await body()
            return nil
        } catch let e as PorterError {
            return e
        } catch {
            return PorterError(.unknown, "\(error)")
        }
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

    /// Stream and WebSocket tasks are in `allTasks` (and `getAllTasks`) from their making
    /// to their end, as URLSession lists them, and leave it at their end whatever ended them.
    func testStreamAndWebSocketTasksAreListedWhileTheyLive() async throws {
        let s = session()
        func listed() -> Set<Int> { Set(s.allTasks.map(\.taskIdentifier)) }
        let socket = s.webSocketTask(with: ws("/echo"))
        let stream = s.streamTask(withHostName: "127.0.0.1", port: ports.echo)
        let idle = s.webSocketTask(with: ws("/echo"))
        XCTAssertEqual(listed(), [socket.taskIdentifier, stream.taskIdentifier, idle.taskIdentifier], "listed before resume()")
        let fromGetter = await withCheckedContinuation { c in s.getAllTasks { c.resume(returning: $0.map(\.taskIdentifier)) } }
        XCTAssertEqual(fromGetter, [socket.taskIdentifier, stream.taskIdentifier, idle.taskIdentifier], "in the order made")

        socket.resume()
        try await socket.send(.string("up"))
        _ = try await socket.receive()
        stream.resume()
        try await stream.write(Data("up\n".utf8))
        _ = try await stream.read(minLength: 3, maxLength: 3, timeout: 10)
        XCTAssertEqual(listed(), [socket.taskIdentifier, stream.taskIdentifier, idle.taskIdentifier], "listed while open")

        // A clean close and a cancel end them: they leave the list.
        socket.cancel(with: .normalClosure, reason: nil)
        XCTAssertTrue(eventually(10) { socket.state == .completed })
        XCTAssertTrue(eventually(10) { !listed().contains(socket.taskIdentifier) }, "\(s.allTasks)")
        stream.cancel()
        XCTAssertTrue(eventually(10) { !listed().contains(stream.taskIdentifier) }, "\(s.allTasks)")
        XCTAssertEqual(listed(), [idle.taskIdentifier])

        // A failure ends one too.
        let refused = s.streamTask(withHostName: "127.0.0.1", port: 1)
        refused.resume()
        XCTAssertTrue(eventually(10) { refused.state == .completed })
        XCTAssertTrue(eventually(10) { !listed().contains(refused.taskIdentifier) }, "\(s.allTasks)")

        // invalidateAndCancel reaches the one never resumed, through the list.
        s.invalidateAndCancel()
        XCTAssertTrue(eventually(10) { idle.state == .completed })
        XCTAssertEqual(idle.error?.code, .cancelled)
        XCTAssertTrue(eventually(10) { listed().isEmpty }, "\(s.allTasks)")
    }

    /// As URLSessionTask's: the state has changed when resume() and cancel() return
    /// (the machine still decides; the call waits for it on the task's queue).
    func testResumeAndCancelChangeTheStateBeforeTheyReturn() async throws {
        let s = session()
        defer { s.invalidateAndCancel() }
        let socket = s.webSocketTask(with: ws("/echo"))
        XCTAssertEqual(socket.state, .suspended)
        socket.resume()
        XCTAssertEqual(socket.state, .running)
        socket.cancel()
        XCTAssertNotEqual(socket.state, .running)
        XCTAssertNotEqual(socket.state, .suspended)
        let stream = s.streamTask(withHostName: "127.0.0.1", port: ports.echo)
        stream.resume()
        XCTAssertEqual(stream.state, .running)
        stream.cancel()
        XCTAssertNotEqual(stream.state, .running)
        XCTAssertTrue(eventually(10) { socket.state == .completed && stream.state == .completed })
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
