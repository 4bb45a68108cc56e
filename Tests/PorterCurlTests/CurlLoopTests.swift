import CCurl
import Foundation
import PorterCore
@testable import PorterCurl
import XCTest

/// PorterCurl on its own, without sockets: libcurl's file: protocol drives a real
/// transfer through the loop (as NIO's embedded channel drives a handler without a
/// network), and the pure parts — the error table, the body source — are called directly.
final class CurlLoopTests: XCTestCase {
    private func scratch(_ bytes: Data) throws -> URL {
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("porter-curl-\(UUID().uuidString)")
        try bytes.write(to: url)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url
    }

    /// Work runs on the loop's own thread, in the order it was given, and `isCurrent`
    /// says so there and only there.
    func testTheLoopRunsWorkOnItsThreadInOrder() {
        let loop = CurlLoop(name: "porter.test.order")
        XCTAssertFalse(loop.isCurrent)
        let seen = Locked([Int]())
        let onLoop = Locked(true)
        let done = DispatchSemaphore(value: 0)
        for i in 0..<200 {
            loop.execute {
                if !loop.isCurrent { onLoop.withLock { $0 = false } }
                seen.withLock { $0.append(i) }
                if i == 199 { done.signal() }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(seen.withLock { $0 }, Array(0..<200))
        XCTAssertTrue(onLoop.withLock { $0 })
    }

    /// A whole transfer through the multi handle: every write on the loop thread, the
    /// bytes exactly the file's, one completion with CURLE_OK.
    func testATransferRunsOnTheLoopWithoutASocket() throws {
        let body = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let file = try scratch(body)
        let loop = CurlLoop(name: "porter.test.file")
        let received = Locked(Data())
        let offLoop = Locked(0)
        let result = Locked<CURLcode?>(nil)
        let done = DispatchSemaphore(value: 0)
        loop.execute {
            guard let t = try? CurlTransfer(loop: loop) else { _ = done.signal(); return }
            t.set(CURLOPT_URL, file.absoluteString)
            t.onData = { bytes in
                if !loop.isCurrent { offLoop.withLock { $0 += 1 } }
                received.withLock { $0.append(contentsOf: bytes) }
                return .consumed
            }
            t.onComplete = { code in
                result.withLock { $0 = code }
                done.signal()
            }
            t.start()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(result.withLock { $0 }, CURLE_OK)
        XCTAssertEqual(received.withLock { $0 }, body)
        XCTAssertEqual(offLoop.withLock { $0 }, 0, "libcurl called back off the loop thread")
    }

    /// libcurl's results map to the Porter codes an application can act on; the curl
    /// code and text stay in the cause.
    func testLibcurlResultsMapToPorterCodes() {
        let url = URL(string: "http://h.example/")!
        let table: [(CURLcode, PorterError.Code)] = [
            (CURLE_COULDNT_RESOLVE_HOST, .cannotFindHost), (CURLE_COULDNT_CONNECT, .cannotConnectToHost),
            (CURLE_OPERATION_TIMEDOUT, .timedOut), (CURLE_PEER_FAILED_VERIFICATION, .serverCertificateUntrusted),
            (CURLE_SSL_CONNECT_ERROR, .secureConnectionFailed), (CURLE_RECV_ERROR, .networkConnectionLost),
            (CURLE_TOO_MANY_REDIRECTS, .tooManyRedirects), (CURLE_LOGIN_DENIED, .userAuthenticationRequired),
            (CURLE_REMOTE_FILE_NOT_FOUND, .fileDoesNotExist), (CURLE_WRITE_ERROR, .cannotWriteToFile),
            (CURLE_BAD_DOWNLOAD_RESUME, .resumeFailed), (CURLE_OUT_OF_MEMORY, .unknown),
        ]
        for (code, expected) in table {
            let e = PorterError.curl(code, url: url)
            XCTAssertEqual(e.code, expected, "\(code)")
            XCTAssertEqual(e.cause?.domain, "curl")
            XCTAssertEqual(e.cause?.code, Int(code.rawValue))
            XCTAssertEqual(e.url, url)
        }
        // The server's fault, whatever libcurl's code says.
        XCTAssertEqual(PorterError.curl(CURLE_UNSUPPORTED_PROTOCOL, url: url, detail: "Received HTTP/0.9 when not allowed").code,
                       .badServerResponse)
        XCTAssertEqual(PorterError.curl(CURLE_UNSUPPORTED_PROTOCOL, url: url).code, .unsupportedURL)
        XCTAssertEqual(PorterError.curl(CURLE_RECV_ERROR, url: url, detail: "Too large response headers: 307201 > 307200").code,
                       .badServerResponse)
        XCTAssertTrue(PorterError.curl(CURLE_COULDNT_CONNECT, url: url, detail: "Connection refused").message.contains("Connection refused"))
    }

    /// A request body is read in the pieces libcurl asks for, whatever its kind; a file
    /// that cannot be opened is an error, not a trap.
    func testBodySourcesReadInPieces() throws {
        let bytes = Data((0..<10_000).map { UInt8(truncatingIfNeeded: $0) })
        let file = try scratch(bytes)
        for body in [RequestBody.data(bytes), .file(file)] {
            let source = BodySource(body)
            XCTAssertEqual(source.length, Int64(bytes.count))
            var out = Data()
            var chunk = [UInt8](repeating: 0, count: 3_000)
            while true {
                let n = try chunk.withUnsafeMutableBytes { try source.read(into: $0) }
                if n == 0 { break }
                out.append(contentsOf: chunk[0..<n])
            }
            source.close()
            XCTAssertEqual(out, bytes)
        }
        let missing = BodySource(.file(URL(fileURLWithPath: "/nonexistent/porter-body")))
        var chunk = [UInt8](repeating: 0, count: 16)
        XCTAssertThrowsError(try chunk.withUnsafeMutableBytes { try missing.read(into: $0) }) { error in
            XCTAssertEqual((error as? PorterError)?.code, .fileDoesNotExist)
        }
    }

    /// `CurlLoop.loop(for:)` answers a session's repeated question from its last answer
    /// without comparing settings: a configuration changed after it asked gets the loop
    /// of its new settings, and the remembered answer keeps nothing of the configuration
    /// (its cache, its stores) alive.
    func testTheLoopOfAConfigurationFollowsItsChangesAndKeepsNothingAlive() {
        var config = SessionConfiguration.ephemeral
        config.caCertificateFile = "/porter-test/ca-\(UUID().uuidString).pem"
        let first = CurlLoop.loop(for: config)
        XCTAssertTrue(CurlLoop.loop(for: config) === first, "the same settings, the same loop")
        let copy = config
        XCTAssertTrue(CurlLoop.loop(for: copy) === first, "an unchanged copy has the same settings")
        config.tlsVerificationDisabled = true
        let changed = CurlLoop.loop(for: config)
        XCTAssertFalse(changed === first, "a configuration changed in place after asking gets its new settings' loop")
        XCTAssertTrue(CurlLoop.loop(for: copy) === first)
        config.tlsVerificationDisabled = false
        XCTAssertTrue(CurlLoop.loop(for: config) === first, "back to the first settings: back to their loop")

        weak var released: MemoryResponseCache?
        do {
            var withCache = SessionConfiguration.ephemeral
            withCache.pinnedPublicKey = "sha256//\(UUID().uuidString)"
            let cache = MemoryResponseCache()
            released = cache
            withCache.responseCache = cache
            _ = CurlLoop.loop(for: withCache)
        }
        XCTAssertNil(released, "the loop table keeps the last settings asked for, not the configuration and its cache")
    }

    /// A configuration whose loop ended idle and left the table gets a new loop the next
    /// time, not the one the table dropped (which would run beside a second one for the
    /// same settings, each with its own connection limit per host).
    func testTheLoopOfAConfigurationIsNotRememberedPastItsIdleEnd() {
        let saved = CurlLoop.idleExitMilliseconds.exchange(100, ordering: .relaxed)
        defer { CurlLoop.idleExitMilliseconds.store(saved, ordering: .relaxed) }
        var config = SessionConfiguration.ephemeral
        config.caCertificateFile = "/porter-test/ca-\(UUID().uuidString).pem"
        let first = CurlLoop.loop(for: config)
        let ran = DispatchSemaphore(value: 0)
        first.execute { ran.signal() }
        XCTAssertEqual(ran.wait(timeout: .now() + 120), .success)
        // Waits for the event (the loop's idle end), not for a time.
        let deadline = Date().addingTimeInterval(60)
        while CurlLoop.isInTable(first), Date() < deadline { usleep(10_000) }
        XCTAssertFalse(CurlLoop.isInTable(first), "the idle loop leaves the table")
        let next = CurlLoop.loop(for: config)
        XCTAssertFalse(next === first, "the dropped loop was handed out again")
        XCTAssertTrue(CurlLoop.isInTable(next))
    }

}
