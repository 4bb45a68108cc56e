import XCTest
import PorterTestSupport
@testable import Porter

/// The server-trust delegate is asked once per connection (as URLSession asks), not once
/// per request: against nginx over https with a CA the session does not trust.
final class TrustPerConnectionTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap()
        super.setUp()
    }


    final class Trusting: SessionDelegate, @unchecked Sendable {
        let asked = Locked([String]())
        func session(_ session: Session, didReceive challenge: AuthenticationChallenge,
                     completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
            guard let trust = challenge.protectionSpace.serverTrust else { return completion(.performDefaultHandling) }
            asked.withLock { $0.append("\(challenge.protectionSpace.host):\(challenge.protectionSpace.port)") }
            completion(.useCredential(Credential(trust: trust)))
        }
    }

    func testOneChallengePerConnection() async throws {
        var config = SessionConfiguration.ephemeral
        config.proxies = .none
        config.responseCache = nil
        let delegate = Trusting()
        let session = Session(configuration: config, delegate: delegate)
        var connections: [String] = []
        for _ in 0..<5 {
            let (data, response) = try await session.data(from: URL(string: nginx.https + "/conn")!)
            XCTAssertEqual(response.statusCode, 200)
            connections.append(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        XCTAssertEqual(delegate.asked.withLock { $0 }, ["127.0.0.1:\(nginx.httpsPort)"], "one connection, one challenge")
        XCTAssertEqual(Set(connections).count, 1, "the requests went over the connection the delegate trusted: \(connections)")

        // Another host name (another connection) asks again, once.
        for _ in 0..<2 {
            _ = try await session.data(from: URL(string: "https://localhost:\(nginx.httpsPort)/index.html")!)
        }
        XCTAssertEqual(delegate.asked.withLock { $0 }, ["127.0.0.1:\(nginx.httpsPort)", "localhost:\(nginx.httpsPort)"])

        // Another session's delegate decides for itself.
        let other = Trusting()
        _ = try await Session(configuration: config, delegate: other).data(from: URL(string: nginx.https + "/index.html")!)
        XCTAssertEqual(other.asked.withLock { $0 }.count, 1)
        session.finishTasksAndInvalidate()
    }
}
