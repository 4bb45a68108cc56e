import Foundation
import Porter
import PorterIPC
import XCTest

/// The compact layout of task lists (`BackgroundTaskList`): what porterd sends is what a
/// client reads, and bytes from a peer that are not such a list are refused, never a trap.
final class BackgroundTaskListTests: XCTestCase {
    private func snapshot(_ id: Int, _ full: Bool) -> BackgroundTaskSnapshot {
        BackgroundTaskSnapshot(id: id, session: "s-\(id % 3)", kind: id % 2 == 0 ? .download : .upload,
                               url: URL(string: "sftp://user@host.example:2222/dir/f\(id).bin?q=\(id)")!,
                               taskDescription: full ? "nightly — ü \(id)" : nil, state: full ? "running" : "completed",
                               received: Int64(id) << 20, expected: full ? -1 : Int64.max, sent: Int64(id),
                               retries: id % 7, nextAttempt: full ? 1_800_000_000.25 + Double(id) : nil,
                               statusCode: full ? 206 : nil, errorCode: full ? "-1004" : nil,
                               errorMessage: full ? "cannot connect" : nil, destination: full ? "/home/u/f\(id)" : nil)
    }

    func testListsRoundTripEveryField() throws {
        let tasks = (0..<50).map { snapshot($0, $0 % 2 == 0) }
        for message in [BackgroundDaemonMessage.taskPage(reference: -3, tasks), .tasks(reference: 41, tasks),
                        .attached(session: "nächste", tasks: tasks), .tasks(reference: 0, [])] {
            let bytes = try XCTUnwrap(BackgroundTaskList.encode(message))
            XCTAssertEqual(try BackgroundTaskList.decode(bytes), message)
        }
        XCTAssertNil(BackgroundTaskList.encode(.pong(reference: 1)), "only lists are compact")
    }

    func testMalformedListsAreRefused() throws {
        let bytes = try XCTUnwrap(BackgroundTaskList.encode(.tasks(reference: 1, (0..<3).map { snapshot($0, true) })))
        // Cut anywhere, or with a byte more: refused.
        for cut in 0..<bytes.count {
            XCTAssertThrowsError(try BackgroundTaskList.decode(Array(bytes[..<cut])), "cut at \(cut)")
        }
        XCTAssertThrowsError(try BackgroundTaskList.decode(bytes + [0]))
        // An unknown message, a count past the bytes, a string longer than what is left.
        var unknown = bytes
        unknown[0] = 9
        XCTAssertThrowsError(try BackgroundTaskList.decode(unknown))
        var huge = bytes
        huge.replaceSubrange(9..<13, with: [0xFF, 0xFF, 0xFF, 0x7F])
        XCTAssertThrowsError(try BackgroundTaskList.decode(huge))
        var long = bytes
        long.replaceSubrange(70..<74, with: [0xF0, 0xFF, 0xFF, 0x7F])
        XCTAssertThrowsError(try BackgroundTaskList.decode(long))
        // A next attempt that is not a time (NaN, infinite) is refused.
        for bad in [Double.nan, .infinity, -.infinity] {
            var t = snapshot(1, true)
            t.nextAttempt = bad
            let encoded = try XCTUnwrap(BackgroundTaskList.encode(.tasks(reference: 1, [t])))
            XCTAssertThrowsError(try BackgroundTaskList.decode(encoded), "\(bad)")
        }
        // Random bytes: refused or read, never a trap.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            var noise = bytes
            for _ in 0..<3 { noise[Int.random(in: 0..<noise.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            _ = try? BackgroundTaskList.decode(noise)
        }
    }
}
