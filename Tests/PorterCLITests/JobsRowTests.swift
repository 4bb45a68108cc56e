import Foundation
import Porter
@testable import PorterCLI
import XCTest

/// `porter jobs`'s line for a task, from what porterd (a peer process) sent.
final class JobsRowTests: XCTestCase {
    private func task(nextAttempt: Double?) -> BackgroundTaskSnapshot {
        BackgroundTaskSnapshot(id: 3, session: "s", kind: .download, url: URL(string: "http://127.0.0.1:9/f")!, taskDescription: nil,
                               state: "running", received: 0, expected: -1, sent: 0, retries: 2, nextAttempt: nextAttempt,
                               statusCode: nil, errorCode: nil, errorMessage: nil, destination: "/tmp/f")
    }

    /// A retry time far away (or long past) is clamped, never a trap converting it to an
    /// Int (1e300 seconds trapped before).
    func testARetryTimeOutOfRangeIsClampedNotATrap() {
        let now = Date().timeIntervalSince1970
        XCTAssertEqual(BackgroundCLI.row(task(nextAttempt: 1e300)), "3\ts\tretrying in \(366 * 86400)s\t0\tretries 2\thttp://127.0.0.1:9/f -> /tmp/f")
        XCTAssertTrue(BackgroundCLI.row(task(nextAttempt: -1e300)).hasPrefix("3\ts\tretrying in 0s\t"))
        let soon = BackgroundCLI.row(task(nextAttempt: now + 30))
        XCTAssertTrue(soon.hasPrefix("3\ts\tretrying in 30s\t") || soon.hasPrefix("3\ts\tretrying in 29s\t"), soon)
        XCTAssertEqual(BackgroundCLI.row(task(nextAttempt: nil)), "3\ts\trunning\t0\tretries 2\thttp://127.0.0.1:9/f -> /tmp/f")
    }
}
