import XCTest
import PorterTestSupport
@testable import Porter

/// A server that breaks HTTP in the ways real ones do: Porter reports each with a
/// specific error and never traps.
final class MisbehavingServerTests: XCTestCase {
    nonisolated(unsafe) static var server: Process?
    nonisolated(unsafe) static var port = 0

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("misbehave.py").path
        do {
            let (p, n) = try startReadyServer("/usr/bin/env", ["python3", script])
            port = n
            server = p
        } catch {}
    }

    override class func tearDown() {
        server?.terminate()
        server?.waitUntilExit()
        super.tearDown()
    }

    override func setUpWithError() throws {
        guard MisbehavingServerTests.port > 0 else {
            throw NginxFixture.Failure.setup("the misbehaving server (python3 misbehave.py) did not start")
        }
    }

    private func load(_ path: String, _ change: (inout SessionConfiguration) -> Void = { _ in }) async -> Result<(Data, Response), PorterError> {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        change(&c)
        do {
            return .success(try await Session(configuration: c).data(from: URL(string: "http://127.0.0.1:\(MisbehavingServerTests.port)\(path)")!))
        } catch let e as PorterError {
            return .failure(e)
        } catch {
            return .failure(PorterError(.unknown, "\(error)"))
        }
    }

    private func code(_ r: Result<(Data, Response), PorterError>) -> PorterError.Code? {
        if case .failure(let e) = r { return e.code }
        return nil
    }

    func testResetMidBody() async {
        let r = await load("/reset")
        XCTAssertEqual(code(r), .networkConnectionLost)
        if case .failure(let e) = r {
            XCTAssertEqual(e.cause?.domain, "curl")
            XCTAssertTrue([18, 56].contains(e.cause?.code ?? 0), "\(e)")
        }
    }

    func testStallHitsTheIdleTimeout() async {
        let start = Date()
        let r = await load("/stall") { $0.timeoutIntervalForRequest = 0.5 }
        XCTAssertEqual(code(r), .timedOut)
        XCTAssertLessThan(Date().timeIntervalSince(start), 20, "the stall lasts 30 s")
    }

    func testTruncatedChunkedBody() async {
        let r = await load("/truncated")
        XCTAssertEqual(code(r), .networkConnectionLost)
    }

    func testMalformedStatusLineAndEmptyReply() async {
        let malformed = await load("/malformed")
        XCTAssertEqual(code(malformed), .badServerResponse)
        let empty = await load("/empty")
        XCTAssertEqual(code(empty), .networkConnectionLost)
    }

    func testEndlessRedirects() async {
        let r = await load("/forever") { $0.maximumRedirects = 7 }
        XCTAssertEqual(code(r), .tooManyRedirects)
    }

    func testOddButParseableResponsesAreDelivered() async throws {
        let weird = try await load("/weird-status").get()
        XCTAssertEqual(weird.1.statusCode, 999)
        XCTAssertEqual(weird.0, Data("ok".utf8))
        let odd = try await load("/odd-headers").get()
        XCTAssertEqual(odd.0, Data("ok".utf8))
        XCTAssertNil(odd.1.value(forHeader: "Bad Name"), "an invalid field name is dropped, not trapped on")
        XCTAssertEqual(odd.1.value(forHeader: "X-Empty"), "")
        XCTAssertNotNil(odd.1.value(forHeader: "X-Bin"))
        // A line without a colon: libcurl refuses the reply, Porter says so clearly.
        let junk = await load("/junk-headers")
        XCTAssertEqual(code(junk), .badServerResponse)
        if case .failure(let e) = junk { XCTAssertTrue(e.message.contains("Header without colon"), e.message) }
    }

    /// A 206 whose Content-Range starts elsewhere than asked fails clearly; the partial
    /// file and the resume data are left as they were (it once made a wrong file, exit 0).
    /// A 206 whose Content-Range start plus Content-Length passes Int64: the task
    /// fails or ends, the process does not trap (it did, summing them for its progress).
    func testLengthsAtTheEdgeOfInt64DoNotTrap() async throws {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.timeoutIntervalForRequest = 2
        let url = URL(string: "http://127.0.0.1:\(MisbehavingServerTests.port)/huge-range")!
        do {
            let (_, response) = try await Session(configuration: c).data(from: url)
            XCTAssertEqual(response.statusCode, 206)
        } catch let e as PorterError {
            XCTAssertNotEqual(e.code, .unknown, "\(e)")
        }
    }

    func testAResumeAnsweredWithAnotherRangeFailsAndKeepsThePartialFile() async throws {
        let dir = NSTemporaryDirectory() + "porter-range-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // Named as a download task names its partial files: resume data may name no other.
        let partial = dir + "/.porter-download-Ab12Cd"
        let before = Data("ABCDEFGHIJKLMNO".utf8)
        XCTAssertTrue(FileManager.default.createFile(atPath: partial, contents: before))
        let url = URL(string: "http://127.0.0.1:\(MisbehavingServerTests.port)/wrong-range")!
        let resume = ResumeData(url: url, method: "GET", headers: [], validator: "\"r1\"", bytesReceived: 15,
                                expectedTotalBytes: 20, partialFilePath: partial)
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.downloadDirectory = dir
        do {
            _ = try await Session(configuration: c).download(resumeFrom: resume.encoded())
            XCTFail("a wrong range was accepted")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .resumeFailed, "\(e)")
            XCTAssertTrue(e.message.contains("resumed at byte 0, not at byte 15"), e.message)
            XCTAssertEqual(e.resumeData.flatMap { try? ResumeData(data: $0) }?.bytesReceived, 15)
        }
        XCTAssertEqual(FileManager.default.contents(atPath: partial), before, "the partial file is untouched")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [".porter-download-Ab12Cd"])

        // The CLI's -C - the same way: a clear error, the output untouched.
        let output = dir + "/out"
        XCTAssertTrue(FileManager.default.createFile(atPath: output, contents: before))
        let r = try runProcess(porterBinary, ["-C", "-", "-o", output, url.absoluteString], environment: ["http_proxy": nil])
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("resumed at byte 0"), r.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: output), before)
    }

    /// Exit codes and errors say what happened: oversized headers are a bad response, not
    /// "cannot connect"; a bad status line is a bad response, not a bad URL; a damaged
    /// cookie database is a store problem, not "cannot write output".
    func testErrorsSayWhatHappened() async throws {
        let huge = await load("/huge-header")
        XCTAssertEqual(code(huge), .badServerResponse, "\(huge)")
        let version = await load("/bad-version")
        XCTAssertEqual(code(version), .badServerResponse, "\(version)")
        let base = "http://127.0.0.1:\(MisbehavingServerTests.port)"
        // The exit codes are curl's own on the same URLs.
        for path in ["/huge-header", "/bad-version"] {
            let reference = try runProcess("/usr/bin/curl", ["-s", base + path], environment: withoutProxies).status
            XCTAssertEqual(try runProcess(porterBinary, [base + path], environment: withoutProxies).status, reference, path)
            XCTAssertNotEqual(reference, 7, "not 'cannot connect'")
        }

        let home = NSTemporaryDirectory() + "porter-store-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: home) }
        try FileManager.default.createDirectory(atPath: home + "/porter", withIntermediateDirectories: true)
        chmod(home + "/porter", 0o700)
        let db = home + "/porter/cookies.sqlite"
        XCTAssertTrue(FileManager.default.createFile(atPath: db, contents: Data(repeating: 0x5A, count: 8192)))
        chmod(db, 0o600)
        let r = try runProcess(porterBinary, ["--cookie-store", base + "/ok"], environment: ["XDG_DATA_HOME": home])
        XCTAssertEqual(r.status, 101, r.stderr)
        XCTAssertTrue(r.stderr.contains("damaged"), r.stderr)
    }

    /// Cookies holding an ESC, a BEL or bytes that are not UTF-8 are ignored whole, not
    /// stored mangled (the bytes became U+FFFD); the good one is kept. (libcurl itself
    /// refuses a response with a NUL in its head.)
    func testCookiesWithControlCharactersOrBadBytesAreIgnored() async throws {
        let store = MemoryCookieStore()
        let r = await load("/bad-cookies") { $0.cookieStore = store }
        if case .failure(let e) = r { XCTFail("\(e)") }
        XCTAssertEqual(store.allCookies.map(\.name), ["fine"])
        XCTAssertEqual(store.allCookies.first?.value, "ok")
    }

    /// A valid gzip of 512 MiB of zeros to a consumer slower than the network: it decodes
    /// with flat memory (libcurl, pausing mid-decode, once kept up to 64 MiB of decoded
    /// output and then failed with "Out of memory", exit 3).
    func testAGzipBombDecodesWithFlatMemory() throws {
        let dir = NSTemporaryDirectory() + "porter-bomb-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let url = "http://127.0.0.1:\(MisbehavingServerTests.port)/gzip-bomb?mib=512"
        // A slow reader on the pipe makes porter pause again and again.
        let script = "/usr/bin/time -f %M -o \"$0/rss\" \"$1\" \"$2\" | (sleep 0.5; wc -c > \"$0/count\")"
        let r = try runProcess("/bin/sh", ["-c", script, dir, porterBinary, url], environment: ["http_proxy": nil])
        XCTAssertEqual(r.status, 0, r.stderr)
        let count = try String(contentsOfFile: dir + "/count", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(count, String(512 << 20), r.stderr)
        let kib = Int(try String(contentsOfFile: dir + "/rss", encoding: .utf8).split(separator: "\n").last ?? "") ?? 0
        XCTAssertGreaterThan(kib, 0)
        XCTAssertLessThan(kib, 64 * 1024, "peak RSS \(kib) KiB while decoding a 512 MiB gzip bomb")
    }

    /// Damaged gzip or br fails with cannotDecodeContentData; the
    /// optional ratio guard stops a bomb when asked to.
    func testContentCodings() async throws {
        let damaged = await load("/bad-gzip")
        XCTAssertEqual(code(damaged), .cannotDecodeContentData)
        let truncated = await load("/half-gzip")
        XCTAssertEqual(code(truncated), .cannotDecodeContentData)
        // br is decoded now (libbrotlidec): these four bytes are no brotli stream.
        let br = await load("/brotli")
        XCTAssertEqual(code(br), .cannotDecodeContentData)
        let guarded = await load("/gzip-bomb?mib=64") { $0.maximumDecodingRatio = 100 }
        XCTAssertEqual(code(guarded), .dataLengthExceedsMaximum)
        let unguarded = await load("/gzip-bomb?mib=8")
        guard case .success(let (zeros, _)) = unguarded else { return XCTFail("\(unguarded)") }
        XCTAssertEqual(zeros.count, 8 << 20)
        XCTAssertTrue(zeros.allSatisfy { $0 == 0 })
    }

    func testFailedDownloadLeavesNoFile() async throws {
        let dir = NSTemporaryDirectory() + "porter-mis-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.downloadDirectory = dir
        do {
            _ = try await Session(configuration: c).download(from: URL(string: "http://127.0.0.1:\(MisbehavingServerTests.port)/reset")!)
            XCTFail()
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .networkConnectionLost)
            XCTAssertNil(e.resumeData, "no validator: not resumable")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [])
    }
}
