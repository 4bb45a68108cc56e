import XCTest
import PorterTestSupport
@testable import Porter
@testable import PorterHTTP
@testable import PorterCurl

/// http and https against a real nginx on loopback.
final class HTTPHandlerTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap()
        super.setUp()
    }


    private func config(_ change: (inout SessionConfiguration) -> Void = { _ in }) -> SessionConfiguration {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.caCertificateFile = nginx.caFile
        // Protocol tests see the network every time; the cache tests plug in an HTTPCache.
        c.responseCache = nil
        change(&c)
        return c
    }
    private func session(_ change: (inout SessionConfiguration) -> Void = { _ in }) -> Session {
        Session(configuration: config(change))
    }
    private func url(_ s: String) -> URL { URL(string: s)! }
    private func text(_ d: Data) -> String { String(decoding: d, as: UTF8.self) }

    func testGetWithHeadersMetricsAndUserAgent() async throws {
        let (data, response) = try await session().data(from: url(nginx.http + "/index.html"))
        XCTAssertEqual(text(data), "hello from nginx\n")
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.mimeType, "text/html")
        XCTAssertEqual(response.expectedContentLength, 17)
        XCTAssertNotNil(response.value(forHeader: "etag"))
        XCTAssertEqual(response.validator, response.value(forHeader: "ETag"))
        let (headers, _) = try await session().data(from: url(nginx.http + "/headers"))
        XCTAssertTrue(text(headers).contains("ua=Porter/\(porterVersion)"), text(headers))
        var r = Request(url: url(nginx.http + "/headers"))
        r.setValue("custom", forHeader: "User-Agent")
        r.setValue("42", forHeader: "X-Test")
        let (custom, _) = try await session().data(for: r)
        XCTAssertTrue(text(custom).contains("ua=custom x=42"), text(custom))
    }

    // MARK: - credentials against nginx's Basic realm "porter-test" (alice / secret)

    private var basicSpace: ProtectionSpace {
        ProtectionSpace(host: "127.0.0.1", port: nginx.httpPort, protocol: "http", realm: "porter-test",
                        authenticationMethod: .httpBasic)
    }

    func testStoredCredentialsAnswerChallengesAndFailedOnesAreDropped() async throws {
        let store = CredentialStore()
        store.set(Credential(user: "alice", password: "secret"), for: basicSpace)
        let (data, response) = try await session { $0.credentialStore = store }.data(from: url(nginx.http + "/basic/"))
        XCTAssertEqual(response.statusCode, 200, "the stored default answered with no delegate")
        XCTAssertFalse(data.isEmpty)

        let wrong = CredentialStore()
        wrong.set(Credential(user: "alice", password: "nope"), for: basicSpace)
        let (_, refused) = try await session { $0.credentialStore = wrong }.data(from: url(nginx.http + "/basic/"))
        XCTAssertEqual(refused.statusCode, 401, "tried once, then the 401 is delivered (no loop)")
        XCTAssertNil(wrong.defaultCredential(for: basicSpace), "a refused stored credential is dropped")
    }

    func testPermanentCredentialsFromTheDelegateServeLaterSessions() async throws {
        let path = NSTemporaryDirectory() + "porter-creds-\(UUID().uuidString)/credentials.json"
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        final class Once: TaskDelegate, @unchecked Sendable {
            func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                      completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
                completion(.useCredential(Credential(user: "alice", password: "secret", persistence: .permanent)))
            }
        }
        let first = try CredentialStore(path: path)
        let s1 = Session(configuration: config { $0.credentialStore = first }, delegate: Once())
        let (_, firstResponse) = try await s1.data(from: url(nginx.http + "/basic/"))
        XCTAssertEqual(firstResponse.statusCode, 200)
        // Another process would open the same file: a new store, no delegate.
        let second = try CredentialStore(path: path)
        XCTAssertEqual(second.defaultCredential(for: basicSpace)?.user, "alice")
        let (_, ok) = try await session { $0.credentialStore = second }.data(from: url(nginx.http + "/basic/"))
        XCTAssertEqual(ok.statusCode, 200)
    }

    /// The same with the store in a real Secret Service (gnome-keyring-daemon on a
    /// private bus): the credential is an item of the keyring, and a later store opened
    /// on it answers the challenge.
    func testPermanentCredentialsFromTheDelegateGoToTheKeyring() async throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        final class Once: TaskDelegate, @unchecked Sendable {
            func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                      completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
                completion(.useCredential(Credential(user: "alice", password: "secret", persistence: .permanent)))
            }
        }
        let first = try CredentialStore(secretServiceBus: keyring.busAddress)
        let s1 = Session(configuration: config { $0.credentialStore = first }, delegate: Once())
        let (_, firstResponse) = try await s1.data(from: url(nginx.http + "/basic/"))
        XCTAssertEqual(firstResponse.statusCode, 200)
        XCTAssertEqual(try keyring.lookup(["host": "127.0.0.1", "port": String(nginx.httpPort), "realm": "porter-test",
                                           "user": "alice"]), "secret")
        let second = try CredentialStore(secretServiceBus: keyring.busAddress)
        let (_, ok) = try await session { $0.credentialStore = second }.data(from: url(nginx.http + "/basic/"))
        XCTAssertEqual(ok.statusCode, 200, "no delegate: the keyring's credential answered")
    }

    func testCLINetrcAndNoPasswordInVerboseOutput() throws {
        let dir = NSTemporaryDirectory() + "porter-netrc-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let netrc = dir + "/netrc"
        try "machine 127.0.0.1 login alice password secret\n".write(toFile: netrc, atomically: true, encoding: .utf8)
        chmod(netrc, 0o600)
        func run(_ args: [String]) throws -> (Int32, String, String) {
            var env = withoutProxies
            env["HOME"] = dir
            let r = try runProcess(porterBinary, args, environment: env)
            return (r.status, r.stdout, r.stderr)
        }
        XCTAssertEqual(try run(["--netrc-file", netrc, nginx.http + "/basic/"]).0, 0)
        let asked = try run([nginx.http + "/basic/"])
        XCTAssertEqual(asked.0, 0, "no netrc unless asked: the 401 itself is the answer, as with curl")
        XCTAssertTrue(asked.1.contains("401 Authorization Required"), asked.1)
        XCTAssertEqual(try run(["-f", nginx.http + "/basic/"]).0, 22)
        try FileManager.default.copyItem(atPath: netrc, toPath: dir + "/.netrc")
        let verbose = try run(["-n", "-v", nginx.http + "/basic/"])
        XCTAssertEqual(verbose.0, 0, verbose.2)
        XCTAssertFalse(verbose.2.contains("secret"), "a password reached the -v output:\n\(verbose.2)")
        let withU = try run(["-v", "-u", "alice:secret", nginx.http + "/basic/"])
        XCTAssertFalse(withU.2.contains("secret"), withU.2)
        chmod(dir + "/.netrc", 0o644)
        let refused = try run(["-n", nginx.http + "/basic/"])
        XCTAssertEqual(refused.0, 26, "a netrc others can read is refused (26: an input it will not read)")
        XCTAssertTrue(refused.2.contains("chmod 600"), refused.2)
    }

    /// -u is for the first URL's origin only (curl's rule): a redirect to another host
    /// that asks for a password gets none, and neither does plain http after https; a
    /// netrc login never goes over plain http when the first URL was https. The other
    /// origin's 401 is delivered as the response.
    func testCredentialsNeverReachAnotherOrigin() throws {
        let dir = NSTemporaryDirectory() + "porter-origin-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func run(_ args: [String]) throws -> (Int32, String, String) {
            var env = withoutProxies
            env["HOME"] = dir
            let r = try runProcess(porterBinary, args, environment: env)
            return (r.status, r.stdout, r.stderr)
        }
        // The same origin still gets it.
        let same = try run(["-u", "alice:secret", nginx.http + "/auth-echo"])
        XCTAssertEqual(same.0, 0, same.2)
        XCTAssertTrue(same.1.hasPrefix("auth=Basic "), same.1)
        // Another host (localhost, same port) asks after a redirect: no password for it.
        let cross = try run(["-L", "-u", "alice:secret", nginx.http + "/cross-auth"])
        XCTAssertEqual(cross.0, 0, cross.2)
        XCTAssertEqual(cross.1, "who are you\n", "the password went to another host: \(cross.1)")
        XCTAssertEqual(try run(["-L", "-f", "-u", "alice:secret", nginx.http + "/cross-auth"]).0, 22)
        // https to plain http (another port as well): never in clear.
        let plain = try run(["-L", "--cacert", nginx.caFile, "-u", "alice:secret", nginx.https + "/plain-auth"])
        XCTAssertEqual(plain.0, 0, plain.2)
        XCTAssertEqual(plain.1, "who are you\n", "the password went out over plain http: \(plain.1)")
        let netrc = dir + "/netrc"
        try "machine 127.0.0.1 login alice password secret\n".write(toFile: netrc, atomically: true, encoding: .utf8)
        chmod(netrc, 0o600)
        let viaNetrc = try run(["-L", "--cacert", nginx.caFile, "--netrc-file", netrc, nginx.https + "/plain-auth"])
        XCTAssertEqual(viaNetrc.1, "who are you\n", "a netrc password went out over plain http: \(viaNetrc.1)")
        XCTAssertTrue(try run(["--netrc-file", netrc, nginx.http + "/auth-echo"]).1.hasPrefix("auth=Basic "))
    }

    // MARK: - the HTTP cache against nginx (its access log counts what reached it)

    final class FetchTypes: TaskDelegate, @unchecked Sendable {
        let lock = NSLock()
        var types: [String] = []
        func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
            lock.withLock { types.append(metrics.transactionMetrics.last?.fetchType ?? "-") }
        }
        var last: String? { lock.withLock { types.last } }
    }

    private func cacheLog(_ path: String) -> [String] {
        // nginx writes a log line after its response went out: read once the log has not
        // grown for 50 ms (at most half a second), so a busy machine does not race it.
        let file = nginx.dir + "/logs/cache.log"
        var size = -1
        for _ in 0..<10 {
            let now = ((try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? NSNumber)?.intValue ?? 0
            if now == size { break }
            size = now
            usleep(50_000)
        }
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init).filter { $0.contains(" \(path) ") }
    }

    /// Lines in one of nginx's logs (responses that went out): a process is killed once it
    /// has got this far, not after a fixed time.
    private func logLineCount(_ name: String) -> Int {
        ((try? String(contentsOfFile: nginx.dir + "/logs/" + name, encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    func testFreshResponsesComeFromTheCache() async throws {
        let metrics = FetchTypes()
        let s = Session(configuration: config { $0.responseCache = HTTPCache() }, delegate: metrics)
        let (first, r1) = try await s.data(from: url(nginx.http + "/cache/fresh.txt"))
        XCTAssertEqual(metrics.last, "networkLoad")
        let (second, r2) = try await s.data(from: url(nginx.http + "/cache/fresh.txt"))
        XCTAssertEqual(metrics.last, "localCache")
        XCTAssertEqual(first, second)
        XCTAssertEqual(r2.statusCode, 200)
        XCTAssertEqual(r2.value(forHeader: "ETag"), r1.value(forHeader: "ETag"))
        XCTAssertNotNil(r2.value(forHeader: "Age"), "Age is computed and sent")
        XCTAssertEqual(cacheLog("/cache/fresh.txt").count, 1, "one request reached nginx: \(cacheLog("/cache/fresh.txt"))")
        // HEAD is answered from the stored GET.
        var head = Request(url: url(nginx.http + "/cache/fresh.txt"))
        head.method = "HEAD"
        let (none, headResponse) = try await s.data(for: head)
        XCTAssertTrue(none.isEmpty)
        XCTAssertEqual(headResponse.statusCode, 200)
        XCTAssertEqual(cacheLog("/cache/fresh.txt").count, 1)
        // reloadIgnoringLocalCacheData goes to the network.
        var reload = Request(url: url(nginx.http + "/cache/fresh.txt"))
        reload.cachePolicy = .reloadIgnoringLocalCacheData
        _ = try await s.data(for: reload)
        XCTAssertEqual(cacheLog("/cache/fresh.txt").count, 2)
    }

    /// The data delegate's willCacheResponse decides what is stored.
    func testWillCacheResponseCanRefuse() async throws {
        final class Refuse: DataDelegate, @unchecked Sendable {
            let done = DispatchSemaphore(value: 0)
            func dataTask(_ task: DataTask, willCacheResponse proposed: CachedResponse,
                          completion: @escaping @Sendable (CachedResponse?) -> Void) { completion(nil) }
            func task(_ task: SessionTask, didCompleteWithError error: PorterError?) { done.signal() }
        }
        let cache = HTTPCache()
        let refuse = Refuse()
        let s = Session(configuration: config { $0.responseCache = cache }, delegate: refuse)
        for _ in 0..<2 {
            s.dataTask(with: url(nginx.http + "/cache/fresh.txt?refused")).resume()
            XCTAssertEqual(refuse.done.wait(timeout: .now() + 120), .success)
        }
        XCTAssertEqual(cache.count, 0)
        XCTAssertEqual(cacheLog("/cache/fresh.txt?refused").count, 2, "nothing stored, so both went to nginx")
    }

    func testNoCacheAndStaleResponsesAreRevalidatedWith304() async throws {
        let metrics = FetchTypes()
        let s = Session(configuration: config { $0.responseCache = HTTPCache() }, delegate: metrics)
        _ = try await s.data(from: url(nginx.http + "/cache/nocache.txt"))
        let (again, response) = try await s.data(from: url(nginx.http + "/cache/nocache.txt"))
        XCTAssertEqual(text(again), "cached nocache\n")
        XCTAssertEqual(response.statusCode, 200, "the stored 200 is served after the 304")
        XCTAssertEqual(metrics.last, "revalidated")
        XCTAssertEqual(cacheLog("/cache/nocache.txt").map { $0.split(separator: " ").last ?? "" }, ["200", "304"])

        _ = try await s.data(from: url(nginx.http + "/cache/stale.txt"))
        _ = try await s.data(from: url(nginx.http + "/cache/stale.txt"))
        XCTAssertEqual(metrics.last, "localCache", "fresh for one second")
        try await Task.sleep(nanoseconds: 2_100_000_000)
        _ = try await s.data(from: url(nginx.http + "/cache/stale.txt"))
        XCTAssertEqual(metrics.last, "revalidated")
        XCTAssertEqual(cacheLog("/cache/stale.txt").map { $0.split(separator: " ").last ?? "" }, ["200", "304"])
        // reloadRevalidatingCacheData always asks.
        var r = Request(url: url(nginx.http + "/cache/fresh.txt"))
        _ = try await s.data(for: r)
        r.cachePolicy = .reloadRevalidatingCacheData
        _ = try await s.data(for: r)
        XCTAssertEqual(metrics.last, "revalidated")
        XCTAssertEqual(cacheLog("/cache/fresh.txt").suffix(1).first?.hasSuffix("304"), true)
    }

    func testNoStoreVaryPoliciesAndInvalidation() async throws {
        let cache = HTTPCache()
        let s = session { $0.responseCache = cache }
        _ = try await s.data(from: url(nginx.http + "/cache/nostore.txt"))
        _ = try await s.data(from: url(nginx.http + "/cache/nostore.txt"))
        XCTAssertEqual(cacheLog("/cache/nostore.txt").count, 2, "no-store is never served from the cache")

        func lang(_ l: String) -> Request {
            var r = Request(url: url(nginx.http + "/cache/vary.txt"))
            _ = r.setValue(l, forHeader: "X-Lang")
            return r
        }
        _ = try await s.data(for: lang("en"))
        _ = try await s.data(for: lang("fr"))
        _ = try await s.data(for: lang("en"))
        XCTAssertEqual(cacheLog("/cache/vary.txt").count, 2, "Vary: each X-Lang value is its own entry")

        var dontLoad = Request(url: url(nginx.http + "/cache/never-seen"))
        dontLoad.cachePolicy = .returnCacheDataDontLoad
        do {
            _ = try await s.data(for: dontLoad)
            XCTFail("returnCacheDataDontLoad with nothing cached must fail")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .resourceUnavailable)
        }

        _ = try await s.data(from: url(nginx.http + "/cache/item"))
        _ = try await s.data(from: url(nginx.http + "/cache/item"))
        XCTAssertEqual(cacheLog("/cache/item").count, 1)
        _ = try await s.upload(for: Request(url: url(nginx.http + "/cache/item"), method: "POST"), from: Data("x".utf8))
        let (fresh, _) = try await s.data(from: url(nginx.http + "/cache/item"))
        XCTAssertEqual(text(fresh), "item GET\n")
        XCTAssertEqual(cacheLog("/cache/item").map { String($0.prefix(4)) }, ["GET ", "POST", "GET "],
                       "the POST invalidated the stored GET")
        // A POST elsewhere invalidates its same-origin Location (not a Content-Location of another origin).
        _ = try await s.data(from: url(nginx.http + "/cache/fresh.txt?loc"))
        _ = try await s.data(from: url(nginx.http + "/cache/fresh.txt?other"))
        _ = try await s.upload(for: Request(url: url(nginx.http + "/cache/create"), method: "POST"), from: Data("x".utf8))
        _ = try await s.data(from: url(nginx.http + "/cache/fresh.txt?loc"))
        _ = try await s.data(from: url(nginx.http + "/cache/fresh.txt?other"))
        XCTAssertEqual(cacheLog("/cache/fresh.txt?loc").count, 2, "the Location was invalidated")
        XCTAssertEqual(cacheLog("/cache/fresh.txt?other").count, 1, "127.0.0.1's entry stays: the Content-Location named localhost")
    }

    /// A response fetched with -k, --resolve or another CA is never served from the cache
    /// to a run that verifies differently: each trust setting is its own cache partition.
    func testCachedResponsesDoNotCrossTrustSettings() throws {
        let home = NSTemporaryDirectory() + "porter-trustcache-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: home) }
        var env = withoutProxies
        env["XDG_CACHE_HOME"] = home
        func run(_ args: [String]) throws -> String {
            let r = try runProcess(porterBinary, ["-v", "--cache"] + args, environment: env)
            XCTAssertEqual(r.status, 0, r.stderr)
            return r.stderr
        }
        let url = nginx.https + "/cache/fresh.txt?trust"
        XCTAssertTrue(try run(["-k", url]).contains("* loaded from the network"))
        XCTAssertTrue(try run(["-k", url]).contains("* served from the cache"), "the same settings share their entries")
        XCTAssertTrue(try run(["--cacert", nginx.caFile, url]).contains("* loaded from the network"),
                      "a response fetched with -k answered a verifying run")
        XCTAssertTrue(try run(["--cacert", nginx.caFile, url]).contains("* served from the cache"))
        let pinned = nginx.https.replacingOccurrences(of: "127.0.0.1", with: "pinned.test") + "/cache/fresh.txt?trust"
        let resolve = "pinned.test:\(nginx.httpsPort):127.0.0.1"
        XCTAssertTrue(try run(["-k", "--resolve", resolve, pinned]).contains("* loaded from the network"))
        XCTAssertTrue(try run(["-k", "--resolve", resolve, pinned]).contains("* served from the cache"))
    }

    /// `porter --cache`: a network load, then a cache hit (-v says which); a stale entry is
    /// revalidated; `porter cache stats` / `clear`; and a process killed with SIGKILL while
    /// filling the cache leaves one that opens, checks its bodies and serves them.
    func testCLICacheAndKill9() throws {
        let home = NSTemporaryDirectory() + "porter-cachehome-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: home) }
        var env = withoutProxies
        env["XDG_CACHE_HOME"] = home
        func run(_ args: [String]) throws -> (Int32, String, String) {
            let r = try runProcess(porterBinary, args, environment: env)
            return (r.status, r.stdout, r.stderr)
        }
        let fresh = nginx.http + "/cache/fresh.txt?cli"
        let first = try run(["-v", "--cache", fresh])
        XCTAssertTrue(first.2.contains("* loaded from the network"), first.2)
        let second = try run(["-v", "--cache", fresh])
        XCTAssertEqual(second.1, "cached fresh\n")
        XCTAssertTrue(second.2.contains("* served from the cache"), second.2)
        let stale = nginx.http + "/cache/stale.txt?cli"
        _ = try run(["--cache", stale])
        Thread.sleep(forTimeInterval: 2.1)
        let third = try run(["-v", "--cache", stale])
        XCTAssertTrue(third.2.contains("* revalidated"), third.2)
        XCTAssertTrue(try run(["--cache", "-v", nginx.http + "/cache/fresh.txt?nocache"]).2.contains("network"))
        XCTAssertTrue(try run(["-v", fresh]).2.contains("* loaded from the network"), "without --cache, no cache")
        let stats = try run(["cache", "stats"]).1
        XCTAssertTrue(stats.contains("3 entries"), stats)
        XCTAssertTrue(try run(["cache", "clear"]).1.contains("0 entries"))

        // SIGKILL while filling the cache.
        let list = home + "/urls.txt"
        try (0..<5000).map { nginx.http + "/cache/fresh.txt?k=\($0)" }.joined(separator: "\n").write(toFile: list, atomically: true, encoding: .utf8)
        let logged = logLineCount("cache.log")
        let p = try startProcess(porterBinary, ["-s", "--cache", "--url-list", list, "--concurrency", "8"], environment: env)
        XCTAssertTrue(eventually { self.logLineCount("cache.log") >= logged + 100 }, "the filling did not start")
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        let cache = try HTTPCache(diskCapacity: 256 << 20, directory: home + "/porter/http")
        let entries = cache.statistics.diskEntries
        XCTAssertGreaterThan(entries, 0, "nothing was cached before the kill")
        XCTAssertLessThan(entries, 5000, "the process finished before the kill")
        var served = 0
        for i in 0..<5000 {
            if let hit = cache.cachedResponse(for: Request(url: url(nginx.http + "/cache/fresh.txt?k=\(i)"))) {
                XCTAssertEqual(hit.data, Data("cached fresh\n".utf8), "a cached body is whole")
                served += 1
            }
        }
        XCTAssertEqual(served, cache.statistics.diskEntries, "every entry left is served whole")
    }

    // MARK: - cookies against nginx

    func testCookiesSetOnARedirectAreSentOnTheNextHop() async throws {
        let s = session()
        let (data, _) = try await s.data(from: url(nginx.http + "/cookie/set"))
        XCTAssertTrue(text(data).contains("cookie=hop=1 "), text(data))
        // Two Set-Cookie headers; the second only under /cookie.
        _ = try await s.data(from: url(nginx.http + "/cookie/two"))
        let (later, _) = try await s.data(from: url(nginx.http + "/headers"))
        XCTAssertTrue(text(later).contains("cookie=hop=1; first=1 "), text(later))
        XCTAssertEqual(s.configuration.cookieStore?.cookies(for: url(nginx.http + "/cookie/x")).map(\.name),
                       ["second", "hop", "first"], "longer paths first")
        // Another ephemeral session has a store of its own.
        let (other, _) = try await session().data(from: url(nginx.http + "/headers"))
        XCTAssertTrue(text(other).contains("cookie= "), text(other))
    }

    /// Names under .test pinned to 127.0.0.1 (hostOverrides, curl's --resolve): a domain
    /// cookie reaches sibling hosts, a host-only one does not, another site gets none.
    func testDomainCookiesWithPinnedHostNames() async throws {
        let port = Int(URL(string: nginx.http)!.port!)
        let s = session {
            $0.hostOverrides = ["www.porter.test", "api.porter.test", "elsewhere.test"].map {
                HostOverride(host: $0, port: port, addresses: ["127.0.0.1"])
            }
        }
        _ = try await s.data(from: url("http://www.porter.test:\(port)/cookie/domain"))
        let (api, _) = try await s.data(from: url("http://api.porter.test:\(port)/headers"))
        XCTAssertTrue(text(api).contains("cookie=dom=1 "), text(api))
        let (www, _) = try await s.data(from: url("http://www.porter.test:\(port)/headers"))
        XCTAssertTrue(text(www).contains("cookie=dom=1; host=1 ") || text(www).contains("cookie=host=1; dom=1 "), text(www))
        let (other, _) = try await s.data(from: url("http://elsewhere.test:\(port)/headers"))
        XCTAssertTrue(text(other).contains("cookie= "), text(other))
        // Without the pin the name does not resolve.
        do {
            _ = try await session().data(from: url("http://www.porter.test:\(port)/headers"))
            XCTFail("a .test name resolved without a pin")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotFindHost)
        }
        XCTAssertEqual(HostOverride(parsing: "a.test:443:127.0.0.1,[::1]")?.addresses, ["127.0.0.1", "::1"])
        // A combining mark after ":" fused with it and the printed form no longer parsed
        // (a fuzz finding): only printable ASCII is taken.
        XCTAssertNil(HostOverride(parsing: "host:6160:[\u{036A}5],127.0.0.1"))
        XCTAssertNil(HostOverride(parsing: "h\u{00E9}st:80:127.0.0.1"))
        XCTAssertNil(HostOverride(parsing: "host:80:127.0.0.1 "))
        XCTAssertNil(HostOverride(parsing: "a.test:0:127.0.0.1"))
        XCTAssertNil(HostOverride(parsing: "a.test:80"))
    }

    func testCookiesDoNotFollowARedirectToAnotherHost() async throws {
        let (data, response) = try await session().data(from: url(nginx.http + "/cookie/cross"))
        XCTAssertEqual(response.url.host, "localhost")
        XCTAssertTrue(text(data).contains("cookie= "), "127.0.0.1's cookie went to localhost: \(text(data))")
    }

    func testSecureCookiesStayOnHTTPS() async throws {
        let s = session()
        _ = try await s.data(from: url(nginx.https + "/cookie/secure"))
        let (tls, _) = try await s.data(from: url(nginx.https + "/headers"))
        XCTAssertTrue(text(tls).contains("cookie=sec=1 "), text(tls))
        let (plain, _) = try await s.data(from: url(nginx.http + "/headers"))
        XCTAssertTrue(text(plain).contains("cookie= "), "a Secure cookie went over http: \(text(plain))")
    }

    func testCookiesOffAndExplicitCookieHeaders() async throws {
        let off = session { $0.httpShouldSetCookies = false }
        _ = try await off.data(from: url(nginx.http + "/cookie/set"))
        XCTAssertTrue(off.configuration.cookieStore?.allCookies.isEmpty == true, "stored with cookies off")
        let s = session()
        _ = try await s.data(from: url(nginx.http + "/cookie/two"))
        var r = Request(url: url(nginx.http + "/headers"))
        r.setValue("mine=1", forHeader: "Cookie")
        let (data, _) = try await s.data(for: r)
        XCTAssertTrue(text(data).contains("cookie=mine=1 "), "an application's own Cookie header is kept: \(text(data))")
    }

    func testCLICookieJarIsReadableByCurl() throws {
        let dir = try XCTUnwrap(FileManager.default.temporaryDirectory.appendingPathComponent("porter-jar-\(UUID().uuidString)").path)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let jar = dir + "/jar.txt"
        func run(_ tool: String, _ args: [String]) throws -> (Int32, String) {
            let r = try runProcess(tool, args, environment: withoutProxies)
            return (r.status, r.stdout)
        }
        let (status, _) = try run(porterBinary, ["-s", "-c", jar, nginx.http + "/cookie/two"])
        XCTAssertEqual(status, 0)
        let attributes = try FileManager.default.attributesOfItem(atPath: jar)
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        // curl reads the jar back.
        let (_, echoed) = try run("/usr/bin/curl", ["-s", "-b", jar, nginx.http + "/headers"])
        XCTAssertTrue(echoed.contains("cookie=first=1 "), echoed)
        // And porter reads it (and literal cookies).
        XCTAssertTrue(try run(porterBinary, ["-b", jar, nginx.http + "/headers"]).1.contains("cookie=first=1 "))
        XCTAssertTrue(try run(porterBinary, ["-b", "x=y; z=w", nginx.http + "/headers"]).1.contains("cookie=x=y; z=w "))
        // A jar curl wrote: porter reads it.
        let curlJar = dir + "/curl-jar.txt"
        _ = try run("/usr/bin/curl", ["-s", "-c", curlJar, nginx.http + "/cookie/two"])
        XCTAssertTrue(try run(porterBinary, ["-b", curlJar, nginx.http + "/headers"]).1.contains("cookie=first=1 "))
        // A cookie file that is not there: no cookies, and on (as curl).
        XCTAssertEqual(try run(porterBinary, ["-b", dir + "/missing.txt", nginx.http + "/headers"]).0, 0)
        // --resolve pins a name, as with curl.
        let port = URL(string: nginx.http)!.port!
        XCTAssertEqual(try run(porterBinary, ["--resolve", "www.porter.test:\(port):127.0.0.1",
                                              "http://www.porter.test:\(port)/index.html"]).1, "hello from nginx\n")
    }

    /// `--cookie-store`: processes at once share the SQLite store; a process killed with
    /// SIGKILL in the middle of writing leaves a store that opens and checks sound.
    func testCLIPersistentCookieStoreAcrossProcessesAndKill9() throws {
        let data = NSTemporaryDirectory() + "porter-xdg-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: data) }
        var env = withoutProxies
        env["XDG_DATA_HOME"] = data
        func spawn(_ args: [String]) throws -> Process { try startProcess(porterBinary, args, environment: env) }
        let eight = try (1...8).map { try spawn(["-s", "--cookie-store", nginx.http + "/cookie/n?n=\($0)"]) }
        for p in eight { p.waitUntilExit(); XCTAssertEqual(p.terminationStatus, 0) }
        let path = PersistentCookieStore.defaultPath(environment: ["XDG_DATA_HOME": data])
        XCTAssertEqual(try PersistentCookieStore(path: path).allCookies.map(\.name).sorted(),
                       (1...8).map { "n\($0)" }.sorted())
        // The stored cookies go out with the next run.
        let echoed = try runProcess(porterBinary, ["--cookie-store", nginx.http + "/headers"], environment: env).stdout
        XCTAssertTrue(echoed.contains("n1=1") && echoed.contains("n8=1"), echoed)

        // kill -9 mid-write.
        let list = data + "/urls.txt"
        try (100..<20_100).map { nginx.http + "/cookie/n?n=\($0)" }.joined(separator: "\n").write(toFile: list, atomically: true, encoding: .utf8)
        let setBefore = logLineCount("cookie.log")
        let writer = try spawn(["-s", "--cookie-store", "--url-list", list, "--concurrency", "8"])
        XCTAssertTrue(eventually { self.logLineCount("cookie.log") >= setBefore + 100 }, "the writing did not start")
        kill(writer.processIdentifier, SIGKILL)
        writer.waitUntilExit()
        let reopened = try PersistentCookieStore(path: path)
        XCTAssertEqual(try reopened.integrityCheck(), "ok")
        let count = reopened.allCookies.count
        XCTAssertGreaterThan(count, 8, "the killed process wrote nothing")
        XCTAssertLessThan(count, 20_008, "the process was not killed mid-way")
    }

    /// nginx's connection serial number for `count` requests made at once.
    private func connections(_ s: Session, _ base: String, count: Int) async throws -> Set<String> {
        let target = URL(string: base + "/conn")!
        return try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<count {
                group.addTask { String(decoding: try await s.data(from: target).0, as: UTF8.self) }
            }
            var seen = Set<String>()
            for try await id in group { seen.insert(id.trimmingCharacters(in: .whitespacesAndNewlines)) }
            return seen
        }
    }

    func testMaxConnectionsPerHost() async throws {
        let one = try await connections(session { $0.httpMaximumConnectionsPerHost = 1 }, nginx.http, count: 6)
        XCTAssertEqual(one.count, 1, "six requests at once over one allowed connection: \(one)")
        let six = try await connections(session { $0.httpMaximumConnectionsPerHost = 3 }, nginx.http, count: 6)
        XCTAssertEqual(six.count, 3, "at most three connections: \(six)")
    }

    func testHTTP2MultiplexesConcurrentRequests() async throws {
        let ids = try await connections(session(), nginx.https, count: 8)
        XCTAssertEqual(ids.count, 1, "eight requests at once share one HTTP/2 connection: \(ids)")
        let h1 = try await connections(session { $0.http2Enabled = false; $0.httpMaximumConnectionsPerHost = 4 }, nginx.https, count: 4)
        XCTAssertEqual(h1.count, 4, "over HTTP/1.1 each request at once needs its own connection: \(h1)")
    }

    func testHTTPSVerifiesWithTheCAAndSpeaksHTTP2() async throws {
        final class Metrics: TaskDelegate, @unchecked Sendable {
            let lock = NSLock()
            var collected: TaskMetrics?
            func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) { lock.withLock { collected = metrics } }
        }
        let m = Metrics()
        let s = Session(configuration: config(), delegate: m)
        let (data, response) = try await s.data(from: url(nginx.https + "/index.html"))
        XCTAssertEqual(text(data), "hello from nginx\n")
        XCTAssertEqual(response.statusCode, 200)
        let t = try XCTUnwrap(m.lock.withLock { m.collected?.transactionMetrics.last })
        XCTAssertEqual(t.networkProtocolName, "h2")
        // A reused connection has no handshake of its own (as with URLSession's metrics).
        XCTAssertTrue(t.isReusedConnection || t.secureConnectionStartDate != nil)
        XCTAssertTrue(t.isReusedConnection || t.connectEndDate != nil)
        XCTAssertNotNil(t.responseStartDate)
        XCTAssertNotNil(t.responseEndDate)

        let h1 = Session(configuration: config { $0.http2Enabled = false }, delegate: m)
        _ = try await h1.data(from: url(nginx.https + "/index.html"))
        XCTAssertEqual(m.lock.withLock { m.collected?.transactionMetrics.last?.networkProtocolName }, "http/1.1")

        // Without the test CA the server is not trusted.
        do {
            _ = try await session { $0.caCertificateFile = nil }.data(from: url(nginx.https + "/index.html"))
            XCTFail("an unknown CA must fail")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .serverCertificateUntrusted)
            XCTAssertEqual(e.cause?.domain, "curl")
            XCTAssertEqual(e.cause.map { $0.code }, 60)
        }
        // Explicitly disabled verification accepts it.
        let (insecure, _) = try await session { $0.caCertificateFile = nil; $0.tlsVerificationDisabled = true }
            .data(from: url(nginx.https + "/index.html"))
        XCTAssertEqual(text(insecure), "hello from nginx\n")
    }

    /// What Foundation's URLSession on Linux cannot do: let the application see the
    /// untrusted server's certificate chain and decide.
    func testServerTrustChallengeCarriesTheChainAndCanAccept() async throws {
        final class Trust: SessionDelegate, @unchecked Sendable {
            let lock = NSLock()
            var seen: [AuthenticationChallenge] = []
            let accept: Bool
            init(accept: Bool) { self.accept = accept }
            func session(_ session: Session, didReceive challenge: AuthenticationChallenge,
                         completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
                lock.withLock { seen.append(challenge) }
                guard accept, let trust = challenge.protectionSpace.serverTrust else { return completion(.performDefaultHandling) }
                completion(.useCredential(Credential(trust: trust)))
            }
        }
        var config = SessionConfiguration.ephemeral
        config.proxies = .none
        config.responseCache = nil   // the second session must meet the server, not a cached copy
        let accepting = Trust(accept: true)
        let (data, response) = try await Session(configuration: config, delegate: accepting)
            .data(from: url(nginx.https + "/index.html"))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(text(data), "hello from nginx\n")
        let challenge = try XCTUnwrap(accepting.lock.withLock { accepting.seen.first })
        XCTAssertEqual(challenge.protectionSpace.authenticationMethod, .serverTrust)
        XCTAssertEqual(challenge.protectionSpace.port, nginx.httpsPort)
        let trust = try XCTUnwrap(challenge.protectionSpace.serverTrust)
        let leaf = try XCTUnwrap(trust.certificateChain.first)
        let expected = try Data(contentsOf: URL(fileURLWithPath: nginx.dir + "/leaf.pem"))
        XCTAssertEqual(leaf, CurlTransfer.der(fromPEM: String(decoding: expected, as: UTF8.self)), "the leaf, DER encoded")
        XCTAssertTrue(trust.evaluationFailure?.contains("issuer") == true, trust.evaluationFailure ?? "")

        let refusing = Trust(accept: false)
        do {
            _ = try await Session(configuration: config, delegate: refusing).data(from: url(nginx.https + "/index.html"))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .serverCertificateUntrusted) }
        XCTAssertEqual(refusing.lock.withLock { refusing.seen.count }, 1)
    }

    func testClientCertificate() async throws {
        let (anonymous, _) = try await session().data(from: url(nginx.https + "/whoami"))
        XCTAssertEqual(text(anonymous), "NONE \n")
        let (known, _) = try await session { $0.clientCertificate = (self.nginx.dir + "/client.pem", self.nginx.dir + "/client.key") }
            .data(from: url(nginx.https + "/whoami"))
        XCTAssertEqual(text(known), "SUCCESS CN=porter-client\n")
    }

    func testPinnedPublicKey() async throws {
        let pin = try XCTUnwrap(HTTPHandler.publicKeyPin(ofDER: try XCTUnwrap(CurlTransfer.der(fromPEM:
            try String(contentsOfFile: nginx.dir + "/leaf.pem", encoding: .utf8)))))
        // The same pin as openssl computes it.
        let viaOpenSSL = try NginxFixture.run("/bin/sh", ["-c",
            "openssl x509 -pubkey -noout -in leaf.pem | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64"],
            in: nginx.dir).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(pin, "sha256//" + viaOpenSSL)
        let (data, _) = try await session { $0.pinnedPublicKey = pin }.data(from: url(nginx.https + "/index.html"))
        XCTAssertEqual(text(data), "hello from nginx\n")
        do {
            _ = try await session { $0.pinnedPublicKey = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" }
                .data(from: url(nginx.https + "/index.html"))
            XCTFail("a wrong pin must fail even with a trusted CA")
        } catch let e as PorterError { XCTAssertEqual(e.code, .secureConnectionFailed) }
    }

    func testRedirectStatusesRewriteOrKeepTheMethod() async throws {
        for (status, expected) in [(301, "GET "), (302, "GET "), (303, "GET "), (307, "POST payload"), (308, "POST payload")] {
            var r = Request(url: url(nginx.http + "/redirect/\(status)"), method: "POST")
            r.body = .data(Data("payload".utf8))
            let (data, response) = try await session().data(for: r)
            XCTAssertEqual(text(data), expected, "status \(status)")
            XCTAssertEqual(response.url.path, "/echo")
        }
    }

    func testRedirectChainsLoopsRefusedSchemesAndHeaderStripping() async throws {
        final class Counting: TaskDelegate, @unchecked Sendable {
            let count = NSLock()
            var hops: [String] = []
            func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
                      completion: @escaping @Sendable (Request?) -> Void) {
                count.withLock { hops.append("\(response.statusCode ?? 0) \(newRequest.url.path)") }
                completion(newRequest)
            }
        }
        let d = Counting()
        let s = Session(configuration: config(), delegate: d)
        let (data, response) = try await s.data(from: url(nginx.http + "/chain/3"))
        XCTAssertEqual(text(data), "hello from nginx\n")
        XCTAssertEqual(response.url.absoluteString, nginx.http + "/index.html")
        XCTAssertEqual(d.count.withLock { d.hops }, ["302 /chain/2", "302 /chain/1", "302 /index.html"])

        let (relative, _) = try await session().data(from: url(nginx.http + "/relative"))
        XCTAssertEqual(text(relative), "hello from nginx\n")

        do {
            _ = try await session { $0.maximumRedirects = 5 }.data(from: url(nginx.http + "/loop"))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .tooManyRedirects) }

        do {
            _ = try await session().data(from: url(nginx.http + "/to-file"))
            XCTFail("http must not redirect to file: by default")
        } catch let e as PorterError { XCTAssertEqual(e.code, .redirectNotAllowed) }

        var r = Request(url: url(nginx.http + "/cross"))
        r.setValue("Basic c2VjcmV0", forHeader: "Authorization")
        r.setValue("sid=1", forHeader: "Cookie")
        r.setValue("kept", forHeader: "X-Test")
        let (cross, _) = try await session().data(for: r)
        XCTAssertEqual(text(cross), "auth= cookie= ua=Porter/\(porterVersion) x=kept\n", "credentials and cookies stay behind")
    }

    func testBasicAuthenticationThroughChallenges() async throws {
        final class Answering: TaskDelegate, @unchecked Sendable {
            let lock = NSLock()
            var seen: [(Int, String?, AuthenticationMethod)] = []
            let password: @Sendable (Int) -> String?
            init(password: @escaping @Sendable (Int) -> String?) { self.password = password }
            func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                      completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
                lock.withLock { seen.append((challenge.previousFailureCount, challenge.protectionSpace.realm,
                                             challenge.protectionSpace.authenticationMethod)) }
                if let p = password(challenge.previousFailureCount) {
                    completion(.useCredential(Credential(user: "alice", password: p)))
                } else {
                    completion(.performDefaultHandling)
                }
            }
        }
        let wrongThenRight = Answering { $0 == 0 ? "wrong" : "secret" }
        let (data, response) = try await Session(configuration: config(), delegate: wrongThenRight)
            .data(from: url(nginx.http + "/basic/"))
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(text(data), "members only\n")
        let seen = wrongThenRight.lock.withLock { wrongThenRight.seen }
        XCTAssertEqual(seen.map(\.0), [0, 1])
        XCTAssertEqual(seen.first?.1, "porter-test")
        XCTAssertEqual(seen.first?.2, .httpBasic)

        let none = Answering { _ in nil }
        let (denied, deniedResponse) = try await Session(configuration: config(), delegate: none)
            .data(from: url(nginx.http + "/basic/"))
        XCTAssertEqual(deniedResponse.statusCode, 401, "default handling delivers the 401")
        XCTAssertTrue(text(denied).contains("401"))

        // Credentials in the URL.
        let (fromURL, ok) = try await session().data(from: url("http://alice:secret@127.0.0.1:\(nginx.httpPort)/basic/"))
        XCTAssertEqual(ok.statusCode, 200)
        XCTAssertEqual(text(fromURL), "members only\n")
    }

    func testGzipIsDecodedTransparently() async throws {
        let (data, response) = try await session().data(from: url(nginx.http + "/text.txt"))
        XCTAssertEqual(response.value(forHeader: "Content-Encoding"), "gzip")
        XCTAssertEqual(response.textEncodingName, "utf-8")
        XCTAssertEqual(data.count, 24 * 4000)
        XCTAssertTrue(text(data).hasPrefix("Porter compresses well. Porter"))
        XCTAssertEqual(response.expectedContentLength, -1, "chunked gzip: no length known up front")
    }

    func testUploadsFromDataFileAndStreamWithProgress() async throws {
        final class Progress: DataDelegate, @unchecked Sendable {
            let lock = NSLock()
            var sent: Int64 = 0
            var body = Data()
            let done = DispatchSemaphore(value: 0)
            var stream: @Sendable () -> (any BodyStream)? = { nil }
            func task(_ task: SessionTask, didSendBodyData b: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
                lock.withLock { sent = totalBytesSent }
            }
            func task(_ task: SessionTask, needNewBodyStream completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
                completion(stream())
            }
            func dataTask(_ task: DataTask, didReceive data: Data) { lock.withLock { body.append(data) } }
            func task(_ task: SessionTask, didCompleteWithError error: PorterError?) { done.signal() }
        }
        let payload = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 % 26 + 97) })
        let p = Progress()
        let s = Session(configuration: config(), delegate: p)
        s.uploadTask(with: Request(url: url(nginx.http + "/echo"), method: "POST"), from: payload).resume()
        XCTAssertEqual(p.done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(p.lock.withLock { p.body }, Data("POST ".utf8) + payload)
        XCTAssertEqual(p.lock.withLock { p.sent }, Int64(payload.count))

        let file = nginx.dir + "/upload-source.bin"
        try payload.write(to: URL(fileURLWithPath: file))
        let (echoed, _) = try await session().upload(for: Request(url: url(nginx.http + "/echo")), fromFile: URL(fileURLWithPath: file))
        XCTAssertEqual(echoed, Data("PUT ".utf8) + payload)

        let streamed = Progress()
        streamed.stream = { DataBodyStream(Data("streamed, chunked".utf8)) }
        let s2 = Session(configuration: config(), delegate: streamed)
        s2.uploadTask(withStreamedRequest: Request(url: url(nginx.http + "/echo"), method: "POST")).resume()
        XCTAssertEqual(streamed.done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(text(streamed.lock.withLock { streamed.body }), "POST streamed, chunked")
    }

    /// A stream body that blocks holds up its own upload only: a GET on the same loop
    /// (same session, same trust settings) completes while the stream is still blocked
    /// (it stays blocked until the GET is done: no clock decides the outcome).
    func testSlowStreamBodyDoesNotBlockOtherTransfers() async throws {
        final class SlowStream: BodyStream, @unchecked Sendable {
            let lock = NSLock()
            var reads = 0
            let firstRead = DispatchSemaphore(value: 0)
            let blocked = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
                let n = lock.withLock { () -> Int in reads += 1; return reads }
                switch n {
                case 1:
                    firstRead.signal()
                    return Data("first ".utf8).withUnsafeBytes { src in buffer.copyMemory(from: src); return src.count }
                case 2:
                    // The application is slow to produce more: until the test lets it.
                    blocked.signal()
                    _ = release.wait(timeout: .now() + 60)
                    return Data("second".utf8).withUnsafeBytes { src in buffer.copyMemory(from: src); return src.count }
                default:
                    return 0
                }
            }
        }
        final class Upload: DataDelegate, @unchecked Sendable {
            let stream = SlowStream()
            let lock = NSLock()
            var body = Data()
            let done = DispatchSemaphore(value: 0)
            func task(_ task: SessionTask, needNewBodyStream completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
                completion(stream)
            }
            func dataTask(_ task: DataTask, didReceive data: Data) { lock.withLock { body.append(data) } }
            func task(_ task: SessionTask, didCompleteWithError error: PorterError?) { done.signal() }
        }
        let upload = Upload()
        let s = Session(configuration: config(), delegate: upload)
        s.uploadTask(withStreamedRequest: Request(url: url(nginx.http + "/echo"), method: "POST")).resume()
        XCTAssertEqual(upload.stream.firstRead.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(upload.stream.blocked.wait(timeout: .now() + 120), .success, "the stream is in its slow read")
        let got = Locked<String?>(nil)
        let fetched = DispatchSemaphore(value: 0)
        s.dataTask(with: Request(url: url(nginx.http + "/index.html"))) { data, _, _ in
            got.withLock { $0 = data.map { String(decoding: $0, as: UTF8.self) } }
            fetched.signal()
        }.resume()
        XCTAssertEqual(fetched.wait(timeout: .now() + 120), .success, "the GET waited for the blocked stream")
        XCTAssertEqual(got.current, "hello from nginx\n")
        upload.stream.release.signal()
        XCTAssertEqual(upload.done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(text(upload.lock.withLock { upload.body }), "POST first second")
    }

    func testConnectionErrorsAndIdleTimeout() async throws {
        let closed = try NginxFixture.freePort()
        do {
            _ = try await session().data(from: url("http://127.0.0.1:\(closed)/"))
            XCTFail()
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotConnectToHost)
            XCTAssertEqual(e.cause?.code, 7)
            XCTAssertEqual(e.url?.absoluteString, "http://127.0.0.1:\(closed)/")
        }
        do {
            _ = try await session().data(from: url("http://no-such-host.invalid/"))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .cannotFindHost) }

        let start = Date()
        do {
            _ = try await session { $0.timeoutIntervalForRequest = 0.5 }.data(from: url(nginx.http + "/slow"))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .timedOut) }
        XCTAssertLessThan(Date().timeIntervalSince(start), 20, "the idle timeout fired, not the 30 s stall")
    }

    func testLargeBodyWithBackPressure() async throws {
        let limit = 1 << 20
        let (bytes, response) = try await session { $0.receiveBufferLimit = limit }.bytes(from: url(nginx.http + "/big.bin"))
        XCTAssertEqual(response.expectedContentLength, Int64(NginxFixture.bigSize))
        var offset = 0
        var maxBuffered = 0
        var mismatch = false
        for try await chunk in bytes.chunks {
            chunk.withUnsafeBytes { raw in
                for (i, b) in raw.enumerated() where b != NginxFixture.bigByte(offset + i) { mismatch = true; break }
            }
            offset += chunk.count
            maxBuffered = max(maxBuffered, bytes.task.bufferedByteCount)
            if offset < 8 << 20 { try await Task.sleep(nanoseconds: 100_000) }
        }
        XCTAssertFalse(mismatch)
        XCTAssertEqual(offset, NginxFixture.bigSize)
        // libcurl was paused: what waits is bounded by the limit plus the buffer being
        // staged and the one handed over as the pause took effect, whatever the body size.
        XCTAssertLessThanOrEqual(maxBuffered, limit + 2 * HTTPHandler.stagingBufferSize)
        XCTAssertLessThan(maxBuffered, NginxFixture.bigSize / 8)
    }

    func testDownloadResumesWithRangeAndIfRange() throws {
        let first = ResumeRecorder(cancelAt: 3 << 20)
        Session(configuration: config(), delegate: first).downloadTask(with: url(nginx.http + "/throttled.bin")).resume()
        XCTAssertEqual(first.done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(first.error?.code, .cancelled)
        let data = try XCTUnwrap(first.resumeData)
        let info = try ResumeData(data: data)
        XCTAssertNotNil(info.validator, "nginx's ETag is the validator")

        let second = ResumeRecorder(cancelAt: nil)
        Session(configuration: config(), delegate: second).downloadTask(withResumeData: data).resume()
        XCTAssertEqual(second.done.wait(timeout: .now() + 120), .success)
        XCTAssertNil(second.error)
        XCTAssertEqual(second.resumedAt, info.bytesReceived, "206 from the offset")
        let file = try XCTUnwrap(second.file)
        XCTAssertEqual(file.count, NginxFixture.bigSize)
        XCTAssertEqual(file.prefix(1000), Data((0..<1000).map(NginxFixture.bigByte)))
        XCTAssertEqual(file.suffix(10), Data((NginxFixture.bigSize - 10..<NginxFixture.bigSize).map(NginxFixture.bigByte)))
    }

    func testCLIWithTLS() throws {
        let porter = porterBinary
        func run(_ args: [String]) throws -> (Int32, String) {
            let r = try runProcess(porter, args, environment: withoutProxies)
            return (r.status, r.stdout)
        }
        XCTAssertEqual(try run([nginx.https + "/index.html"]).0, 60, "an untrusted server is curl's 60")
        XCTAssertEqual(try run(["--cacert", nginx.caFile, nginx.https + "/index.html"]).1, "hello from nginx\n")
        XCTAssertEqual(try run(["-k", nginx.https + "/index.html"]).1, "hello from nginx\n")
        let leaf = try String(contentsOfFile: nginx.dir + "/leaf.pem", encoding: .utf8)
        let pin = try XCTUnwrap(HTTPHandler.publicKeyPin(ofDER: try XCTUnwrap(CurlTransfer.der(fromPEM: leaf))))
        XCTAssertEqual(try run(["--cacert", nginx.caFile, "--pinnedpubkey", pin, nginx.https + "/index.html"]).0, 0)
        XCTAssertEqual(try run(["--cacert", nginx.caFile, "--pinnedpubkey", "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
                                nginx.https + "/index.html"]).0, 90, "curl's 90: pinned key mismatch")
        XCTAssertEqual(try run(["-f", nginx.http + "/missing"]).0, 22)
        // -i / -I print the status line as the server sent it, as curl does.
        XCTAssertTrue(try run(["-I", nginx.http + "/index.html"]).1.hasPrefix("HTTP/1.1 200 OK\r\n"))
        XCTAssertTrue(try run(["-i", "--cacert", nginx.caFile, nginx.https + "/index.html"]).1.hasPrefix("HTTP/2 200\r\n"))
        XCTAssertEqual(try run(["-L", nginx.http + "/chain/3"]).1, "hello from nginx\n", "-L follows")
        XCTAssertTrue(try run([nginx.http + "/chain/3"]).1.contains("302 Found"), "without -L the 3xx is the answer, as in curl")
        let stay = try run(["-s", "--no-location", "-w", "json", nginx.http + "/chain/3"])
        XCTAssertTrue(stay.1.contains("\"status\":302"), stay.1)
        XCTAssertEqual(try run(["--cacert", nginx.caFile, "--cert", nginx.dir + "/client.pem", "--key", nginx.dir + "/client.key",
                                nginx.https + "/whoami"]).1, "SUCCESS CN=porter-client\n")
        XCTAssertEqual(try run(["--http1.1", "--compressed", "--cacert", nginx.caFile, nginx.https + "/index.html"]).1, "hello from nginx\n")

        // -C -: continue a partial download; the server answers 206 and the file ends up whole.
        let out = nginx.dir + "/continued.bin"
        let head = Data((0..<100_000).map(NginxFixture.bigByte))
        try head.write(to: URL(fileURLWithPath: out))
        let cont = try run(["-s", "-C", "-", "-o", out, "-w", "json", nginx.http + "/big.bin"])
        XCTAssertEqual(cont.0, 0)
        XCTAssertTrue(cont.1.contains("\"status\":206"), cont.1)
        let whole = try Data(contentsOf: URL(fileURLWithPath: out))
        XCTAssertEqual(whole.count, NginxFixture.bigSize)
        XCTAssertEqual(whole.suffix(5), Data((NginxFixture.bigSize - 5..<NginxFixture.bigSize).map(NginxFixture.bigByte)))
        XCTAssertFalse(try FileManager.default.contentsOfDirectory(atPath: nginx.dir).contains { $0.hasPrefix(".porter-") },
                       "no temporary file left")
    }

    /// ResponseHeadParser (the lines HTTPHandler.header(_:) gets from libcurl): a status
    /// line resets the block, junk lines and bad names are skipped, and fields past
    /// 10,000 are dropped: HTTPFields traps at 65,535, and 70,000 "a:" lines fit in
    /// libcurl's 300 KiB head limit.
    func testResponseHeadParserLinesAndFieldLimit() {
        var parser = ResponseHeadParser()
        func feed(_ line: String) -> ResponseHeadParser.LineKind {
            var bytes = Array(line.utf8)
            return bytes.withUnsafeMutableBytes { parser.feed(line: UnsafeRawBufferPointer($0)) }
        }
        XCTAssertEqual(feed("HTTP/1.1 100 Continue\r\n"), .statusLine)
        XCTAssertFalse(parser.isFinal)
        XCTAssertEqual(feed("\r\n"), .end)
        XCTAssertEqual(feed("HTTP/2 404 \r\n"), .statusLine)
        XCTAssertEqual(parser.status, 404)
        XCTAssertEqual(parser.version, "HTTP/2")
        XCTAssertEqual(parser.statusLine, "HTTP/2 404")
        XCTAssertEqual(feed("Content-Type :  text/plain \t\r\n"), .field)
        XCTAssertEqual(parser.fields[.contentType], "text/plain")
        XCTAssertEqual(feed("no colon here\r\n"), .ignored)
        XCTAssertEqual(feed("Bad Name: x\r\n"), .ignored)
        for i in 0..<70_000 { _ = feed("a\(i % 3): \(i)\r\n") }
        XCTAssertEqual(parser.fields.count, ResponseHeadParser.maximumFieldCount)
        XCTAssertEqual(feed("b: 1\r\n"), .ignored)
        XCTAssertEqual(feed("\r\n"), .end)
        XCTAssertTrue(parser.isFinal)
        XCTAssertEqual(feed("HTTP/1.1 2\r\n"), .statusLine)
        XCTAssertEqual(parser.status, 0, "not three digits")
        XCTAssertTrue(parser.fields.isEmpty)
    }

    /// The parser takes the names most responses carry from a prepared table: the name it
    /// keeps is exactly the one `HTTPField.Name` makes of the same bytes (as sent, for
    /// -i and -D; compared without case), whatever the spelling.
    func testResponseHeadParserKeepsEveryNameAsSent() {
        let spellings = ["Content-Type", "content-type", "CONTENT-TYPE", "Content-type", "ETag", "etag", "Etag",
                         "Server", "server", "Date", "Content-Length", "content-length", "Last-Modified", "Connection",
                         "Accept-Ranges", "Set-Cookie", "set-cookie", "Strict-Transport-Security", "X-Other", "x-other",
                         "Conten-Type", "Content-Typ", "Content-Types"]
        for name in spellings {
            var parser = ResponseHeadParser()
            var bytes = Array("\(name): v\r\n".utf8)
            XCTAssertEqual(bytes.withUnsafeMutableBytes { parser.feed(line: UnsafeRawBufferPointer($0)) }, .field, name)
            let kept = parser.fields.first?.name
            XCTAssertEqual(kept?.rawName, name, "the name as sent")
            XCTAssertEqual(kept?.canonicalName, name.lowercased())
            XCTAssertEqual(kept, HTTPField.Name(name))
            XCTAssertEqual(parser.fields[HTTPField.Name(name)!], "v")
        }
    }
}

/// The libcurl loop is the executor of its tasks: it knows its own thread.
final class CurlLoopExecutorTests: XCTestCase {
    func testTheLoopKnowsItsThreadAndRunsWorkInOrder() {
        let loop = CurlLoop(name: "porter.curl.test")
        XCTAssertFalse(loop.isCurrent)
        let seen = Locked<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        for i in 0..<100 {
            loop.execute {
                seen.withLock { $0.append(loop.isCurrent ? i : -1) }
                if i == 99 { done.signal() }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(seen.current, Array(0..<100), "in order, each on the loop's own thread")
    }

    /// Names of this process's threads that belong to keyed curl loops.
    private func keyedLoopThreads() -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .filter { $0.hasPrefix("porter.curl.") && $0 != "porter.curl.te" }
    }

    private func allThreads() -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
    }


    /// An idle loop ends its thread and starts a new one for the next work.
    func testAnIdleLoopEndsItsThreadAndStartsAgain() {
        let saved = CurlLoop.idleExitMilliseconds.exchange(300, ordering: .relaxed)
        defer { CurlLoop.idleExitMilliseconds.store(saved, ordering: .relaxed) }
        let loop = CurlLoop(name: "porter.curl.test")
        XCTAssertFalse(loop.hasThread, "no thread before any work")
        let ran = DispatchSemaphore(value: 0)
        loop.execute { if loop.isCurrent { ran.signal() } }
        XCTAssertEqual(ran.wait(timeout: .now() + 120), .success)
        XCTAssertTrue(eventually { !loop.hasThread }, "the thread ends once the loop is idle")
        loop.execute { if loop.isCurrent { ran.signal() } }
        XCTAssertEqual(ran.wait(timeout: .now() + 120), .success, "work after the idle end runs on a new thread")
    }

    /// A session with pinned names (curl's --resolve) gets a loop of its own; once idle,
    /// that loop's thread ends and it leaves the table (each used to keep a thread forever).
    func testLoopsForPinnedNamesDoNotKeepThreads() throws {
        let saved = CurlLoop.idleExitMilliseconds.exchange(300, ordering: .relaxed)
        defer { CurlLoop.idleExitMilliseconds.store(saved, ordering: .relaxed) }
        var loops: [CurlLoop] = []
        for i in 1...5 {
            var c = SessionConfiguration.ephemeral
            c.hostOverrides = [try XCTUnwrap(HostOverride(parsing: "pinned\(i).test:80:127.0.0.1"))]
            let loop = CurlLoop.loop(for: c)
            XCTAssertTrue(loop === CurlLoop.loop(for: c), "one loop per setting")
            loops.append(loop)
        }
        XCTAssertEqual(Set(loops.map { ObjectIdentifier($0) }).count, 5)
        let ran = DispatchSemaphore(value: 0)
        for loop in loops { loop.execute { ran.signal() } }
        for _ in loops { XCTAssertEqual(ran.wait(timeout: .now() + 120), .success) }
        XCTAssertGreaterThanOrEqual(keyedLoopThreads().count, 5, "five loops, five threads: \(allThreads())")
        XCTAssertTrue(eventually { keyedLoopThreads().isEmpty }, "left: \(keyedLoopThreads())")
        XCTAssertTrue(eventually { loops.allSatisfy { !CurlLoop.isInTable($0) } }, "idle keyed loops leave the table")
        loops.removeAll()
    }
}
