import Foundation
import Porter
import PorterTestSupport
import XCTest

/// A background download whose method carries CR LF and a second request (issue 21,
/// item 13): the session refuses it with badURL before porterd is asked (and porterd's own
/// engine would refuse it again); the recording server never receives the smuggled
/// request, while a good request through the same porterd arrives.
final class BackgroundMethodTests: DaemonTestCase {
    override func setUpWithError() throws {
        try super.setUpWithError()
        daemonHome.install()
    }

    func testASmugglingMethodNeverReachesTheServerThroughPorterd() throws {
        let server = try MisbehavingServer()
        defer { server.stop() }
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: "method-\(UUID().uuidString.prefix(6))"), delegate: recorder)
        defer { session.invalidateAndCancel() }

        let bad = session.downloadTask(with: Request(
            url: URL(string: server.base + "/record?id=bg-bad")!,
            method: "GET /record?id=bg-smuggler HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nDELETE /SMUGGLED"))
        bad.resume()
        let good = session.downloadTask(with: Request(url: URL(string: server.base + "/record?id=bg-good")!))
        good.resume()
        // Two completions (the refused task's identifier is the session's own, which may
        // equal porterd's for the good one, so they are counted, not keyed).
        let end = Date().addingTimeInterval(60)
        var completed = 0
        while completed < 2, Date() < end {
            if recorder.completed.wait(timeout: .now() + 1) == .success { completed += 1 }
        }
        XCTAssertEqual(completed, 2, recorder.order.joined(separator: ", "))
        XCTAssertEqual(bad.error?.code, .badURL, "\(String(describing: bad.error))")
        XCTAssertEqual(bad.state, .completed)
        XCTAssertNil(good.error, "\(String(describing: good.error))")

        let seen = server.waitForRecorded("id=bg-good")
        XCTAssertTrue(seen.contains("id=bg-good"), seen)
        XCTAssertFalse(seen.contains("SMUGGLED"), "the smuggled request arrived:\n\(seen)")
        XCTAssertFalse(seen.contains("bg-bad"), seen)
    }
}
