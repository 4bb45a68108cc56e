import XCTest
import PorterTestSupport
@testable import Porter
@testable import PorterHTTP
@testable import PorterCurl

/// The HTTP state and codings curl has, against a real nginx: HSTS (RFC 6797), Alt-Svc
/// (RFC 7838), br and zstd bodies; the library and `porter`'s flags.
final class HTTPStateTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap()
        super.setUp()
    }

    private var tmp: String!

    override func setUpWithError() throws {
        try super.setUpWithError()
        tmp = NSTemporaryDirectory() + "porter-state-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: tmp, withIntermediateDirectories: true)
    }
    override func tearDown() {
        if let tmp { try? FileManager.default.removeItem(atPath: tmp) }
        super.tearDown()
    }

    private func config(_ change: (inout SessionConfiguration) -> Void = { _ in }) -> SessionConfiguration {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.caCertificateFile = nginx.caFile
        c.responseCache = nil
        change(&c)
        return c
    }
    private func url(_ s: String) -> URL { URL(string: s)! }
    private func text(_ d: Data) -> String { String(decoding: d, as: UTF8.self) }
    private var localhostHTTPS: String { "https://localhost:\(nginx.httpsPort)" }
    /// Plain http to the TLS port: nginx answers 400 unless the load became https.
    private var plainToTLSPort: String { "http://localhost:\(nginx.httpsPort)" }

    private func code(_ body: () async throws -> Any) async -> PorterError.Code? {
        do { _ = try await body(); return nil } catch let e as PorterError { return e.code } catch { return nil }
    }

    // MARK: - br and zstd

    func testBrotliAndZstdBodiesAreDecodedAndOffered() async throws {
        let s = Session(configuration: config())
        let original = try String(contentsOfFile: nginx.dir + "/www/text.txt", encoding: .utf8)
        for name in ["text.txt.br", "text.txt.zst"] {
            let (data, response) = try await s.data(from: url(nginx.http + "/coded/" + name))
            XCTAssertEqual(text(data), original, name)
            XCTAssertEqual(response.value(forHeader: "Content-Encoding"), name.hasSuffix(".br") ? "br" : "zstd")
        }
        let (ae, _) = try await s.data(from: url(nginx.http + "/accept-encoding"))
        XCTAssertEqual(text(ae), "ae=gzip, deflate, br, zstd\n")
    }

    /// The opt-out: the body as the server sent it, and no Accept-Encoding offered.
    func testDecodingOptOutDeliversTheBytesAsSent() async throws {
        let s = Session(configuration: config { $0.decodesContentEncoding = false })
        let (data, _) = try await s.data(from: url(nginx.http + "/coded/text.txt.br"))
        XCTAssertEqual(data, try Data(contentsOf: URL(fileURLWithPath: nginx.dir + "/www/text.txt.br")))
        let (ae, _) = try await s.data(from: url(nginx.http + "/accept-encoding"))
        XCTAssertEqual(text(ae), "ae=\n")
    }

    /// A server's bombs: 64 MiB of zeros in a few KiB of br or zstd stop at the ratio; a
    /// zstd frame that asks for a 128 MiB window (RFC 9659 allows 8 MiB) is refused
    /// before its window is allocated.
    func testBrotliAndZstdBombsStopAtTheRatioAndWideWindowsAreRefused() async throws {
        let s = Session(configuration: config { $0.maximumDecodingRatio = 100 })
        for name in ["zeros-64.br", "zeros-64.zst"] {
            let c = await code { try await s.data(from: self.url(self.nginx.http + "/coded/" + name)) }
            XCTAssertEqual(c, .dataLengthExceedsMaximum, name)
        }
        do {
            _ = try await Session(configuration: config()).data(from: url(nginx.http + "/coded/wide.zst"))
            XCTFail("a 128 MiB zstd window was accepted")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotDecodeContentData)
            XCTAssertTrue(e.message.contains("damaged"), e.message)
        }
        // A valid zstd body past one callback's budget ends clean (zstd asks for the next
        // frame's header after the last one: that is no truncation).
        let (piped, _) = try await Session(configuration: config()).data(from: url(nginx.http + "/coded/piped.zst"))
        XCTAssertEqual(piped.count, 16 << 20)
    }

    /// 256 MiB of zeros as br and as zstd (47 KiB and 9 KiB on the wire) to a consumer
    /// slower than the network, with no ratio set: the whole body arrives and the peak
    /// memory stays flat. One socket read decodes to at most 1 MiB before the transfer
    /// pauses; decoded without that budget, a 16 KiB read of this br is 90 MiB at once.
    func testBrotliAndZstdBombsDecodeWithFlatMemory() throws {
        for name in ["zeros-256.br", "zeros-256.zst"] {
            let script = "/usr/bin/time -f %M -o \"$0/rss\" \"$1\" \"$2\" | (sleep 0.5; wc -c > \"$0/count\")"
            let r = try runProcess("/bin/sh", ["-c", script, tmp, porterBinary, nginx.http + "/coded/" + name],
                                   environment: ["http_proxy": nil])
            XCTAssertEqual(r.status, 0, r.stderr)
            let count = try String(contentsOfFile: tmp + "/count", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            XCTAssertEqual(count, String(256 << 20), name)
            let kib = Int(try String(contentsOfFile: tmp + "/rss", encoding: .utf8).split(separator: "\n").last ?? "") ?? 0
            XCTAssertGreaterThan(kib, 0)
            XCTAssertLessThan(kib, 64 * 1024, "peak RSS \(kib) KiB while decoding \(name)")
        }
    }

    /// curl's rule in the CLI: `-H 'Accept-Encoding: br'` gets the bytes as sent;
    /// without it (or with --compressed) porter decodes.
    func testCLIWithItsOwnAcceptEncodingGetsTheBytesAsSent() throws {
        let out = tmp + "/raw"
        let r = try runProcess(porterBinary, ["-s", "-H", "Accept-Encoding: br", "-o", out, nginx.http + "/coded/text.txt.br"],
                               environment: ["http_proxy": nil])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: out)),
                       try Data(contentsOf: URL(fileURLWithPath: nginx.dir + "/www/text.txt.br")))
        let decoded = try runProcess(porterBinary, ["-s", "--compressed", "-H", "Accept-Encoding: br", nginx.http + "/coded/text.txt.br"],
                                     environment: ["http_proxy": nil])
        XCTAssertEqual(decoded.stdout, try String(contentsOfFile: nginx.dir + "/www/text.txt", encoding: .utf8))
    }

    // MARK: - HSTS

    final class Redirects: TaskDelegate, @unchecked Sendable {
        let lock = NSLock()
        var seen: [(Int?, String?, Bool)] = []
        var fetchTypes: [String] = []
        func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
                  completion: @escaping @Sendable (Request?) -> Void) {
            lock.withLock { seen.append((response.statusCode, response.statusLine, response.isInternalRedirect)) }
            completion(newRequest)
        }
        func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
            lock.withLock { fetchTypes = metrics.transactionMetrics.map(\.fetchType) }
        }
    }

    /// A host that sent Strict-Transport-Security over verified https is never loaded
    /// over plain http again: `http://localhost:TLSPORT/` (nginx's 400 "plain HTTP request
    /// sent to HTTPS port" without HSTS) becomes https before anything is sent, as a 307
    /// Internal Redirect the delegate and the metrics see; the request keeps its fields.
    func testHSTSUpgradesAKnownHostBeforeAnythingIsSent() async throws {
        let store = HSTSStore()
        let d = Redirects()
        let s = Session(configuration: config { $0.hstsStore = store }, delegate: d)
        // Not known yet: the plain request reaches the TLS port and is refused.
        let (_, before) = try await s.data(from: url(plainToTLSPort + "/index.html"))
        XCTAssertEqual(before.statusCode, 400)
        _ = try await s.data(from: url(localhostHTTPS + "/hsts/set"))
        XCTAssertEqual(store.entries.map(\.host), ["localhost"])
        var request = Request(url: url(plainToTLSPort + "/headers"))
        request.headerFields[.authorization] = "Bearer kept"
        let (data, response) = try await s.data(for: request)
        XCTAssertEqual(response.url.absoluteString, localhostHTTPS + "/headers")
        XCTAssertTrue(text(data).hasPrefix("auth=Bearer kept "), text(data))
        let seen = d.lock.withLock { d.seen }
        XCTAssertEqual(seen.count, 1)
        XCTAssertEqual(seen.first?.0, 307)
        XCTAssertEqual(seen.first?.1, "HTTP/1.1 307 Internal Redirect")
        XCTAssertEqual(seen.first?.2, true)
        XCTAssertEqual(d.lock.withLock { d.fetchTypes }, ["local", "networkLoad"])
    }

    /// RFC 6797 §8.3: a known HSTS host is not loaded over plain http even from the
    /// cache. A fresh stored response for the http URL (planted here) is not served; the
    /// load becomes https first, and the server answers.
    func testHSTSUpgradesBeforeAFreshCacheHitIsServed() async throws {
        let store = HSTSStore()
        let cache = HTTPCache()
        let d = Redirects()
        let c = config { $0.hstsStore = store; $0.responseCache = cache }
        let s = Session(configuration: c, delegate: d)
        var planted = Request(url: url(plainToTLSPort + "/index.html"))
        planted.cachePartition = c.cachePartition
        var fields = HTTPFields()
        fields[.cacheControl] = "max-age=600"
        fields[.date] = CookieRules.formatDate(Date())
        let stored = Response(url: planted.url, mimeType: "text/plain", expectedContentLength: 7, statusCode: 200,
                              headerFields: fields)
        cache.storeCachedResponse(CachedResponse(response: stored, data: Data("planted".utf8), storagePolicy: .allowed),
                                  for: planted)
        let (hit, _) = try await s.data(from: planted.url)
        XCTAssertEqual(text(hit), "planted", "not yet HSTS: the fresh stored response answers")
        _ = try await s.data(from: url(localhostHTTPS + "/hsts/set"))
        XCTAssertEqual(store.entries.map(\.host), ["localhost"])
        let (data, response) = try await s.data(from: planted.url)
        XCTAssertEqual(response.url.absoluteString, localhostHTTPS + "/index.html")
        XCTAssertEqual(data, try Data(contentsOf: URL(fileURLWithPath: nginx.dir + "/www/index.html")))
        XCTAssertEqual(d.lock.withLock { d.seen.map(\.0) }, [307])
    }

    /// What must never make a host HSTS: the header over plain http, over https with
    /// verification off, from an IP address, or malformed (a directive twice).
    /// `max-age=0` removes the host.
    func testHSTSIsLearnedOnlyFromAVerifiedSecureResponse() async throws {
        let store = HSTSStore()
        _ = try await Session(configuration: config { $0.hstsStore = store }).data(from: url(nginx.localhostHTTP + "/hsts/set"))
        XCTAssertEqual(store.entries, [], "learned from plain http")
        _ = try await Session(configuration: config { $0.hstsStore = store; $0.tlsVerificationDisabled = true; $0.caCertificateFile = nil })
            .data(from: url(localhostHTTPS + "/hsts/set"))
        XCTAssertEqual(store.entries, [], "learned with verification off")
        let s = Session(configuration: config { $0.hstsStore = store })
        _ = try await s.data(from: url(nginx.https + "/hsts/set"))
        XCTAssertEqual(store.entries, [], "learned for an IP address")
        _ = try await s.data(from: url(localhostHTTPS + "/hsts/bad"))
        XCTAssertEqual(store.entries, [], "learned from a malformed value")
        _ = try await s.data(from: url(localhostHTTPS + "/hsts/sub"))
        XCTAssertEqual(store.entries.map(\.includesSubdomains), [true])
        XCTAssertNotNil(store.upgradedURL(for: url("http://a.b.localhost:8080/x")))
        _ = try await s.data(from: url(localhostHTTPS + "/hsts/clear"))
        XCTAssertEqual(store.entries, [], "max-age=0 did not remove the host")
        let (_, plain) = try await s.data(from: url(plainToTLSPort + "/index.html"))
        XCTAssertEqual(plain.statusCode, 400)
    }

    /// The rules of the store, on a clock: expiry, subdomains, ports, IP addresses.
    func testHSTSStoreRules() {
        let now = Locked(Date(timeIntervalSince1970: 1_700_000_000))
        let store = HSTSStore(clock: { now.current })
        XCTAssertTrue(store.noteHeader("Max-Age=\"60\"; includeSubDomains; preload", host: "Example.COM."))
        XCTAssertEqual(store.upgradedURL(for: url("http://sub.example.com/a?b"))?.absoluteString, "https://sub.example.com/a?b")
        XCTAssertEqual(store.upgradedURL(for: url("http://example.com:80/"))?.absoluteString, "https://example.com/")
        XCTAssertEqual(store.upgradedURL(for: url("http://example.com:8080/"))?.absoluteString, "https://example.com:8080/")
        XCTAssertNil(store.upgradedURL(for: url("http://badexample.com/")))
        XCTAssertNil(store.upgradedURL(for: url("https://example.com/")))
        XCTAssertFalse(store.noteHeader("max-age=60", host: "10.0.0.1"))
        XCTAssertFalse(store.noteHeader("max-age=60", host: "[::1]"))
        XCTAssertFalse(store.noteHeader("includeSubDomains", host: "a.test"))
        XCTAssertFalse(store.noteHeader("max-age=-1", host: "a.test"))
        XCTAssertFalse(store.noteHeader("max-age=1; includeSubDomains=yes", host: "a.test"))
        now.withLock { $0 += 61 }
        XCTAssertNil(store.upgradedURL(for: url("http://example.com/")), "expired entry still used")
        XCTAssertEqual(store.entries, [])
    }

    /// Files in curl's format, both ways, with curl 7.88 itself: Porter's file upgrades
    /// curl's request, curl's file upgrades Porter's. The default store's file is 0600
    /// and a store others may read is refused.
    func testHSTSFilesInCurlsFormat() async throws {
        let path = tmp + "/porter/hsts.txt"
        let store = try HSTSStore(path: path)
        _ = try await Session(configuration: config { $0.hstsStore = store }).data(from: url(localhostHTTPS + "/hsts/set"))
        let written = try String(contentsOfFile: path, encoding: .utf8)
        XCTAssertTrue(written.contains("\nlocalhost \""), written)
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        let c = try runProcess("/usr/bin/curl", ["-s", "--hsts", path, "--cacert", nginx.caFile, plainToTLSPort + "/index.html"],
                               environment: ["http_proxy": nil])
        XCTAssertEqual(c.stdout, "hello from nginx\n", "curl did not read Porter's file: \(c.stderr)")

        let curlFile = tmp + "/curl-hsts.txt"
        _ = try runProcess("/usr/bin/curl", ["-s", "--hsts", curlFile, "--cacert", nginx.caFile, localhostHTTPS + "/hsts/sub"],
                           environment: ["http_proxy": nil])
        let fromCurl = try HSTSStore(path: curlFile, requirePrivate: false)
        XCTAssertEqual(fromCurl.entries.map(\.host), ["localhost"])
        XCTAssertEqual(fromCurl.entries.map(\.includesSubdomains), [true])
        let (data, _) = try await Session(configuration: config { $0.hstsStore = fromCurl }).data(from: url(plainToTLSPort + "/index.html"))
        XCTAssertEqual(text(data), "hello from nginx\n")

        chmod(path, 0o644)
        XCTAssertThrowsError(try HSTSStore(path: path)) { XCTAssertEqual(($0 as? PorterError)?.code, .noPermissionsToReadFile) }
    }

    /// `porter --hsts FILE` as `curl --hsts FILE`: the second run upgrades without -L,
    /// and shows no 307 with -i.
    func testCLIHSTSFlag() throws {
        let file = tmp + "/hsts.txt"
        let learn = try runProcess(porterBinary, ["-s", "--hsts", file, "--cacert", nginx.caFile, localhostHTTPS + "/hsts/set"],
                                   environment: ["http_proxy": nil])
        XCTAssertEqual(learn.status, 0, learn.stderr)
        XCTAssertTrue(try String(contentsOfFile: file, encoding: .utf8).contains("localhost \""))
        let r = try runProcess(porterBinary, ["-s", "-i", "--no-location", "--hsts", file, "--cacert", nginx.caFile,
                                              plainToTLSPort + "/index.html"], environment: ["http_proxy": nil])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertFalse(r.stdout.contains("307"), r.stdout)
        XCTAssertTrue(r.stdout.hasSuffix("hello from nginx\n"), r.stdout)
        let without = try runProcess(porterBinary, ["-s", "--cacert", nginx.caFile, plainToTLSPort + "/index.html"],
                                     environment: ["http_proxy": nil])
        XCTAssertFalse(without.stdout.contains("hello from nginx"), "upgraded without --hsts (curl does not)")
    }

    // MARK: - Alt-Svc

    /// An https origin that names an h2 alternative on another port (`Alt-Svc:
    /// h2=":ALT"`): the cache file gets the entry in curl's format, and the next load of
    /// the origin goes to the alternative (which answers "alt" instead of "origin").
    func testAltSvcCacheIsWrittenAndUsed() async throws {
        let path = tmp + "/porter/alt-svc.txt"
        let cache = try AltSvcCache(path: path)
        let s = Session(configuration: config { $0.altSvcCache = cache })
        let (first, _) = try await s.data(from: url(localhostHTTPS + "/alt/who"))
        XCTAssertEqual(text(first), "origin\n")
        let line = "h2 localhost \(nginx.httpsPort) h2 localhost \(nginx.altPort) "
        XCTAssertTrue(eventually { ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").contains(line) },
                      (try? String(contentsOfFile: path, encoding: .utf8)) ?? "no file")
        let (second, _) = try await Session(configuration: config { $0.altSvcCache = cache }).data(from: url(localhostHTTPS + "/alt/who"))
        XCTAssertEqual(text(second), "alt\n")
        // A session without the cache ignores it (no handle keeps another's alternatives).
        for _ in 0..<3 {
            let (plain, _) = try await Session(configuration: config()).data(from: url(localhostHTTPS + "/alt/who"))
            XCTAssertEqual(text(plain), "origin\n")
        }
    }

    func testCLIAltSvcFlag() throws {
        let file = tmp + "/alt.txt"
        let args = ["-s", "--alt-svc", file, "--cacert", nginx.caFile, localhostHTTPS + "/alt/who"]
        let first = try runProcess(porterBinary, args, environment: ["http_proxy": nil])
        XCTAssertEqual(first.stdout, "origin\n", first.stderr)
        XCTAssertTrue(try String(contentsOfFile: file, encoding: .utf8).contains("h2 localhost \(nginx.httpsPort) h2 localhost \(nginx.altPort) "))
        let second = try runProcess(porterBinary, args, environment: ["http_proxy": nil])
        XCTAssertEqual(second.stdout, "alt\n", second.stderr)
        // curl reads the same file.
        let c = try runProcess("/usr/bin/curl", ["-s", "--alt-svc", file, "--cacert", nginx.caFile, localhostHTTPS + "/alt/who"],
                               environment: ["http_proxy": nil])
        XCTAssertEqual(c.stdout, "alt\n", c.stderr)
    }

}
