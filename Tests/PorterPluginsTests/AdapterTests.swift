import Foundation
import Porter
import PorterPlugins
import PorterTestSupport
import XCTest

/// A C plugin's scheme through sessions, delegates, redirects, challenges,
/// back-pressure, uploads and downloads — as a built-in handler is.
final class AdapterTests: XCTestCase {
    // One plugin file for the whole class (loaded once per process, never unloaded).
    nonisolated(unsafe) static var pluginPath = ""
    nonisolated(unsafe) static var registry = HandlerRegistry()

    override class func setUp() {
        super.setUp()
        do {
            let folder = try PluginFixture.folder()
            pluginPath = try PluginFixture.build("ptest.so", in: folder)
            registry = HandlerRegistry()
            Porter.bootstrap(registry: registry, loadPlugins: false)
            let verdict = PluginLoader(registry: registry).load(path: pluginPath)
            if verdict.plugin == nil { print("plugin did not load: \(verdict)") }
        } catch {
            print("fixture failed: \(error)")
        }
    }

    private func session(_ delegate: (any SessionDelegate)? = nil, _ tweak: (inout SessionConfiguration) -> Void = { _ in })
        -> Session {
        var config = SessionConfiguration.ephemeral
        config.registry = Self.registry
        tweak(&config)
        return Session(configuration: config, delegate: delegate)
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
        typealias Count = @convention(c) () -> Int32
        let lateCalls = { PluginFixture.symbol("testplugin_late_calls", in: Self.pluginPath, as: Count.self)?() ?? -1 }
        let before = lateCalls()
        XCTAssertGreaterThanOrEqual(before, 0)
        do {
            _ = try await session().data(from: URL(string: "ptest://h/late-after-refuse")!)
            XCTFail("expected the refusal")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .noPermissionsToReadFile)
            XCTAssertEqual(e.message, "refused, but calls anyway")
        }
        XCTAssertTrue(eventually { lateCalls() == before + 1 }, "the late calls were made (and survived)")
        do {
            _ = try await session().data(from: URL(string: "ptest://h/late-after-destroy")!)
            XCTFail("the test plugin fails unknown paths")
        } catch let e as PorterError {
            XCTAssertNotEqual(e.message, "late")
        }
        XCTAssertTrue(eventually { lateCalls() == before + 2 }, "the calls after destroy were made (and survived)")
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
        let before = PluginFixture.counter("testplugin_pauses", of: Self.pluginPath)
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
        XCTAssertGreaterThan(PluginFixture.counter("testplugin_pauses", of: Self.pluginPath), before,
                             "the plugin's pause was never called")
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
        let before = PluginFixture.counter("testplugin_live_loads", of: Self.pluginPath)
        let task = session().dataTask(with: URL(string: "ptest://h/slow")!)
        task.resume()
        XCTAssertTrue(eventually { task.countOfBytesReceived == 1 })
        task.cancel()
        XCTAssertTrue(eventually { task.state == .completed })
        XCTAssertEqual(task.error?.code, .cancelled)
        XCTAssertTrue(eventually { PluginFixture.counter("testplugin_live_loads", of: Self.pluginPath) == before },
                      "the load was not destroyed")
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
        let loads = PluginFixture.counter("testplugin_full_loads", of: Self.pluginPath)
        let checks = PluginFixture.counter("testplugin_validations", of: Self.pluginPath)
        let (first, _) = try await s.data(from: URL(string: "ptest://h/cacheable")!)
        let (second, response) = try await s.data(from: URL(string: "ptest://h/cacheable")!)
        XCTAssertEqual(first, Data("cacheable body".utf8))
        XCTAssertEqual(second, first)
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(PluginFixture.counter("testplugin_full_loads", of: Self.pluginPath), loads + 1)
        XCTAssertEqual(PluginFixture.counter("testplugin_validations", of: Self.pluginPath), checks + 1)
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
