import Foundation
import Porter
import PorterPlugins
import PorterTestSupport
import XCTest

/// A C plugin's scheme through sessions, delegates, redirects, challenges,
/// back-pressure, uploads and downloads — as a built-in handler is.
/// The same tests run with the plugin in process (this class) and in a worker process
/// (`IsolatedAdapterTests`): the contract must not change across the boundary.
class AdapterTests: XCTestCase {
    /// Where the plugin runs in this class's tests.
    class var mode: PluginMode { .inProcess }
    // One plugin file per mode (loaded once per process, never unloaded).
    nonisolated(unsafe) static var fixtures: [PluginMode: (path: String, registry: HandlerRegistry)] = [:]
    static var pluginPath: String { fixtures[mode]?.path ?? "" }
    static var registry: HandlerRegistry { fixtures[mode]?.registry ?? HandlerRegistry() }

    override class func setUp() {
        super.setUp()
        guard fixtures[mode] == nil else { return }
        do {
            let folder = try PluginFixture.folder()
            let path = try PluginFixture.build("ptest.so", in: folder)
            let registry = HandlerRegistry()
            Porter.bootstrap(registry: registry, loadPlugins: false)
            var isolation = PluginIsolation.default
            isolation.defaultMode = mode
            let verdict = PluginLoader(registry: registry, isolation: isolation).load(path: path)
            if verdict.plugin == nil { print("plugin did not load: \(verdict)") }
            if verdict.plugin?.mode != mode { print("plugin loaded \(String(describing: verdict.plugin?.mode)), not \(mode)") }
            fixtures[mode] = (path, registry)
        } catch {
            print("fixture failed: \(error)")
        }
    }

    func testThePluginRunsWhereAsked() {
        let isolated = PluginLoader.isolatedPlugins.contains { $0.path == Self.pluginPath }
        XCTAssertEqual(isolated, Self.mode == .isolated)
    }

    func session(_ delegate: (any SessionDelegate)? = nil, _ tweak: (inout SessionConfiguration) -> Void = { _ in })
        -> Session {
        var config = SessionConfiguration.ephemeral
        config.registry = Self.registry
        tweak(&config)
        return Session(configuration: config, delegate: delegate)
    }

    /// One of the plugin's counters, asked of the plugin itself (in either mode).
    func counter(_ name: String) async throws -> Int {
        let (data, _) = try await session().data(from: URL(string: "ptest://h/counters")!)
        let text = String(decoding: data, as: UTF8.self)
        for pair in text.split(separator: " ") where pair.hasPrefix(name + "=") {
            return Int(pair.dropFirst(name.count + 1)) ?? -1
        }
        XCTFail("no counter \(name) in \(text)")
        return -1
    }

    func testDataThroughThePlugin() async throws {
        let (data, response) = try await session().data(from: URL(string: "ptest://h/hello")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "hello from ptest")
        XCTAssertEqual(response.mimeType, "text/plain")
        XCTAssertEqual(response.expectedContentLength, 16)
        XCTAssertNil(response.statusCode)
        XCTAssertEqual(response.value(forHeader: "X-Plugin"), "ptest")
    }

    func testCanHandleIsAsked() async throws {
        do {
            _ = try await session().data(from: URL(string: "ptest://h/not-mine")!)
            XCTFail("expected unsupportedURL")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .unsupportedURL)
        }
    }

    func testFailureCarriesCodeAndCause() async throws {
        do {
            _ = try await session().data(from: URL(string: "ptest://h/missing")!)
            XCTFail("expected an error")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .fileDoesNotExist)
            XCTAssertEqual(e.message, "no such thing")
            XCTAssertEqual(e.cause?.domain, "ptest")
            XCTAssertEqual(e.cause?.code, 2)
        }
    }

    func testStartRefusal() async throws {
        do {
            _ = try await session().data(from: URL(string: "ptest://h/refuse")!)
            XCTFail("expected an error")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .noPermissionsToReadFile)
            XCTAssertEqual(e.message, "refused by the plugin")
        }
    }

    /// A plugin that keeps calling its client after a refused start, or after destroy,
    /// is ignored: the client is a token the host looks up, not a pointer into freed
    /// memory. The task ends with the plugin's own answer and nothing late reaches it.
    func testLateCallsFromADeadClientAreIgnored() async throws {
        let before = try await counter("late")
        XCTAssertGreaterThanOrEqual(before, 0)
        do {
            _ = try await session().data(from: URL(string: "ptest://h/late-after-refuse")!)
            XCTFail("expected the refusal")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .noPermissionsToReadFile)
            XCTAssertEqual(e.message, "refused, but calls anyway")
        }
        try await assertEventually { try await self.counter("late") == before + 1 }
        do {
            _ = try await session().data(from: URL(string: "ptest://h/late-after-destroy")!)
            XCTFail("the test plugin fails unknown paths")
        } catch let e as PorterError {
            XCTAssertNotEqual(e.message, "late")
        }
        try await assertEventually { try await self.counter("late") == before + 2 }
        // The host still serves the plugin normally.
        let (data, _) = try await session().data(from: URL(string: "ptest://h/hello")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "hello from ptest")
    }

    func testRedirectInsideTheScheme() async throws {
        let (data, response) = try await session().data(from: URL(string: "ptest://h/redirect")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "hello from ptest")
        XCTAssertEqual(response.url.absoluteString, "ptest://h/hello")
    }

    func testRedirectToHTTPIsRefusedUnlessAllowed() async throws {
        var request = Request(url: URL(string: "ptest://h/redirect-http")!)
        request.setProperty("http://127.0.0.1:9/x", forKey: "target")
        do {
            _ = try await session { $0.allowedRedirectSchemes = [] }.data(for: request)
            XCTFail("expected redirectNotAllowed")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .redirectNotAllowed)
        }
    }

    func testPasswordChallengeThroughTheDelegate() async throws {
        let delegate = Answers { challenge in
            XCTAssertEqual(challenge.protectionSpace.realm, "ptest realm")
            XCTAssertEqual(challenge.protectionSpace.host, "h")
            XCTAssertEqual(challenge.protectionSpace.protocol, "ptest")
            return .useCredential(Credential(user: "ann", password: challenge.previousFailureCount == 0 ? "wrong" : "sesame"))
        }
        let (data, _) = try await session(delegate).data(from: URL(string: "ptest://h/auth")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "user=ann")
        XCTAssertEqual(delegate.failureCounts, [0, 1])
    }

    func testWrongPasswordsEndInAuthenticationFailed() async throws {
        let delegate = Answers { _ in .useCredential(Credential(user: "ann", password: "nope")) }
        do {
            _ = try await session(delegate).data(from: URL(string: "ptest://h/auth")!)
            XCTFail("expected authenticationFailed")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .authenticationFailed)
            XCTAssertEqual(e.cause?.code, 42)
        }
        XCTAssertEqual(delegate.failureCounts, [0, 1, 2])
    }

    func testCancelledChallenge() async throws {
        let delegate = Answers { _ in .cancelAuthenticationChallenge }
        do {
            _ = try await session(delegate).data(from: URL(string: "ptest://h/auth")!)
            XCTFail("expected a cancellation")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .userCancelledAuthentication)
        }
    }

    func testURLCredentialsAreProposed() async throws {
        let (data, _) = try await session().data(from: URL(string: "ptest://bob:sesame@h/auth")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "user=bob")
    }

    func testServerTrustChallengeCarriesTheIdentity() async throws {
        let delegate = Answers { challenge in
            XCTAssertEqual(challenge.protectionSpace.authenticationMethod, .serverTrust)
            let trust = challenge.protectionSpace.serverTrust
            XCTAssertEqual(trust?.evaluationFailure, "unknown host key")
            XCTAssertEqual(trust?.certificateChain.first?.count, 15)
            return trust.map { .useCredential(Credential(trust: $0)) } ?? .cancelAuthenticationChallenge
        }
        let (data, _) = try await session(delegate).data(from: URL(string: "ptest://h/trust")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "trusted")
        // With no delegate the default refuses an unknown identity.
        do {
            _ = try await session().data(from: URL(string: "ptest://h/trust")!)
            XCTFail("expected serverCertificateUntrusted")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .serverCertificateUntrusted)
        }
    }

    func testUploadReadsTheBody() async throws {
        var request = Request(url: URL(string: "ptest://h/upload")!)
        request.method = "PUT"
        let body = Data(repeating: 7, count: 100_000)
        let (data, _) = try await session().upload(for: request, from: body)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "received 100000")
    }

    func testLargeBodyWithBackPressure() async throws {
        let total = 40 << 20
        let before = try await counter("pauses")
        let s = session { $0.receiveBufferLimit = 256 << 10 }
        let (bytes, response) = try await s.bytes(from: URL(string: "ptest://h/big?\(total)")!)
        XCTAssertEqual(response.expectedContentLength, Int64(total))
        var count = 0
        var ok = true
        for try await chunk in bytes.chunks {
            if count == 0 { try await Task.sleep(nanoseconds: 200_000_000) }   // let the buffer fill
            for (i, b) in chunk.enumerated() where b != UInt8(ascii: "a") + UInt8((count + i) % 26) { ok = false; break }
            count += chunk.count
        }
        XCTAssertEqual(count, total)
        XCTAssertTrue(ok, "body bytes out of order")
        let after = try await counter("pauses")
        XCTAssertGreaterThan(after, before, "the plugin's pause was never called")
    }

    func testDownloadAndResume() async throws {
        // Slow enough that the cancel, sent from the delegate at 1 MB, lands before the
        // end even on a loaded machine (with /big the plugin could finish first).
        let url = URL(string: "ptest://h/big-slow?3000000")!
        let recorder = ResumeRecorder(cancelAt: 1_000_000)
        let s = session(recorder)
        s.downloadTask(with: url).resume()
        recorder.done.wait()
        let resumeData = try XCTUnwrap(recorder.resumeData)
        let second = ResumeRecorder(cancelAt: nil)
        session(second).downloadTask(withResumeData: resumeData).resume()
        second.done.wait()
        XCTAssertNil(second.error)
        XCTAssertGreaterThanOrEqual(second.resumedAt ?? 0, 1_000_000)
        let file = try XCTUnwrap(second.file)
        XCTAssertEqual(file.count, 3_000_000)
        XCTAssertEqual(file[2_999_999], UInt8(ascii: "a") + UInt8(2_999_999 % 26))
    }

    func testCancelStopsAndDestroysTheLoad() async throws {
        let before = try await counter("live")
        let task = session().dataTask(with: URL(string: "ptest://h/slow")!)
        task.resume()
        XCTAssertTrue(eventually { task.countOfBytesReceived == 1 })
        task.cancel()
        XCTAssertTrue(eventually { task.state == .completed })
        XCTAssertEqual(task.error?.code, .cancelled)
        try await assertEventually { try await self.counter("live") == before }
    }

    func testIdleTimeoutStopsAPluginLoad() async throws {
        let s = session { $0.timeoutIntervalForRequest = 0.5 }
        do {
            _ = try await s.data(from: URL(string: "ptest://h/slow")!)
            XCTFail("expected a timeout")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .timedOut)
        }
    }

    /// ABI 1.1: the plugin is handed the session cache's response and lets the host
    /// serve it (a plugin scheme uses the cache like http does).
    func testPluginUsesTheSessionCache() async throws {
        final class Fetches: TaskDelegate, @unchecked Sendable {
            let types = Locked<[String]>([])
            func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
                types.withLock { $0.append(metrics.transactionMetrics.last?.fetchType ?? "-") }
            }
        }
        let fetches = Fetches()
        let s = session(fetches) { $0.responseCache = HTTPCache() }
        let loads = try await counter("full_loads")
        let checks = try await counter("validations")
        let (first, _) = try await s.data(from: URL(string: "ptest://h/cacheable")!)
        let (second, response) = try await s.data(from: URL(string: "ptest://h/cacheable")!)
        XCTAssertEqual(first, Data("cacheable body".utf8))
        XCTAssertEqual(second, first)
        XCTAssertEqual(response.statusCode, 200)
        let loadsAfter = try await counter("full_loads")
        let checksAfter = try await counter("validations")
        XCTAssertEqual(loadsAfter, loads + 1)
        XCTAssertEqual(checksAfter, checks + 1)
        XCTAssertEqual(fetches.types.current.last, "revalidated")
    }

    func testLinkedEntryPointWithoutDlopen() throws {
        // The same adapter for an entry point the application links in: here the
        // symbol of the loaded file stands for it.
        typealias Entry = porter_plugin_entry_fn
        let entry = try XCTUnwrap(PluginFixture.symbol("porter_plugin_entry", in: Self.pluginPath, as: Entry.self))
        let registry = HandlerRegistry()
        let verdict = PluginLoader(registry: registry).register(entry: entry, name: "linked ptest")
        XCTAssertNotNil(verdict.plugin, "\(verdict)")
        XCTAssertEqual(registry.registrations.first?.origin, .inProcess)
        XCTAssertTrue(registry.hasHandler(forScheme: "ptest"))
    }
}

/// The adapter tests with the plugin in a worker process.
final class IsolatedAdapterTests: AdapterTests {
    override class var mode: PluginMode { .isolated }
    // Linux XCTest finds only the methods a class declares: each test, again.
    override func testThePluginRunsWhereAsked() { super.testThePluginRunsWhereAsked() }
    override func testDataThroughThePlugin() async throws { try await super.testDataThroughThePlugin() }
    override func testCanHandleIsAsked() async throws { try await super.testCanHandleIsAsked() }
    override func testFailureCarriesCodeAndCause() async throws { try await super.testFailureCarriesCodeAndCause() }
    override func testStartRefusal() async throws { try await super.testStartRefusal() }
    override func testLateCallsFromADeadClientAreIgnored() async throws { try await super.testLateCallsFromADeadClientAreIgnored() }
    override func testRedirectInsideTheScheme() async throws { try await super.testRedirectInsideTheScheme() }
    override func testRedirectToHTTPIsRefusedUnlessAllowed() async throws { try await super.testRedirectToHTTPIsRefusedUnlessAllowed() }
    override func testPasswordChallengeThroughTheDelegate() async throws { try await super.testPasswordChallengeThroughTheDelegate() }
    override func testWrongPasswordsEndInAuthenticationFailed() async throws { try await super.testWrongPasswordsEndInAuthenticationFailed() }
    override func testCancelledChallenge() async throws { try await super.testCancelledChallenge() }
    override func testURLCredentialsAreProposed() async throws { try await super.testURLCredentialsAreProposed() }
    override func testServerTrustChallengeCarriesTheIdentity() async throws { try await super.testServerTrustChallengeCarriesTheIdentity() }
    override func testUploadReadsTheBody() async throws { try await super.testUploadReadsTheBody() }
    override func testLargeBodyWithBackPressure() async throws { try await super.testLargeBodyWithBackPressure() }
    override func testDownloadAndResume() async throws { try await super.testDownloadAndResume() }
    override func testCancelStopsAndDestroysTheLoad() async throws { try await super.testCancelStopsAndDestroysTheLoad() }
    override func testIdleTimeoutStopsAPluginLoad() async throws { try await super.testIdleTimeoutStopsAPluginLoad() }
    override func testPluginUsesTheSessionCache() async throws { try await super.testPluginUsesTheSessionCache() }
    override func testLinkedEntryPointWithoutDlopen() throws { try super.testLinkedEntryPointWithoutDlopen() }
}

/// Waits until `condition` holds (at most `seconds`), failing the test otherwise.
func assertEventually(_ seconds: Double = 60, file: StaticString = #filePath, line: UInt = #line,
                      _ condition: () async throws -> Bool) async throws {
    let held = try await eventuallyAsync(seconds, condition)
    XCTAssertTrue(held, "the condition did not hold within \(seconds) s", file: file, line: line)
}

/// A task delegate that answers challenges with `answer` and records failure counts.
final class Answers: TaskDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var counts: [Int] = []
    let answer: @Sendable (AuthenticationChallenge) -> ChallengeDisposition
    init(_ answer: @escaping @Sendable (AuthenticationChallenge) -> ChallengeDisposition) { self.answer = answer }
    var failureCounts: [Int] { lock.withLock { counts } }
    func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
              completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        lock.withLock { counts.append(challenge.previousFailureCount) }
        completion(answer(challenge))
    }
}
