import XCTest
@testable import PorterEngine

/// Every sequence of events up to a length, from a fresh load: the promises the machine
/// makes hold whatever the worker and the session do, in whatever order.
final class WorkerLoadMachineTests: XCTestCase {
    typealias M = WorkerLoadMachine
    static let events: [M.Event] = [.attached, .attachFailed, .pause, .resume, .stop, .report(isEnd: false),
                                    .report(isEnd: true), .destroyed, .died, .stopTimerFired]

    struct Trace {
        var machine = M()
        var ends = 0
        var startsSent = 0
        var stopsSent = 0
        var timerArmed = false
        var deliveredAfterEnd = false
        var stoppedBySession = false
        var attached = false
        var pausedAtWorker = false
        var pausesToDeadLoad = false
        var kills = 0
    }

    /// Walks every sequence of `depth` events (10^6 at depth 6) and checks each step.
    func testEverySequenceKeepsThePromises() {
        var sequences = 0
        func walk(_ t: Trace, _ depth: Int, _ path: [M.Event]) {
            sequences += 1
            guard depth > 0 else { return }
            for e in Self.events {
                var n = t
                let actions = n.machine.handle(e)
                let ended = t.ends > 0
                for a in actions {
                    switch a {
                    case .sendStart(let paused):
                        n.startsSent += 1
                        n.pausedAtWorker = paused
                    case .sendPause:
                        n.pausedAtWorker = true
                        if !n.attached || n.machine.destroyed { n.pausesToDeadLoad = true }
                    case .sendResume:
                        n.pausedAtWorker = false
                        if !n.attached || n.machine.destroyed { n.pausesToDeadLoad = true }
                    case .sendStopAndScheduleTimer:
                        n.stopsSent += 1
                        n.timerArmed = true
                    case .cancelStopTimer:
                        XCTAssertTrue(n.timerArmed, "a timer cancelled that was not armed: \(path + [e])")
                        n.timerArmed = false
                    case .deliver:
                        if ended || n.stoppedBySession { n.deliveredAfterEnd = true }
                    case .deliverEnd, .deliverDeath:
                        if ended || n.stoppedBySession { n.deliveredAfterEnd = true }
                        n.ends += 1
                    case .drop:
                        XCTAssertTrue(ended || n.stoppedBySession || n.machine.phase != .live, "a live report was dropped: \(path + [e])")
                    case .killWorker:
                        n.kills += 1
                        XCTAssertFalse(n.machine.destroyed, "a destroyed load's worker was killed: \(path + [e])")
                        n.timerArmed = false
                    }
                }
                if e == .attached, actions.contains(where: { if case .sendStart = $0 { return true }; return false }) { n.attached = true }
                if e == .stop { n.stoppedBySession = true }
                if e == .stopTimerFired, !actions.contains(.killWorker) { n.timerArmed = false }
                let p = path + [e]
                XCTAssertLessThanOrEqual(n.ends, 1, "two ends: \(p)")
                XCTAssertFalse(n.deliveredAfterEnd, "a report after the end or the stop: \(p)")
                XCTAssertLessThanOrEqual(n.startsSent, 1, "started twice: \(p)")
                XCTAssertLessThanOrEqual(n.stopsSent, 1, "stop sent twice: \(p)")
                XCTAssertFalse(n.stopsSent > 0 && n.startsSent == 0, "stop for a load never started: \(p)")
                XCTAssertFalse(n.pausesToDeadLoad, "pause or resume for a load that is not live: \(p)")
                XCTAssertLessThanOrEqual(n.kills, 1, "killed twice: \(p)")
                if n.attached, n.machine.phase == .live, !n.machine.destroyed {
                    XCTAssertEqual(n.pausedAtWorker, n.machine.paused, "the worker's pause differs from the load's: \(p)")
                }
                if n.machine.destroyed { XCTAssertFalse(n.timerArmed, "a timer left armed after the destroy: \(p)") }
                walk(n, depth - 1, p)
            }
        }
        walk(Trace(), 6, [])
        XCTAssertGreaterThan(sequences, 1_000_000)
    }

    /// The shapes the shell relies on, spelled out.
    func testTheOrdinaryLives() {
        var m = M()
        XCTAssertEqual(m.handle(.pause), [])
        XCTAssertEqual(m.handle(.attached), [.sendStart(paused: true)], "a pause before the start goes with it")
        XCTAssertEqual(m.handle(.resume), [.sendResume])
        XCTAssertEqual(m.handle(.report(isEnd: false)), [.deliver])
        XCTAssertEqual(m.handle(.report(isEnd: true)), [.deliverEnd])
        XCTAssertEqual(m.handle(.report(isEnd: false)), [.drop])
        XCTAssertEqual(m.handle(.stop), [], "the worker destroys an ended load itself")
        XCTAssertEqual(m.handle(.destroyed), [])

        var stopped = M()
        _ = stopped.handle(.attached)
        XCTAssertEqual(stopped.handle(.stop), [.sendStopAndScheduleTimer])
        XCTAssertEqual(stopped.handle(.report(isEnd: true)), [.drop])
        XCTAssertEqual(stopped.handle(.stopTimerFired), [.killWorker], "no destroy in time")
        XCTAssertEqual(stopped.handle(.died), [], "the death of a stopped load is not reported")

        var died = M()
        _ = died.handle(.attached)
        XCTAssertEqual(died.handle(.died), [.deliverDeath])
        XCTAssertEqual(died.handle(.report(isEnd: true)), [.drop])
    }
}
