import XCTest
import PorterTestSupport
@testable import Porter

/// Proxies: tinyproxy (HTTP forwarding, CONNECT, Basic proxy authentication) and
/// dante (SOCKS5), all on loopback, in front of the test nginx.
final class ProxyTests: XCTestCase {
    nonisolated(unsafe) static var servers: Result<(NginxFixture, DaemonFixture, DaemonFixture, DaemonFixture), Error>?

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
        // Start one by one, so that those already running are stopped if a later one fails.
        var started: [() -> Void] = []
        servers = Result {
            let n = try NginxFixture(); started.append(n.stop)
            let a = try DaemonFixture.tinyproxy(); started.append(a.stop)
            let b = try DaemonFixture.tinyproxy(basicAuth: ("proxyuser", "proxypass")); started.append(b.stop)
            let c = try DaemonFixture.dante()
            return (n, a, b, c)
        }
        if case .failure = servers { started.forEach { $0() } }
    }
    override class func tearDown() {
        if case .success(let (n, a, b, c))? = servers { n.stop(); a.stop(); b.stop(); c.stop() }
        super.tearDown()
    }

    private var nginx: NginxFixture!
    private var tinyproxy: DaemonFixture!
    private var authProxy: DaemonFixture!
    private var dante: DaemonFixture!

    override func setUpWithError() throws {
        switch ProxyTests.servers {
        case .success(let (n, a, b, c))?: (nginx, tinyproxy, authProxy, dante) = (n, a, b, c)
        case .failure(let e)?: throw e
        case nil: throw NginxFixture.Failure.setup("no servers")
        }
    }

    private func session(_ proxies: ProxyConfiguration, delegate: (any SessionDelegate)? = nil) -> Session {
        var c = SessionConfiguration.ephemeral
        c.proxies = proxies
        c.caCertificateFile = nginx.caFile
        return Session(configuration: c, delegate: delegate)
    }
    private func proxy(_ s: String) -> URL { URL(string: s)! }

    func testHTTPThroughTinyproxy() async throws {
        let s = session(ProxyConfiguration(httpProxy: proxy("http://127.0.0.1:\(tinyproxy.port)")))
        let (data, _) = try await s.data(from: URL(string: nginx.http + "/via")!)
        XCTAssertTrue(String(decoding: data, as: UTF8.self).contains("tinyproxy"), "the request went through the proxy")
    }

    func testHTTPSThroughCONNECT() async throws {
        let s = session(ProxyConfiguration(httpsProxy: proxy("http://127.0.0.1:\(tinyproxy.port)")))
        let (data, response) = try await s.data(from: URL(string: nginx.https + "/index.html")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "hello from nginx\n")
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertTrue(tinyproxy.log("tinyproxy.log").contains("CONNECT"), "tunnelled through the proxy")
    }

    /// WebSocket and stream tasks go through the session's proxy as a CONNECT tunnel.
    func testWebSocketAndStreamThroughCONNECT() async throws {
        let ports = try WSFixture.start().get()
        let s = session(ProxyConfiguration(httpProxy: proxy("http://127.0.0.1:\(tinyproxy.port)")))
        let before = tinyproxy.log("tinyproxy.log").components(separatedBy: "CONNECT").count
        let socket = s.webSocketTask(with: URL(string: "ws://127.0.0.1:\(ports.ws)/echo")!)
        socket.resume()
        try await socket.send(.string("tunnelled"))
        let reply = try await socket.receive()
        XCTAssertEqual(reply, .string("tunnelled"))
        socket.cancel(with: .normalClosure, reason: nil)
        let stream = s.streamTask(withHostName: "127.0.0.1", port: ports.echo)
        stream.resume()
        try await stream.write(Data("via proxy\n".utf8))
        let line = try await stream.read(minLength: 10, maxLength: 10, timeout: 10)
        XCTAssertEqual(String(decoding: line.data, as: UTF8.self), "via proxy\n")
        stream.cancel()
        let log = tinyproxy.log("tinyproxy.log")
        XCTAssertGreaterThanOrEqual(log.components(separatedBy: "CONNECT").count - before, 2, "both went through CONNECT: \(log.suffix(800))")
        XCTAssertTrue(log.contains(":\(ports.ws)") && log.contains(":\(ports.echo)"), String(log.suffix(800)))
    }

    func testProxyAuthenticationChallenge() async throws {
        final class Answer: TaskDelegate, @unchecked Sendable {
            let lock = NSLock()
            var spaces: [ProtectionSpace] = []
            func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                      completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
                lock.withLock { spaces.append(challenge.protectionSpace) }
                completion(.useCredential(Credential(user: "proxyuser", password: "proxypass")))
            }
        }
        let d = Answer()
        let s = session(ProxyConfiguration(httpProxy: proxy("http://127.0.0.1:\(authProxy.port)")), delegate: d)
        let (data, response) = try await s.data(from: URL(string: nginx.http + "/via")!)
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertTrue(String(decoding: data, as: UTF8.self).contains("tinyproxy"))
        let space = try XCTUnwrap(d.lock.withLock { d.spaces.first })
        XCTAssertTrue(space.isProxy)
        XCTAssertEqual(space.port, authProxy.port)
        XCTAssertEqual(space.authenticationMethod, .httpBasic)

        // No delegate: the 407 is the answer.
        let (_, denied) = try await session(ProxyConfiguration(httpProxy: proxy("http://127.0.0.1:\(authProxy.port)")))
            .data(from: URL(string: nginx.http + "/via")!)
        XCTAssertEqual(denied.statusCode, 407)

        // Credentials in the proxy URL.
        let (_, ok) = try await session(ProxyConfiguration(httpProxy: proxy("http://proxyuser:proxypass@127.0.0.1:\(authProxy.port)")))
            .data(from: URL(string: nginx.http + "/via")!)
        XCTAssertEqual(ok.statusCode, 200)
    }

    func testSOCKS5ThroughDante() async throws {
        for scheme in ["socks5", "socks5h"] {
            let s = session(ProxyConfiguration(allProxy: proxy("\(scheme)://127.0.0.1:\(dante.port)")))
            let (data, _) = try await s.data(from: URL(string: nginx.http + "/index.html")!)
            XCTAssertEqual(String(decoding: data, as: UTF8.self), "hello from nginx\n", scheme)
        }
        XCTAssertTrue(dante.log("danted.log").contains("pass"), "dante logged the connections")
    }

    func testCLIProxyOption() throws {
        let porter = porterBinary
        let p = Process()
        p.executableURL = URL(fileURLWithPath: porter)
        p.arguments = ["-x", "127.0.0.1:\(tinyproxy.port)", nginx.http + "/via"]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0)
        XCTAssertTrue(String(decoding: data, as: UTF8.self).contains("tinyproxy"))
    }

    func testDeadProxyFailsAndNoProxyBypasses() async throws {
        let dead = try NginxFixture.freePort()
        do {
            _ = try await session(ProxyConfiguration(httpProxy: proxy("http://127.0.0.1:\(dead)"))).data(from: URL(string: nginx.http + "/")!)
            XCTFail("the proxy is used, so a dead one fails")
        } catch let e as PorterError { XCTAssertEqual(e.code, .cannotConnectToHost) }
        let bypass = ProxyConfiguration(httpProxy: proxy("http://127.0.0.1:\(dead)"), noProxy: ["127.0.0.1"])
        let (data, _) = try await session(bypass).data(from: URL(string: nginx.http + "/index.html")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "hello from nginx\n")
    }
}
