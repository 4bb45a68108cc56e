import PorterTestSupport
import XCTest
@testable import PorterCore
@testable import PorterSession

/// pieces://h/N — the text in the request property "text", delivered N bytes at a time,
/// so that line endings and UTF-8 sequences fall across chunk boundaries.
final class PiecesHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["pieces"] }
    let request: Request
    let client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }
    func startLoading() {
        let bytes = (request.property(forKey: "raw") as? Data).map(Array.init) ?? Array(((request.property(forKey: "text") as? String) ?? "").utf8)
        let size = max(1, Int(request.url.lastPathComponent) ?? 1)
        let client = self.client, url = request.url
        Thread.detachNewThread {
            client.didReceive(okResponse(url, length: Int64(bytes.count), mime: "text/plain"), cacheStoragePolicy: .notAllowed)
            var i = 0
            while i < bytes.count {
                client.didLoad(Data(bytes[i..<min(bytes.count, i + size)]))
                i += size
            }
            client.didFinishLoading()
        }
    }
    func stopLoading() {}
}

/// Issue 14: `AsyncBytes.lines` and `characters`, as Foundation's.
final class AsyncTextTests: XCTestCase {
    private func session() -> Session {
        Session(configuration: testConfiguration { $0.handlers = [TypeHandlerFactory(PiecesHandler.self)] })
    }

    private func bytes(_ text: String, piece: Int) async throws -> AsyncBytes {
        var r = Request(url: URL(string: "pieces://h/\(piece)")!)
        r.setProperty(text, forKey: "text")
        return try await session().bytes(for: r).0
    }

    func testLinesEndAtEveryKindOfLineEnding() async throws {
        let text = "one\ntwo\r\nthree\rfour\u{85}five\u{2028}six\u{2029}\n\nlast é 🇫🇷"
        let expected = ["one", "two", "three", "four", "five", "six", "", "", "last é 🇫🇷"]
        for piece in [1, 2, 3, 7, 1000] {
            var lines: [String] = []
            for try await line in try await bytes(text, piece: piece).lines { lines.append(line) }
            XCTAssertEqual(lines, expected, "pieces of \(piece) bytes")
        }
        // A final line ending does not make an empty last line.
        var lines: [String] = []
        for try await line in try await bytes("a\nb\n", piece: 1).lines { lines.append(line) }
        XCTAssertEqual(lines, ["a", "b"])
    }

    func testCharactersStayWholeAcrossChunks() async throws {
        // é as e + combining acute, a flag (two scalars), a family emoji (ZWJ sequence).
        let text = "ae\u{301}🇫🇷x👨‍👩‍👧z"
        for piece in [1, 2, 5, 1000] {
            var characters: [Character] = []
            for try await c in try await bytes(text, piece: piece).characters { characters.append(c) }
            XCTAssertEqual(characters, Array(text), "pieces of \(piece) bytes")
        }
        // Malformed UTF-8 becomes U+FFFD, as String(decoding:) does.
        var r = Request(url: URL(string: "pieces://h/1")!)
        r.setProperty(Data([0x61, 0xC3, 0xFF, 0x62]), forKey: "raw")   // a, a broken sequence, b
        let (raw, _) = try await session().bytes(for: r)
        var characters: [Character] = []
        for try await c in raw.characters { characters.append(c) }
        XCTAssertEqual(String(characters), String(decoding: [0x61, 0xC3, 0xFF, 0x62] as [UInt8], as: UTF8.self))
    }
}

/// Issue 14: per-task delegates, consulted before the session's (URLSession's
/// `task.delegate`, `data(for:delegate:)`).
final class TaskDelegateTests: XCTestCase {
    final class Decider: TaskDelegate, @unchecked Sendable {
        let name: String
        let follow: Bool
        let seen = Locked<[String]>([])
        init(_ name: String, follow: Bool) {
            self.name = name
            self.follow = follow
        }
        func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
                  completion: @escaping @Sendable (Request?) -> Void) {
            seen.withLock { $0.append("redirect") }
            completion(follow ? newRequest : nil)
        }
        func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                  completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
            seen.withLock { $0.append("challenge") }
            completion(.useCredential(Credential(user: "alice", password: "secret", persistence: .none)))
        }
        func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
            seen.withLock { $0.append("metrics") }
        }
        func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
            seen.withLock { $0.append(error == nil ? "complete" : "failed \(error!.code)") }
        }
    }

    /// The async methods' own delegates hear the task's end (URLSession's order: metrics,
    /// then the completion), for bytes(for:delegate:) too; the session's delegate does not.
    func testATaskDelegateHearsTheEnd() async throws {
        let sessionDelegate = Decider("session", follow: true)
        let session = Session(configuration: testConfiguration(), delegate: sessionDelegate)
        let own = Decider("task", follow: true)
        _ = try await session.data(for: Request(url: url("redir://h/1")), delegate: own)
        XCTAssertTrue(eventually { own.seen.current.contains("complete") }, "\(own.seen.current)")
        let streamed = Decider("bytes", follow: true)
        let (bytes, _) = try await session.bytes(for: Request(url: url("redir://h/1")), delegate: streamed)
        for try await _ in bytes {}
        XCTAssertTrue(eventually { streamed.seen.current.contains("complete") }, "\(streamed.seen.current)")
        XCTAssertEqual(streamed.seen.current.suffix(2), ["metrics", "complete"])
        XCTAssertFalse(sessionDelegate.seen.current.contains("complete"))
    }

    private func url(_ s: String) -> URL { URL(string: s)! }

    func testATaskDelegateComesBeforeTheSessionDelegate() async throws {
        let sessionDelegate = Decider("session", follow: false)
        let session = Session(configuration: testConfiguration(), delegate: sessionDelegate)
        // The session's delegate refuses redirects; the task's follows them.
        let own = Decider("task", follow: true)
        let (data, _) = try await session.data(for: Request(url: url("redir://h/2")), delegate: own)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "arrived at h")
        XCTAssertEqual(own.seen.current.filter { $0 == "redirect" }.count, 2)
        XCTAssertTrue(eventually { own.seen.current.contains("metrics") })
        XCTAssertFalse(sessionDelegate.seen.current.contains("redirect"), "the session's delegate was asked too")
        // A challenge goes to the task's delegate as well.
        let (login, _) = try await session.data(for: Request(url: url("auth://h/login")), delegate: own)
        XCTAssertEqual(String(decoding: login, as: UTF8.self), "welcome alice")
        XCTAssertTrue(own.seen.current.contains("challenge"))
        XCTAssertFalse(sessionDelegate.seen.current.contains("challenge"))
        // Without one, the session's delegate decides (and refuses the redirect).
        let (stopped, response) = try await session.data(for: Request(url: url("redir://h/2")))
        XCTAssertEqual(response.statusCode, 302)
        XCTAssertTrue(stopped.isEmpty)
        XCTAssertTrue(sessionDelegate.seen.current.contains("redirect"))
        // task.delegate set before resume works the same way.
        let task = session.dataTask(with: Request(url: url("redir://h/1"))) { _, _, _ in }
        let late = Decider("late", follow: true)
        task.delegate = late
        XCTAssertTrue(task.delegate === late)
        task.resume()
        XCTAssertTrue(eventually { late.seen.current.contains("redirect") })
    }
}
