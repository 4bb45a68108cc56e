import PorterCore
import XCTest
@testable import PorterEngine

/// Every sequence of porterd's reports and the application's controls, up to a length:
/// one completion at most, nothing after it, and a completed task stays completed.
final class BackgroundMirrorMachineTests: XCTestCase {
    private let events: [BackgroundMirrorMachine.Event] = [
        .snapshot(.running), .snapshot(.suspended), .snapshot(.canceling), .snapshot(.completed),
        .finishedDownloading, .completed, .control,
    ]

    func testEverySequence() {
        var sequences = 0
        func walk(_ machine: BackgroundMirrorMachine, depth: Int, completions: Int, trace: [BackgroundMirrorMachine.Event]) {
            sequences += 1
            guard depth > 0 else { return }
            for event in events {
                var m = machine
                let action = m.handle(event)
                var count = completions
                if case .deliverCompletion = action { count += 1 }
                XCTAssertLessThanOrEqual(count, 1, "two completions: \(trace + [event])")
                if machine.completed {
                    XCTAssertEqual(action, .drop, "\(action) after the completion: \(trace + [event])")
                    XCTAssertEqual(m.state, .completed, "left completed: \(trace + [event])")
                }
                if event == .completed, !machine.completed { XCTAssertEqual(action, .deliverCompletion) }
                walk(m, depth: depth - 1, completions: count, trace: trace + [event])
            }
        }
        walk(BackgroundMirrorMachine(state: .suspended), depth: 6, completions: 0, trace: [])
        XCTAssertGreaterThan(sequences, 100_000)
    }

    func testAStaleSnapshotCannotReopenACompletedTask() {
        var m = BackgroundMirrorMachine(state: .running)
        XCTAssertEqual(m.handle(.finishedDownloading), .deliverFile)
        XCTAssertEqual(m.handle(.completed), .deliverCompletion)
        XCTAssertEqual(m.handle(.snapshot(.running)), .drop)
        XCTAssertEqual(m.state, .completed)
        XCTAssertEqual(m.handle(.completed), .drop, "a second completion (a re-sent event) is not delivered")
        XCTAssertEqual(m.handle(.control), .drop, "no control for a completed task goes to porterd")
    }
}
