import CPorterPlugin
import Foundation
@testable import PorterPluginKit
import XCTest

/// `PluginClient`: each report becomes the host call porter_plugin.h names, with the
/// values converted; a host older than a call is not called past its table; challenges
/// wait for their reply or are withdrawn.
final class PluginClientTests: XCTestCase {
    override func setUp() {
        super.setUp()
        FakeHost.state.reset()
    }

    private func client(size: Int = MemoryLayout<porter_host>.size) -> PluginClient {
        PluginClient(host: FakeHost.table(size: size), client: FakeHost.client)
    }

    func testReportsReachTheHostWithTheirValues() {
        let c = client()
        c.receive(PluginResponse(mimeType: "text/plain", textEncoding: "utf-8", expectedLength: nil, statusCode: nil,
                                 headers: [(name: "A", value: "1"), (name: "B", value: "")], resumeOffset: nil, validator: "v1"))
        c.receive(PluginResponse(mimeType: nil, expectedLength: 5, statusCode: 206, resumeOffset: 10))
        c.load([])
        c.load([1, 2, 3])
        c.redirect(to: "kit://h/elsewhere")
        c.sent(4, total: 8, expected: nil)
        c.sent(4, total: 12, expected: 12)
        c.log(Int32(PORTER_LOG_WARNING), "careful")
        c.fail(PluginError(Int32(PORTER_ERR_AUTHENTICATION_FAILED), "denied", causeDomain: "libssh2", causeCode: -18))
        c.fail(PluginError(Int32(PORTER_ERR_TIMED_OUT), "slow"))
        c.finish()
        let size = MemoryLayout<porter_response>.size
        XCTAssertEqual(FakeHost.state.take(), [
            "response 7 text/plain utf-8 -1 -1 A=1,B= -1 v1 size=\(size)",
            "response 7 nil nil 5 206  10 nil size=\(size)",
            "data [1, 2, 3]",
            "redirect kit://h/elsewhere no-head",
            "sent 4 8 -1",
            "sent 4 12 12",
            "log 3 careful",
            "fail 35 denied libssh2 -18",
            "fail 5 slow nil 0",
            "finish",
        ], "an empty load is not reported; nil becomes -1 or NULL")
    }

    func testTheRequestBodyIsReadThroughTheHost() {
        FakeHost.state.read { FakeHost.state.body = Array("abcdef".utf8) }
        let c = client()
        var buffer = [UInt8](repeating: 0, count: 4)
        let n = buffer.withUnsafeMutableBytes { c.readBody(into: $0) }
        XCTAssertEqual(n, 4)
        XCTAssertEqual(buffer, Array("abcd".utf8))
        XCTAssertEqual(c.readBody(into: UnsafeMutableRawBufferPointer(start: nil, count: 0)), -1, "no buffer: -1, the host is not asked")
        XCTAssertEqual(FakeHost.state.take(), ["read 4"])
    }

    /// A 1.0 host's table ends before `cached_response_is_valid` and `connect_service`:
    /// PluginKit says so instead of calling past the end.
    func testAnOlderHostIsNotCalledPastItsTable() {
        let old = client(size: MemoryLayout<porter_host>.offset(of: \.cached_response_is_valid)!)
        XCTAssertFalse(old.cachedResponseIsValid(revalidated: true))
        XCTAssertThrowsError(try old.connect(to: .sshAgent)) { error in
            XCTAssertEqual((error as? PluginError)?.code, Int32(PORTER_ERR_UNSUPPORTED_CONFIGURATION))
        }
        // 1.1 but not 1.3: the cache call is there, the service call is not.
        let mid = client(size: MemoryLayout<porter_host>.offset(of: \.connect_service)!)
        XCTAssertTrue(mid.cachedResponseIsValid(revalidated: false))
        XCTAssertThrowsError(try mid.connect(to: .sshAgent))
        XCTAssertEqual(FakeHost.state.take(), ["cached 0"])
    }

    func testAServiceConnectionOrTheHostsReasonForNone() throws {
        let c = client()
        FakeHost.state.read { FakeHost.state.serviceResult = (42, 0, "") }
        XCTAssertEqual(try c.connect(to: .sshAgent), 42)
        FakeHost.state.read { FakeHost.state.serviceResult = (-1, Int32(PORTER_ERR_RESOURCE_UNAVAILABLE), "no agent at $SSH_AUTH_SOCK") }
        XCTAssertThrowsError(try c.connect(to: .sshAgent)) { error in
            let e = error as? PluginError
            XCTAssertEqual(e?.code, Int32(PORTER_ERR_RESOURCE_UNAVAILABLE))
            XCTAssertEqual(e?.message, "no agent at $SSH_AUTH_SOCK")
        }
        FakeHost.state.read { FakeHost.state.serviceResult = (-1, 0, "") }
        XCTAssertThrowsError(try c.connect(to: .sshAgent)) { error in
            XCTAssertEqual((error as? PluginError)?.code, Int32(PORTER_ERR_UNKNOWN), "no code from the host: unknown")
            XCTAssertEqual((error as? PluginError)?.message, "no sshAgent connection")
        }
        XCTAssertEqual(FakeHost.state.take(), ["connect 1", "connect 1", "connect 1"])
    }

    func testAChallengeIsAskedWithItsValuesAndItsReplyReturned() {
        FakeHost.state.read { FakeHost.state.challengeAnswer = .password("ann", "sesame") }
        let c = client()
        let reply = c.challengeAndWait(PluginChallenge(method: .serverTrust, host: "h", port: 2222, realm: "r", previousFailureCount: 1,
                                                       proposedUser: "bob", identity: [[1, 2], []], failureReason: "unknown host key"),
                                       isCancelled: { false })
        XCTAssertEqual(reply, .password(user: "ann", password: "sesame"))
        let custom = c.challengeAndWait(PluginChallenge(method: .custom("ssh-keyboard-interactive"), host: "h", port: 22),
                                        isCancelled: { false })
        XCTAssertEqual(custom, .password(user: "ann", password: "sesame"))
        XCTAssertEqual(FakeHost.state.take(), [
            "challenge \(PORTER_AUTH_SERVER_TRUST) nil h:2222 r 1 bob [[1, 2], []] unknown host key",
            "challenge \(PORTER_AUTH_CUSTOM) ssh-keyboard-interactive h:22 nil 0 nil [] nil",
        ])
    }

    func testAChallengeTheHostRefusesOrNeverAnswersEndsWithoutAReply() {
        let c = client()
        FakeHost.state.read { FakeHost.state.challengeAnswer = .refuse }
        XCTAssertNil(c.challengeAndWait(PluginChallenge(method: .password, host: "h", port: 1), isCancelled: { false }),
                     "a challenge the host could not raise (0) has no reply")
        FakeHost.state.read { FakeHost.state.challengeAnswer = .never }
        XCTAssertNil(c.challengeAndWait(PluginChallenge(method: .password, host: "h", port: 1), isCancelled: { true }))
        let lines = FakeHost.state.take()
        XCTAssertEqual(lines.count, 3, "\(lines)")
        XCTAssertEqual(lines.last, "cancel 77", "a cancelled wait withdraws its challenge by the host's identifier")
    }
}
