import XCTest
import PorterTestSupport
@testable import Porter

/// Digest authentication (MD5 and SHA-256) against lighttpd, through challenges.
final class DigestTests: XCTestCase {
    nonisolated(unsafe) static var server: Result<DaemonFixture, Error>?

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
        server = Result { try DaemonFixture.lighttpdDigest() }
    }
    override class func tearDown() {
        if case .success(let s)? = server { s.stop() }
        super.tearDown()
    }

    private var base = ""
    override func setUpWithError() throws {
        base = "http://127.0.0.1:\(try XCTUnwrap(DigestTests.server).get().port)"
    }

    final class Answer: TaskDelegate, @unchecked Sendable {
        let lock = NSLock()
        var challenges: [AuthenticationChallenge] = []
        let credential: @Sendable (AuthenticationChallenge) -> ChallengeDisposition
        init(_ credential: @escaping @Sendable (AuthenticationChallenge) -> ChallengeDisposition) { self.credential = credential }
        func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                  completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
            lock.withLock { challenges.append(challenge) }
            completion(credential(challenge))
        }
    }

    private func load(_ path: String, _ d: Answer?) async throws -> (Data, Response) {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        return try await Session(configuration: c, delegate: d).data(from: URL(string: base + path)!)
    }

    func testDigestMD5AndSHA256() async throws {
        for (path, user, realm, body) in [("/md5/index.txt", "alice", "porter-md5", "md5 area\n"),
                                          ("/sha256/index.txt", "bob", "porter-sha256", "sha256 area\n")] {
            let d = Answer { _ in .useCredential(Credential(user: user, password: "secret")) }
            let (data, response) = try await load(path, d)
            XCTAssertEqual(response.statusCode, 200, path)
            XCTAssertEqual(String(decoding: data, as: UTF8.self), body)
            let c = try XCTUnwrap(d.lock.withLock { d.challenges.first })
            XCTAssertEqual(c.protectionSpace.authenticationMethod, .httpDigest)
            XCTAssertEqual(c.protectionSpace.realm, realm)
            XCTAssertEqual(d.lock.withLock { d.challenges.count }, 1, "one challenge: libcurl completes the digest exchange")
        }
    }

    func testWrongPasswordThenRightAndDefaultHandling() async throws {
        let d = Answer { c in .useCredential(Credential(user: "alice", password: c.previousFailureCount == 0 ? "wrong" : "secret")) }
        let (_, ok) = try await load("/md5/index.txt", d)
        XCTAssertEqual(ok.statusCode, 200)
        XCTAssertEqual(d.lock.withLock { d.challenges.map(\.previousFailureCount) }, [0, 1])

        let (_, denied) = try await load("/md5/index.txt", nil)
        XCTAssertEqual(denied.statusCode, 401)

        let cancel = Answer { _ in .cancelAuthenticationChallenge }
        do {
            _ = try await load("/md5/index.txt", cancel)
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .userCancelledAuthentication) }
    }
}
