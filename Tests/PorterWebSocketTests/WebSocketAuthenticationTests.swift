import XCTest
import PorterTestSupport
@testable import Porter
@testable import PorterWebSocket

extension DaemonFixture {
    /// Apache httpd in front of wsserver.py's `websockets` server (mod_proxy_wstunnel):
    /// /digest/ needs Digest (erin / erinpw, realm porter-ws; mod_auth_digest), /stale/
    /// the same with nonces that live one second, /krb/ needs Negotiate (mod_auth_gssapi,
    /// HTTP/localhost of `realm`), /krb-or-basic/ offers Negotiate and Basic (the Basic
    /// password checked by the KDC: alice / alicepw); each passes the upgrade to ws://127.0.0.1:`wsPort`/.
    /// The access log says, per request, the status and the user.
    static func apacheWebSocketAuth(_ realm: KerberosRealm, wsPort: Int) throws -> DaemonFixture {
        try DaemonFixture(program: "/usr/sbin/apache2", configName: "httpd.conf", config: { dir, port in
            // An htdigest line: user:realm:MD5(user:realm:password), hashed by openssl.
            let input = dir + "/a1.txt"
            try? "erin:porter-ws:erinpw".write(toFile: input, atomically: false, encoding: .utf8)
            let ha1 = ((try? NginxFixture.run("/usr/bin/openssl", ["dgst", "-md5", "-hex", "-r", input])) ?? "")
                .split(separator: " ").first.map(String.init) ?? ""
            try? "erin:porter-ws:\(ha1)\n".write(toFile: dir + "/digest.passwd", atomically: true, encoding: .utf8)
            _ = try? NginxFixture.run("/bin/chmod", ["-R", "a+rX", dir])
            let modules = "/usr/lib/apache2/modules"
            let user = geteuid() == 0 ? "User nobody\nGroup nogroup\n" : ""
            let digest = """
                  AuthType Digest
                  AuthName "porter-ws"
                  AuthDigestProvider file
                  AuthUserFile "\(dir)/digest.passwd"
                  Require valid-user
                """
            return """
                ServerRoot "\(dir)"
                ServerName localhost
                Listen 127.0.0.1:\(port)
                PidFile "\(dir)/httpd.pid"
                ErrorLog "\(dir)/error.log"
                LoadModule mpm_event_module \(modules)/mod_mpm_event.so
                LoadModule authn_core_module \(modules)/mod_authn_core.so
                LoadModule authn_file_module \(modules)/mod_authn_file.so
                LoadModule authz_core_module \(modules)/mod_authz_core.so
                LoadModule authz_user_module \(modules)/mod_authz_user.so
                LoadModule auth_digest_module \(modules)/mod_auth_digest.so
                LoadModule auth_gssapi_module \(modules)/mod_auth_gssapi.so
                LoadModule proxy_module \(modules)/mod_proxy.so
                LoadModule proxy_wstunnel_module \(modules)/mod_proxy_wstunnel.so
                \(user)LogFormat "%{remote}p \\"%r\\" %>s %u" conn
                CustomLog "\(dir)/access.log" conn
                <Location "/digest/">
                \(digest)
                  ProxyPass "ws://127.0.0.1:\(wsPort)/"
                </Location>
                <Location "/stale/">
                \(digest)
                  AuthDigestNonceLifetime 1
                  ProxyPass "ws://127.0.0.1:\(wsPort)/"
                </Location>
                <Location "/krb/">
                  AuthType GSSAPI
                  AuthName "Porter Kerberos"
                  GssapiCredStore keytab:\(realm.keytab)
                  GssapiAllowedMech krb5
                  Require valid-user
                  ProxyPass "ws://127.0.0.1:\(wsPort)/"
                </Location>
                <Location "/krb-or-basic/">
                  AuthType GSSAPI
                  AuthName "porter-krb-basic"
                  GssapiCredStore keytab:\(realm.keytab)
                  GssapiAllowedMech krb5
                  GssapiBasicAuth On
                  Require valid-user
                  ProxyPass "ws://127.0.0.1:\(wsPort)/"
                </Location>

                """
        }, arguments: { dir in ["-f", dir + "/httpd.conf", "-DFOREGROUND"] })
    }
}

extension DaemonFixture {
    /// lighttpd in front of wsserver.py (mod_proxy with upgrade): /sha256/ needs Digest
    /// with SHA-256 (bob / bobpw, realm porter-sha256; mod_auth), and passes the upgrade
    /// to ws://127.0.0.1:`wsPort`/.
    static func lighttpdWebSocketDigest(wsPort: Int) throws -> DaemonFixture {
        try DaemonFixture(program: "/usr/sbin/lighttpd", configName: "lighttpd.conf", config: { dir, port in
            let input = dir + "/a1.txt"
            try? "bob:porter-sha256:bobpw".write(toFile: input, atomically: false, encoding: .utf8)
            let ha1 = ((try? NginxFixture.run("/usr/bin/openssl", ["dgst", "-sha256", "-hex", "-r", input])) ?? "")
                .split(separator: " ").first.map(String.init) ?? ""
            try? "bob:porter-sha256:\(ha1)\n".write(toFile: dir + "/htdigest", atomically: true, encoding: .utf8)
            try? FileManager.default.createDirectory(atPath: dir + "/www", withIntermediateDirectories: true)
            _ = try? NginxFixture.run("/bin/chmod", ["-R", "a+rX", dir])
            return """
                server.document-root = "\(dir)/www"
                server.bind = "127.0.0.1"
                server.port = \(port)
                server.pid-file = "\(dir)/lighttpd.pid"
                server.errorlog = "\(dir)/error.log"
                server.modules = ("mod_auth", "mod_authn_file", "mod_proxy", "mod_accesslog")
                accesslog.filename = "\(dir)/access.log"
                accesslog.format = "%r %>s %u"
                auth.backend = "htdigest"
                auth.backend.htdigest.userfile = "\(dir)/htdigest"
                auth.require = (
                    "/sha256/" => ("method" => "digest", "algorithm" => "SHA-256", "realm" => "porter-sha256", "require" => "valid-user"),
                )
                $HTTP["url"] =~ "^/sha256/" {
                    proxy.server = ("" => (("host" => "127.0.0.1", "port" => \(wsPort))))
                    proxy.header = ("upgrade" => "enable", "map-urlpath" => ("/sha256/" => "/"))
                }

                """
        }, arguments: { dir in ["-D", "-f", dir + "/lighttpd.conf"] })
    }
}

/// Challenges in the opening handshake against real acceptors: Apache's mod_auth_digest
/// and mod_auth_gssapi (with MIT Kerberos's KDC) in front of the `websockets` server,
/// lighttpd's mod_auth (Digest with SHA-256) likewise, and pyspnego's NTLM acceptor
/// upgrading the connection it authenticated.
final class WebSocketAuthenticationTests: WSTestCase {
    nonisolated(unsafe) static var servers: Result<(KerberosRealm, DaemonFixture, NTLMServer, DaemonFixture), Error>?

    override class func setUp() {
        super.setUp()
        var started: [() -> Void] = []
        servers = Result {
            let ws = try WSFixture.start().get()
            let realm = try KerberosRealm(); started.append(realm.stop)
            let apache = try DaemonFixture.apacheWebSocketAuth(realm, wsPort: ws.ws); started.append(apache.stop)
            let ntlm = try NTLMServer(); started.append(ntlm.stop)
            let lighttpd = try DaemonFixture.lighttpdWebSocketDigest(wsPort: ws.ws)
            return (realm, apache, ntlm, lighttpd)
        }
        if case .failure = servers { started.forEach { $0() } }
    }
    override class func tearDown() {
        if case .success(let (realm, apache, ntlm, lighttpd))? = servers { lighttpd.stop(); ntlm.stop(); apache.stop(); realm.stop() }
        super.tearDown()
    }

    private var realm: KerberosRealm!
    private var apache: DaemonFixture!
    private var ntlm: NTLMServer!
    private var lighttpd: DaemonFixture!

    override func setUpWithError() throws {
        try super.setUpWithError()
        (realm, apache, ntlm, lighttpd) = try XCTUnwrap(WebSocketAuthenticationTests.servers).get()
    }

    /// Records the challenges and answers each with `policy` (after `delay`, when given).
    final class Answerer: WebSocketDelegate, @unchecked Sendable {
        let challenges = Locked([AuthenticationChallenge]())
        let policy: @Sendable (AuthenticationChallenge) -> ChallengeDisposition
        let delay: Double
        init(delay: Double = 0, _ policy: @escaping @Sendable (AuthenticationChallenge) -> ChallengeDisposition) {
            self.policy = policy
            self.delay = delay
        }
        func webSocketTask(_ task: WebSocketTask, didReceive challenge: AuthenticationChallenge,
                           completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
            challenges.withLock { $0.append(challenge) }
            let answer = policy(challenge)
            if delay > 0 {
                DispatchQueue.global().asyncAfter(deadline: .now() + delay) { completion(answer) }
            } else {
                completion(answer)
            }
        }
        var methods: [AuthenticationMethod] { challenges.withLock { $0.map(\.protectionSpace.authenticationMethod) } }
    }

    private func error(of task: WebSocketTask) async -> PorterError? {
        do {
            _ = try await task.receive()
            return nil
        } catch {
            return error as? PorterError
        }
    }

    /// Failed before: the handshake answered Basic only, and a Digest-protected upgrade
    /// ended with "the server refused the WebSocket upgrade: 401".
    func testDigestProtectedUpgradeOpensWithTheDelegatesCredential() async throws {
        let earlier = apache.log("access.log").count
        func log() -> Substring { apache.log("access.log").dropFirst(earlier) }
        let d = Answerer { _ in .useCredential(Credential(user: "erin", password: "erinpw", persistence: .none)) }
        let task = session().webSocketTask(with: URL(string: "ws://127.0.0.1:\(apache.port)/digest/echo")!, delegate: d)
        task.resume()
        try await task.send(.string("through Digest"))
        let echoed = try await task.receive()
        XCTAssertEqual(echoed, .string("through Digest"), apache.log("error.log"))
        XCTAssertEqual(d.methods, [.httpDigest])
        XCTAssertEqual(d.challenges.withLock { $0.first?.protectionSpace.realm }, "porter-ws")
        XCTAssertEqual(d.challenges.withLock { $0.first?.previousFailureCount }, 0)
        task.cancel(with: .normalClosure, reason: nil)
        // Apache logs a tunnelled upgrade (as 200) when the tunnel ends.
        XCTAssertTrue(eventually { log().contains("\"GET /digest/echo HTTP/1.1\" 200 erin") }, String(log()))
        XCTAssertTrue(log().contains("\"GET /digest/echo HTTP/1.1\" 401 -"), String(log()))
    }

    /// Digest with SHA-256 (RFC 7616), verified by lighttpd's mod_auth before it passes
    /// the upgrade on.
    func testSHA256DigestThroughLighttpd() async throws {
        let d = Answerer { _ in .useCredential(Credential(user: "bob", password: "bobpw", persistence: .none)) }
        let task = session().webSocketTask(with: URL(string: "ws://127.0.0.1:\(lighttpd.port)/sha256/echo")!, delegate: d)
        task.resume()
        try await task.send(.string("sha-256"))
        let echoed = try await task.receive()
        XCTAssertEqual(echoed, .string("sha-256"), lighttpd.log("error.log"))
        task.cancel(with: .normalClosure, reason: nil)
        XCTAssertEqual(d.methods, [.httpDigest])
        XCTAssertEqual(d.challenges.withLock { $0.first?.protectionSpace.realm }, "porter-sha256")
        XCTAssertTrue(eventually { self.lighttpd.log("access.log").contains("GET /sha256/echo HTTP/1.1 101 bob") }, lighttpd.log("access.log"))
    }

    /// Default handling: the URL's credential, once; a wrong one is refused and not
    /// offered again (the task fails with userAuthenticationRequired).
    func testDigestDefaultHandlingUsesTheURLsCredentialOnce() async throws {
        let good = session().webSocketTask(with: URL(string: "ws://erin:erinpw@127.0.0.1:\(apache.port)/digest/echo")!)
        good.resume()
        try await good.send(.string("url credential"))
        let echoed = try await good.receive()
        XCTAssertEqual(echoed, .string("url credential"))
        good.cancel(with: .normalClosure, reason: nil)

        let d = Answerer { _ in .performDefaultHandling }
        let bad = session().webSocketTask(with: URL(string: "ws://erin:wrong@127.0.0.1:\(apache.port)/digest/echo")!, delegate: d)
        bad.resume()
        let failure = await error(of: bad)
        XCTAssertEqual(failure?.code, .userAuthenticationRequired, "\(String(describing: failure))")
        XCTAssertEqual(d.challenges.withLock { $0.map(\.previousFailureCount) }, [0, 1])
        XCTAssertNotNil(d.challenges.withLock { $0.first?.proposedCredential })
        XCTAssertNil(d.challenges.withLock { $0.last?.proposedCredential })
    }

    /// RFC 7616 §3.3: a 401 with stale=true (the nonce expired while the delegate
    /// thought) is answered again with the new nonce, without asking again. The delegate
    /// answers after 2.5 s so that the one-second nonce is certainly stale; no time is
    /// asserted.
    func testStaleNonceIsAnsweredAgainWithoutAsking() async throws {
        let d = Answerer(delay: 2.5) { _ in .useCredential(Credential(user: "erin", password: "erinpw", persistence: .none)) }
        let task = session().webSocketTask(with: URL(string: "ws://127.0.0.1:\(apache.port)/stale/echo")!, delegate: d)
        task.resume()
        try await task.send(.string("fresh nonce"))
        let echoed = try await task.receive()
        XCTAssertEqual(echoed, .string("fresh nonce"))
        task.cancel(with: .normalClosure, reason: nil)
        XCTAssertEqual(d.methods, [.httpDigest], "asked once")
        func log() -> [String] {
            apache.log("access.log").split(separator: "\n").filter { $0.contains("/stale/echo") }.map { $0.split(separator: " ").suffix(2).joined(separator: " ") }
        }
        // First 401 (no credential), then an answer the server found stale (401 with
        // stale=true), then the upgrade (logged, as 200, when the tunnel ends).
        XCTAssertTrue(eventually { log().count == 3 }, "\(log())")
        XCTAssertEqual(log(), ["401 -", "401 erin", "200 erin"], apache.log("error.log"))
    }

    /// Negotiate with the user's Kerberos tickets (default handling), SPNEGO through
    /// GSS-API for HTTP@localhost; without tickets the 401 ends the task.
    func testNegotiateOpensWithTheUsersTickets() async throws {
        setenv("KRB5CCNAME", try realm.ticketCache("ws-alice", user: "alice", password: "alicepw"), 1)
        defer { unsetenv("KRB5CCNAME") }
        let d = Answerer { _ in .performDefaultHandling }
        let url = URL(string: "ws://localhost:\(apache.port)/krb/echo")!
        let task = session().webSocketTask(with: url, delegate: d)
        task.resume()
        try await task.send(.string("through Kerberos"))
        let echoed = try await task.receive()
        XCTAssertEqual(echoed, .string("through Kerberos"), apache.log("error.log"))
        task.cancel(with: .normalClosure, reason: nil)
        XCTAssertEqual(d.methods, [.negotiate])
        XCTAssertTrue(eventually { self.apache.log("access.log").contains("\"GET /krb/echo HTTP/1.1\" 200 alice@PORTER.TEST") },
                      apache.log("access.log"))

        setenv("KRB5CCNAME", try realm.ticketCache("ws-nobody", user: nil), 1)
        let without = session().webSocketTask(with: url)
        without.resume()
        let failure = await error(of: without)
        XCTAssertEqual(failure?.code, .userAuthenticationRequired, "\(String(describing: failure))")
    }

    /// Negotiate and Basic in one 401: Negotiate, the stronger, is asked first; a delegate
    /// that rejects its protection space is asked for Basic next (URLSession's meaning of
    /// rejectProtectionSpace), and without tickets default handling falls through to
    /// Basic with the URL's credential.
    func testStrongestSchemeFirstAndRejectingItFallsThroughToTheNext() async throws {
        let earlier = apache.log("access.log").count
        func log() -> Substring { apache.log("access.log").dropFirst(earlier) }
        setenv("KRB5CCNAME", try realm.ticketCache("ws-none", user: nil), 1)
        defer { unsetenv("KRB5CCNAME") }
        let d = Answerer { c in
            c.protectionSpace.authenticationMethod == .negotiate ? .rejectProtectionSpace
                : .useCredential(Credential(user: "alice", password: "alicepw", persistence: .none))
        }
        let url = URL(string: "ws://localhost:\(apache.port)/krb-or-basic/echo")!
        let task = session().webSocketTask(with: url, delegate: d)
        task.resume()
        try await task.send(.string("basic after negotiate"))
        let echoed = try await task.receive()
        XCTAssertEqual(echoed, .string("basic after negotiate"), apache.log("error.log"))
        task.cancel(with: .normalClosure, reason: nil)
        XCTAssertEqual(d.methods, [.negotiate, .httpBasic])
        XCTAssertEqual(d.challenges.withLock { $0.last?.protectionSpace.realm }, "porter-krb-basic")

        // Default handling, no tickets: Negotiate cannot answer, Basic takes the URL's credential.
        let quiet = session().webSocketTask(with: URL(string: "ws://alice:alicepw@localhost:\(apache.port)/krb-or-basic/echo")!)
        quiet.resume()
        try await quiet.send(.string("default"))
        let again = try await quiet.receive()
        XCTAssertEqual(again, .string("default"))
        quiet.cancel(with: .normalClosure, reason: nil)
        XCTAssertTrue(eventually { log().components(separatedBy: "\"GET /krb-or-basic/echo HTTP/1.1\" 200 alice").count == 3 }, String(log()))
    }

    /// NTLM authenticates a connection: type 1 and type 3 go on one connection, and the
    /// upgrade happens on it (the server's message names that connection). pyspnego
    /// verifies the NTLMv2 response.
    func testNTLMUpgradesTheConnectionItAuthenticated() async throws {
        let d = Answerer { _ in .useCredential(Credential(user: "PORTER\\carol", password: "carolpw", persistence: .none)) }
        let task = session().webSocketTask(with: URL(string: "ws://127.0.0.1:\(ntlm.port)/ntlm")!, delegate: d)
        task.resume()
        let message = try await task.receive()
        task.cancel(with: .normalClosure, reason: nil)
        XCTAssertEqual(d.methods, [.ntlm])
        let requests = ntlm.requests.filter { $0.last == "/ntlm" }
        XCTAssertEqual(requests.map { $0[1] + "-" + $0[2] }, ["0-401", "1-401", "3-101"], "\(ntlm.requests)")
        XCTAssertEqual(requests[1][0], requests[2][0], "type 1 and type 3 on one connection: \(ntlm.requests)")
        guard case .string(let text) = message else { return XCTFail("\(message)") }
        XCTAssertTrue(text.hasPrefix("ntlm user=") && text.contains("carol") && text.hasSuffix("connection=\(requests[2][0])"), text)

        // A wrong password: pyspnego refuses the type 3, and the task fails.
        let bad = Answerer { c in
            c.previousFailureCount == 0 ? .useCredential(Credential(user: "PORTER\\carol", password: "nope", persistence: .none))
                : .cancelAuthenticationChallenge
        }
        let refused = session().webSocketTask(with: URL(string: "ws://127.0.0.1:\(ntlm.port)/ntlm-bad")!, delegate: bad)
        refused.resume()
        let failure = await error(of: refused)
        XCTAssertEqual(failure?.code, .userCancelledAuthentication, "\(String(describing: failure))")
        XCTAssertEqual(bad.challenges.withLock { $0.map(\.previousFailureCount) }, [0, 1])
    }

    /// RFC 6797 §8.1 through the http handler's rule: a wss 101 with
    /// Strict-Transport-Security teaches the session's HSTS store; a ws one does not.
    /// Failed before: the handshake never looked at the field.
    func testSecureHandshakeTeachesHSTSAndPlainDoesNot() async throws {
        let learnt = HSTSStore()
        let secure = session { $0.hstsStore = learnt }.webSocketTask(with: URL(string: "wss://localhost:\(ports.wss)/echo?hsts")!)
        secure.resume()
        try await secure.send(.string("hsts"))
        _ = try await secure.receive()
        secure.cancel(with: .normalClosure, reason: nil)
        XCTAssertTrue(learnt.isKnown(host: "localhost"))
        XCTAssertTrue(learnt.isKnown(host: "sub.localhost"), "includeSubDomains")

        let untaught = HSTSStore()
        let plain = session { $0.hstsStore = untaught }.webSocketTask(with: URL(string: "ws://localhost:\(ports.ws)/echo?hsts")!)
        plain.resume()
        try await plain.send(.string("no hsts"))
        _ = try await plain.receive()
        plain.cancel(with: .normalClosure, reason: nil)
        XCTAssertFalse(untaught.isKnown(host: "localhost"))
    }
}
