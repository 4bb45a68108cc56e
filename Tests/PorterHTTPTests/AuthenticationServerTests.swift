import XCTest
import PorterTestSupport
@testable import Porter
@testable import PorterHTTP

/// A delegate that records every challenge and answers with `policy`.
final class ChallengeRecorder: TaskDelegate, @unchecked Sendable {
    let lock = NSLock()
    var challenges: [AuthenticationChallenge] = []
    let policy: @Sendable (AuthenticationChallenge) -> ChallengeDisposition
    init(_ policy: @escaping @Sendable (AuthenticationChallenge) -> ChallengeDisposition) { self.policy = policy }
    func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
              completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        lock.withLock { challenges.append(challenge) }
        completion(policy(challenge))
    }
    var methods: [AuthenticationMethod] { lock.withLock { challenges.map(\.protectionSpace.authenticationMethod) } }
    var spaces: [ProtectionSpace] { lock.withLock { challenges.map(\.protectionSpace) } }
}

/// `ownConnections`: a connection pool (libcurl loop) of its own. A proxy that accepted
/// Negotiate keeps the connection authenticated (squid pins it), and libcurl hands that
/// connection to a later Negotiate of the same process (the same tickets, as a rule): a
/// test of "no ticket" after one with a ticket needs other connections.
private func plainSession(_ delegate: (any SessionDelegate)?, proxy: URL? = nil, ownConnections: Bool = false) -> Session {
    var c = SessionConfiguration.ephemeral
    c.proxies = proxy.map { ProxyConfiguration(httpProxy: $0) } ?? .none
    if ownConnections { c.httpMaximumConnectionsPerHost = 5 }
    return Session(configuration: c, delegate: delegate)
}

/// `porter` with the test realm's Kerberos files and `cache` as its ticket cache.
private func porter(_ args: [String], cache: String? = nil) throws -> ProcessResult {
    var env = withoutProxies
    if let cache { env["KRB5CCNAME"] = cache }
    return try runProcess(porterBinary, args, environment: env)
}

/// Negotiate (SPNEGO with Kerberos) against MIT Kerberos's KDC and Apache's
/// mod_auth_gssapi, both on loopback: with a ticket the protected page loads (the server
/// names the client alice@PORTER.TEST), without one the 401 is the response.
final class NegotiateTests: XCTestCase {
    nonisolated(unsafe) static var servers: Result<(KerberosRealm, DaemonFixture), Error>?

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
        var started: [() -> Void] = []
        servers = Result {
            let realm = try KerberosRealm(); started.append(realm.stop)
            let apache = try DaemonFixture.apacheGSSAPI(realm)
            return (realm, apache)
        }
        if case .failure = servers { started.forEach { $0() } }
    }
    override class func tearDown() {
        if case .success(let (realm, apache))? = servers { apache.stop(); realm.stop() }
        super.tearDown()
    }

    private var realm: KerberosRealm!
    private var apache: DaemonFixture!
    private var protected: URL { URL(string: "http://localhost:\(apache.port)/krb/index.txt")! }

    override func setUpWithError() throws {
        (realm, apache) = try XCTUnwrap(NegotiateTests.servers).get()
    }

    func testTicketLoadsTheProtectedPageThroughTheLibrary() async throws {
        setenv("KRB5CCNAME", try realm.ticketCache("alice", user: "alice", password: "alicepw"), 1)
        // The delegate's default handling uses the user's tickets, as URLSession does.
        let d = ChallengeRecorder { _ in .performDefaultHandling }
        let (data, response) = try await plainSession(d).data(from: protected)
        XCTAssertEqual(response.statusCode, 200, apache.log("error.log"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "kerberos area\n")
        XCTAssertEqual(d.methods, [.negotiate])
        XCTAssertEqual(d.spaces.first?.host, "localhost")
        XCTAssertTrue(apache.log("access.log").contains("\"GET /krb/index.txt HTTP/1.1\" 200 alice@PORTER.TEST"), apache.log("access.log"))

        // No delegate at all: the same default.
        let (again, ok) = try await plainSession(nil).data(from: protected)
        XCTAssertEqual(ok.statusCode, 200)
        XCTAssertEqual(String(decoding: again, as: UTF8.self), "kerberos area\n")
    }

    func testWithoutATicketThe401IsTheResponse() async throws {
        setenv("KRB5CCNAME", try realm.ticketCache("empty", user: nil), 1)
        let d = ChallengeRecorder { _ in .performDefaultHandling }
        let (data, response) = try await plainSession(d).data(from: protected)
        XCTAssertEqual(response.statusCode, 401, "delivered as URLSession does, not an error")
        XCTAssertEqual(response.headerFields[.wwwAuthenticate], "Negotiate")
        XCTAssertFalse(String(decoding: data, as: UTF8.self).contains("kerberos area"))
        XCTAssertEqual(d.methods, [.negotiate], "asked once: a failed Negotiate is not offered again")

        // Cancelling the challenge ends the task with userCancelledAuthentication.
        do {
            _ = try await plainSession(ChallengeRecorder { _ in .cancelAuthenticationChallenge }).data(from: protected)
            XCTFail("cancelled")
        } catch let e as PorterError { XCTAssertEqual(e.code, .userCancelledAuthentication) }
    }

    /// The CLI as a curl user calls it (`--negotiate -u :`, `--negotiate`, `--anyauth -u :`),
    /// and plain: as curl, a plain command line does not use the tickets — the 401 is
    /// the response (exit 0, or 22 with -f).
    func testCLI() throws {
        let cache = try realm.ticketCache("alice-cli", user: "alice", password: "alicepw")
        for args in [["--negotiate", "-u", ":"], ["--negotiate"], ["--anyauth", "-u", ":"]] {
            let r = try porter(args + [protected.absoluteString], cache: cache)
            XCTAssertEqual(r.status, 0, "\(args): \(r.stderr)")
            XCTAssertEqual(r.stdout, "kerberos area\n", "\(args)")
        }
        let plain = try porter(["-i", protected.absoluteString], cache: cache)
        XCTAssertEqual(plain.status, 0, plain.stderr)
        XCTAssertTrue(plain.stdout.hasPrefix("HTTP/1.1 401"), plain.stdout)
        XCTAssertFalse(plain.stdout.contains("kerberos area"))
        let failing = try porter(["-f", protected.absoluteString], cache: cache)
        XCTAssertEqual(failing.status, 22, "curl -f without --negotiate: \(failing.stderr)")
        let basic = try porter(["-f", "-u", "alice:alicepw", protected.absoluteString], cache: cache)
        XCTAssertEqual(basic.status, 22, "-u alone answers Basic only, as curl: \(basic.stderr)")

        let none = try porter(["-f", protected.absoluteString], cache: try realm.ticketCache("empty-cli", user: nil))
        XCTAssertEqual(none.status, 22, "the 401, as curl -f reports it: \(none.stderr)")
        XCTAssertFalse(none.stdout.contains("kerberos area"))
    }
}

/// NTLM against a real acceptor (pyspnego's, in ntlmserver.py): the type 1, 2 and 3
/// messages on one keep-alive connection, the password checked by the server.
final class NTLMTests: XCTestCase {
    nonisolated(unsafe) static var server: Result<NTLMServer, Error>?

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
        server = Result { try NTLMServer(proxy: false) }
    }
    override class func tearDown() {
        if case .success(let s)? = server { s.stop() }
        super.tearDown()
    }

    private var ntlm: NTLMServer!
    private func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(ntlm.port)\(path)")! }
    override func setUpWithError() throws { ntlm = try XCTUnwrap(NTLMTests.server).get() }

    /// The log lines of `path`.
    private func requests(_ path: String) -> [[String]] { ntlm.requests.filter { $0.last == path } }

    func testNTLMThroughTheDelegateOnOneConnection() async throws {
        let d = ChallengeRecorder { _ in .useCredential(Credential(user: "carol", password: "carolpw")) }
        let s = plainSession(d)
        let (data, response) = try await s.data(from: url("/first"))
        XCTAssertEqual(response.statusCode, 200)
        let text = String(decoding: data, as: UTF8.self)
        XCTAssertTrue(text.hasPrefix("ntlm user=carol "), text)
        XCTAssertEqual(d.methods, [.ntlm])
        // 401 without credentials, then type 1 → 401 (type 2) and type 3 → 200 on one connection.
        let lines = requests("/first")
        let handshake = lines.filter { $0[1] != "0" }
        XCTAssertEqual(handshake.map { $0[1] + "-" + $0[2] }, ["1-401", "3-200"], "\(lines)")
        XCTAssertEqual(Set(handshake.map { $0[0] }).count, 1, "NTLM is bound to its connection: \(lines)")

        // The next load of the session keeps that authenticated connection: no new handshake.
        let (second, _) = try await s.data(from: url("/second"))
        let connection = handshake[0][0]
        XCTAssertTrue(String(decoding: second, as: UTF8.self).contains("connection=\(connection) "),
                      "\(String(decoding: second, as: UTF8.self)) \(requests("/second"))")
    }

    func testWrongPasswordThenRightAndAPOSTBody() async throws {
        let d = ChallengeRecorder { c in
            .useCredential(Credential(user: "carol", password: c.previousFailureCount == 0 ? "wrong" : "carolpw"))
        }
        var request = Request(url: url("/post"))
        request.method = "POST"
        request.body = .data(Data("hello ntlm".utf8))
        let (data, response) = try await plainSession(d).data(for: request)
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertTrue(String(decoding: data, as: UTF8.self).hasSuffix("method=POST body=hello ntlm\n"),
                      String(decoding: data, as: UTF8.self))
        XCTAssertEqual(d.lock.withLock { d.challenges.map(\.previousFailureCount) }, [0, 1])

        // No delegate: the 401 is the response.
        let (_, denied) = try await plainSession(nil).data(from: url("/denied"))
        XCTAssertEqual(denied.statusCode, 401)
        XCTAssertEqual(denied.headerFields[.wwwAuthenticate], "NTLM")
    }

    func testCLI() throws {
        let r = try porter(["--anyauth", "-u", "carol:carolpw", url("/cli").absoluteString])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stdout.hasPrefix("ntlm user=carol "), r.stdout)
        let wrong = try porter(["-f", "--anyauth", "-u", "carol:nope", url("/cli-wrong").absoluteString])
        XCTAssertEqual(wrong.status, 22, wrong.stderr)
        let ntlm = try porter(["--ntlm", "-u", "carol:carolpw", url("/cli-ntlm").absoluteString])
        XCTAssertEqual(ntlm.status, 0, ntlm.stderr)
        XCTAssertTrue(ntlm.stdout.hasPrefix("ntlm user=carol "), ntlm.stdout)
        // curl's default (Basic) and --digest do not answer an NTLM challenge: the 401.
        for args in [["-u", "carol:carolpw"], ["--digest", "-u", "carol:carolpw"]] {
            let r = try porter(["-f"] + args + [url("/cli-basic").absoluteString])
            XCTAssertEqual(r.status, 22, "\(args): \(r.stderr)")
        }
    }
}

/// 407 proxy authentication with each scheme a real proxy offers: squid asking for
/// Negotiate, Digest and Basic in one 407 (each taken in turn by rejecting the stronger
/// ones, as with URLSession), and an NTLM proxy on pyspnego.
final class ProxyAuthenticationTests: XCTestCase {
    nonisolated(unsafe) static var servers: Result<(KerberosRealm, DaemonFixture, DaemonFixture, NTLMServer), Error>?

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
        var started: [() -> Void] = []
        servers = Result {
            let realm = try KerberosRealm(); started.append(realm.stop)
            let origin = try DaemonFixture.apacheGSSAPI(realm); started.append(origin.stop)
            let squid = try DaemonFixture.squidAuth(realm); started.append(squid.stop)
            let ntlm = try NTLMServer(proxy: true)
            return (realm, origin, squid, ntlm)
        }
        if case .failure = servers { started.forEach { $0() } }
    }
    override class func tearDown() {
        if case .success(let (realm, origin, squid, ntlm))? = servers { ntlm.stop(); squid.stop(); origin.stop(); realm.stop() }
        super.tearDown()
    }

    private var realm: KerberosRealm!
    private var origin: DaemonFixture!
    private var squid: DaemonFixture!
    private var ntlmProxy: NTLMServer!
    private var page: URL { URL(string: "http://127.0.0.1:\(origin.port)/index.txt")! }
    private var squidURL: URL { URL(string: "http://localhost:\(squid.port)")! }

    override func setUpWithError() throws {
        (realm, origin, squid, ntlmProxy) = try XCTUnwrap(ProxyAuthenticationTests.servers).get()
    }

    /// Answers the proxy's `scheme` with `credential`, rejects the stronger ones.
    private func only(_ scheme: AuthenticationMethod, _ credential: Credential) -> ChallengeRecorder {
        ChallengeRecorder { c in
            guard c.protectionSpace.isProxy else { return .performDefaultHandling }
            return c.protectionSpace.authenticationMethod == scheme ? .useCredential(credential) : .rejectProtectionSpace
        }
    }

    func testBasicAndDigestAmongTheSchemesSquidOffers() async throws {
        setenv("KRB5CCNAME", try realm.ticketCache("empty-proxy", user: nil), 1)
        for (scheme, user, password, realmName) in [(AuthenticationMethod.httpBasic, "dave", "davepw", "porter-basic"),
                                                     (.httpDigest, "erin", "erinpw", "porter-digest")] {
            let d = only(scheme, Credential(user: user, password: password))
            let (data, response) = try await plainSession(d, proxy: squidURL).data(from: page)
            XCTAssertEqual(response.statusCode, 200, "\(scheme): \(squid.log("cache.log").suffix(600))")
            XCTAssertEqual(String(decoding: data, as: UTF8.self), "open area\n")
            // Strongest first; each rejection brings the next.
            XCTAssertEqual(d.methods, scheme == .httpBasic ? [.negotiate, .httpDigest, .httpBasic] : [.negotiate, .httpDigest])
            let space = try XCTUnwrap(d.spaces.last)
            XCTAssertTrue(space.isProxy)
            XCTAssertEqual(space.port, squid.port)
            XCTAssertEqual(space.realm, realmName)
            XCTAssertTrue(eventually(60) { self.squid.log("access.log").contains("/index.txt \(user) ") }, squid.log("access.log"))
        }

        // A wrong Basic password: asked again with previousFailureCount 1, then the 407.
        let wrong = ChallengeRecorder { c in
            c.protectionSpace.authenticationMethod == .httpBasic && c.previousFailureCount == 0
                ? .useCredential(Credential(user: "dave", password: "wrong")) : .rejectProtectionSpace
        }
        let (_, denied) = try await plainSession(wrong, proxy: squidURL).data(from: page)
        XCTAssertEqual(denied.statusCode, 407)
        XCTAssertEqual(wrong.lock.withLock { wrong.challenges.filter { $0.protectionSpace.authenticationMethod == .httpBasic }
            .map(\.previousFailureCount) }, [0, 1])
    }

    func testNegotiateWithTheProxy() async throws {
        setenv("KRB5CCNAME", try realm.ticketCache("alice-proxy", user: "alice", password: "alicepw"), 1)
        let d = ChallengeRecorder { _ in .performDefaultHandling }
        let (data, response) = try await plainSession(d, proxy: squidURL).data(from: page)
        XCTAssertEqual(response.statusCode, 200, String(squid.log("cache.log").suffix(800)))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "open area\n")
        XCTAssertEqual(d.methods, [.negotiate])
        XCTAssertTrue(eventually(60) { self.squid.log("access.log").contains("/index.txt alice@PORTER.TEST ") }, squid.log("access.log"))

        // Without a ticket, with nothing else to answer: Negotiate fails, Digest and Basic
        // have no credential, and the 407 is the response.
        setenv("KRB5CCNAME", try realm.ticketCache("empty-proxy2", user: nil), 1)
        let none = ChallengeRecorder { _ in .performDefaultHandling }
        let (_, denied) = try await plainSession(none, proxy: squidURL, ownConnections: true).data(from: page)
        XCTAssertEqual(denied.statusCode, 407)
        XCTAssertEqual(none.methods, [.negotiate, .httpDigest])
    }

    func testNTLMProxy() async throws {
        let d = only(.ntlm, Credential(user: "carol", password: "carolpw"))
        let proxy = URL(string: "http://127.0.0.1:\(ntlmProxy.port)")!
        let (data, response) = try await plainSession(d, proxy: proxy).data(from: page)
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertTrue(String(decoding: data, as: UTF8.self).hasPrefix("ntlm user=carol "), String(decoding: data, as: UTF8.self))
        XCTAssertEqual(d.methods, [.ntlm])
        XCTAssertTrue(d.spaces.allSatisfy(\.isProxy))
        let handshake = ntlmProxy.requests.filter { $0[1] != "0" }
        XCTAssertEqual(handshake.map { $0[1] + "-" + $0[2] }, ["1-407", "3-200"], "\(ntlmProxy.requests)")
        XCTAssertEqual(Set(handshake.map { $0[0] }).count, 1, "one connection: \(ntlmProxy.requests)")
    }
}

/// The challenge parser on what real servers send: several fields, several challenges in
/// one field, commas and escaped quotes inside quoted parameters.
final class ChallengeParsingTests: XCTestCase {
    func testSeveralChallengesStrongestFirst() {
        let parsed = HTTPHandler.parseChallenges([
            #"Basic realm="porter-basic""#,
            #"Digest realm="a, \"quoted\" realm", nonce="x,y", qop="auth", Negotiate"#,
            "NTLM", "Bearer", #"Basic realm="second""#,
        ])
        XCTAssertEqual(parsed.map(\.0), [.negotiate, .ntlm, .httpDigest, .httpBasic, .custom("bearer")])
        XCTAssertEqual(parsed.map(\.1), [nil, nil, #"a, "quoted" realm"#, "porter-basic", nil])
        // A token68 (a server's Negotiate answer) is not a parameter.
        XCTAssertEqual(HTTPHandler.parseChallenges(["Negotiate oYG2MIGzoAMKAQChCw=="]).map(\.0), [.negotiate])
        XCTAssertEqual(HTTPHandler.parseChallenge("basic realm=plain").1, "plain")
    }
}
