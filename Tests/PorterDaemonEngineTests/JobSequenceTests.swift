import PorterCore
import XCTest
@testable import PorterDaemon

/// Every sequence of events up to a length, from every state those sequences reach, with
/// the scheduler's actions checked against what a shell would see (the style of
/// `TaskStateMachineTests.testExhaustiveSequencesCompleteAtMostOnce`):
/// - exactly one end per job, and nothing about a job after it;
/// - never two attempts of a job at once, and no end while an attempt runs (the file is
///   never moved while the engine writes it);
/// - a timer is set exactly while the job waits for one, and none is left at the end;
/// - cancelAttempt only for a live attempt, at most once each;
/// - the limits (per session, per host, discretionary) never exceeded, and no job left
///   waiting in a queue that has room (admission is complete after every event).
final class JobSequenceTests: XCTestCase {
    typealias S = JobScheduler

    /// What a shell sees, built from the actions alone.
    struct Shell {
        var now: Double = 0
        var live: [Int: Int] = [:]  // job -> attempt number
        var cancelled: Set<Int> = []  // jobs whose live attempt was asked to stop
        var timers: [Int: Double] = [:]
        var ended: Set<Int> = []
        var added: Set<Int> = []
    }

    struct World {
        var s: S
        var shell = Shell()
    }

    let tickets = [
        S.Ticket(id: 1, session: "s", host: "h1"),
        S.Ticket(id: 2, session: "s", host: "h1", priority: 0.9),
        S.Ticket(id: 3, session: "s", host: "h2", discretionary: true),
        S.Ticket(id: 4, session: "t", host: "h1", discretionary: true),
    ]

    static func policy() -> S.Policy {
        var p = S.Policy()
        p.perSession = 2
        p.perHost = 1
        p.resourceTimeout = 4
        p.jitter = { _, _ in 1 }
        return p
    }

    /// The events about one job, made from the world as the shell knows it (a report
    /// carries the live attempt's number, or a stale one when none runs).
    func events(for id: Int, full: Bool) -> [(World) -> S.Event] {
        let lost = PorterError(.networkConnectionLost, "lost")
        let gone = PorterError(.badServerResponse, "gone")
        func n(_ w: World) -> Int { w.shell.live[id] ?? 99 }
        var out: [(World) -> S.Event] = [
            { _ in .resume(id) }, { _ in .suspend(id) }, { _ in .cancel(id, resumeData: false) },
            { .attemptEnded(id, attempt: n($0), .success) },
            { .attemptEnded(id, attempt: n($0), .failure(lost)) },
            { .timerFired(id, at: $0.shell.timers[id] ?? -1) },
        ]
        if full {
            out += [
                { _ in .cancel(id, resumeData: true) },
                { .attemptEnded(id, attempt: n($0), .failure(gone)) },
                { .attemptEnded(id, attempt: n($0), .failure(PorterError(.userCancelledAuthentication, "no"))) },
                { .startFailed(id, attempt: n($0), gone) },
                { .writeFailed(id, attempt: n($0), PorterError(.cannotWriteToFile, "full")) },
                { .resourceChanged(id, attempt: n($0)) },
                { .loginTimedOut(id, attempt: n($0)) },
                { _ in .reschedule(id, priority: 0.1, earliestBegin: nil) },
                { w in .reschedule(id, priority: 1, earliestBegin: w.shell.now + 2) },
            ]
        }
        return out
    }

    /// Applies one event; checks every invariant on the actions and the state after.
    func apply(_ event: S.Event, to w: inout World, trail: @autoclosure () -> String) {
        // The time moves on; a timer fires at its time.
        w.shell.now += 1
        if case .timerFired(let id, let at) = event, w.shell.timers[id] == at {
            w.shell.now = max(w.shell.now, at)
            w.shell.timers[id] = nil  // the shell forgets a timer that fired
        }
        // A report ends the attempt it names, in the shell, before the scheduler hears it.
        switch event {
        case .attemptEnded(let id, let n, _), .startFailed(let id, let n, _):
            if w.shell.live[id] == n {
                w.shell.live[id] = nil
                w.shell.cancelled.remove(id)
            }
        default: break
        }
        if case .add(let t, _) = event { w.shell.added.insert(t.id) }
        let actions = w.s.handle(event, now: w.shell.now)
        for a in actions {
            let id: Int
            switch a {
            case .start(let j, _, _), .cancelAttempt(let j), .scheduleTimer(let j, _), .cancelTimer(let j), .recordSuspended(let j),
                 .recordRunning(let j), .keepBytes(let j), .retryLater(let j, _, _, _, _), .clearRetry(let j), .end(let j, _):
                id = j
            }
            XCTAssertFalse(w.shell.ended.contains(id), "\(JobSchedulerTests.tag(a)) after the job's end: \(trail())")
            switch a {
            case .start(_, let n, _):
                XCTAssertNil(w.shell.live[id], "two attempts at once: \(trail())")
                w.shell.live[id] = n
            case .cancelAttempt:
                XCTAssertNotNil(w.shell.live[id], "cancelAttempt without an attempt: \(trail())")
                XCTAssertFalse(w.shell.cancelled.contains(id), "an attempt cancelled twice: \(trail())")
                w.shell.cancelled.insert(id)
            case .scheduleTimer(_, let at):
                XCTAssertNil(w.shell.timers[id], "a second timer: \(trail())")
                w.shell.timers[id] = at
            case .cancelTimer:
                XCTAssertNotNil(w.shell.timers[id], "cancelTimer without a timer: \(trail())")
                w.shell.timers[id] = nil
            case .keepBytes, .retryLater:
                XCTAssertNil(w.shell.live[id], "the file closed while an attempt writes it: \(trail())")
            case .end:
                XCTAssertNil(w.shell.live[id], "an end while an attempt runs: \(trail())")
                XCTAssertNil(w.shell.timers[id], "a timer left at the end: \(trail())")
                w.shell.ended.insert(id)
            case .recordSuspended, .recordRunning, .clearRetry:
                break
            }
        }
        check(w, trail: trail())
    }

    func check(_ w: World, trail: @autoclosure () -> String) {
        let p = w.s.policy
        var bySession: [String: Int] = [:], byHost: [String: Int] = [:], discretionary: [String: Int] = [:]
        for t in tickets where w.shell.added.contains(t.id) {
            let phase = w.s.phase(of: t.id)
            XCTAssertEqual(phase == nil, w.shell.ended.contains(t.id), "forgotten exactly when ended: \(trail())")
            switch phase {
            case .running(let a)?, .stopping(let a, _)?:
                XCTAssertEqual(w.shell.live[t.id], a.number, "the attempt the shell runs: \(trail())")
            default:
                XCTAssertNil(w.shell.live[t.id], "an attempt the scheduler forgot: \(trail())")
            }
            if case .stopping? = phase { XCTAssertTrue(w.shell.cancelled.contains(t.id), "stopping without a cancel: \(trail())") }
            if case .running? = phase { XCTAssertFalse(w.shell.cancelled.contains(t.id), "running but cancelled: \(trail())") }
            switch phase {
            case .waitingToBegin(let at)?, .waitingToRetry(let at)?:
                XCTAssertEqual(w.shell.timers[t.id], at, "the wait's timer: \(trail())")
            default:
                XCTAssertNil(w.shell.timers[t.id], "a timer outside a wait: \(trail())")
            }
            if w.shell.live[t.id] != nil {
                bySession[t.session, default: 0] += 1
                byHost[t.host, default: 0] += 1
                if t.discretionary { discretionary[t.session, default: 0] += 1 }
            }
        }
        for (_, n) in bySession { XCTAssertLessThanOrEqual(n, p.perSession, "per session: \(trail())") }
        for (_, n) in byHost { XCTAssertLessThanOrEqual(n, p.perHost, "per host: \(trail())") }
        for (_, n) in discretionary { XCTAssertLessThanOrEqual(n, 1, "discretionary: \(trail())") }
        XCTAssertEqual(w.s.activeBySession.filter { $0.value != 0 }, bySession, "the scheduler's count: \(trail())")
        XCTAssertEqual(w.s.activeByHost.filter { $0.value != 0 }, byHost, "the scheduler's count: \(trail())")
        // Admission is complete: a queued job waits only for a full limit.
        for t in tickets where w.s.phase(of: t.id) == .queued {
            let room = bySession[t.session, default: 0] < p.perSession && byHost[t.host, default: 0] < p.perHost
                && !(t.discretionary && discretionary[t.session, default: 0] > 0)
            XCTAssertFalse(room, "job \(t.id) waits in a queue with room: \(trail())")
        }
    }

    func walk(_ w: World, depth: Int, alphabet: [(World) -> S.Event], trail: [S.Event], count: inout Int) {
        if depth == 0 { count += 1; return }
        for make in alphabet {
            var next = w
            let e = make(next)
            apply(e, to: &next, trail: "\(trail + [e])")
            walk(next, depth: depth - 1, alphabet: alphabet, trail: trail + [e], count: &count)
        }
    }

    func world(resumed: [Int]) -> World {
        var w = World(s: S(policy: JobSequenceTests.policy()))
        for t in tickets { apply(.add(t, .suspended), to: &w, trail: "add") }
        for id in resumed { apply(.resume(id), to: &w, trail: "resume \(id)") }
        return w
    }

    /// One job, every kind of event, every sequence of four from a new job, a running
    /// one, one stopping for a suspend and one waiting to retry; then every sequence of
    /// five of the events that move it most.
    func testEveryJobSequenceEndsOnceAndLeavesNothingBehind() {
        let full = events(for: 1, full: true) + [{ _ in .networkChanged }]
        var count = 0
        var stopping = world(resumed: [1])
        apply(.suspend(1), to: &stopping, trail: "suspend")
        var retrying = world(resumed: [1])
        apply(.attemptEnded(1, attempt: 1, .failure(PorterError(.timedOut, "slow"))), to: &retrying, trail: "timed out")
        XCTAssertEqual(retrying.s.phase(of: 1), .waitingToRetry(at: 7), "six events, then one second of back-off")
        for start in [world(resumed: []), world(resumed: [1]), stopping, retrying] {
            walk(start, depth: 4, alphabet: full, trail: [], count: &count)
        }
        XCTAssertEqual(count, 4 * Int(pow(Double(full.count), 4)))
        count = 0
        let core = events(for: 1, full: false) + [{ _ in .networkChanged }]
        walk(world(resumed: []), depth: 5, alphabet: core, trail: [], count: &count)
        XCTAssertEqual(count, Int(pow(Double(core.count), 5)))
    }

    /// Four jobs in two sessions over two hosts (limits 2 per session, 1 per host; two
    /// discretionary), every sequence of four of their main events, from all four resumed.
    func testEverySchedulerSequenceKeepsTheLimits() {
        let alphabet = tickets.flatMap { events(for: $0.id, full: false) } + [{ _ in .networkChanged }]
        var count = 0
        let start = world(resumed: [1, 2, 3, 4])
        XCTAssertEqual(start.shell.live.keys.sorted(), [1, 3], "h1 and h2 once each; 4 waits for h1")
        walk(start, depth: 4, alphabet: alphabet, trail: [], count: &count)
        XCTAssertEqual(count, Int(pow(Double(alphabet.count), 4)))
    }
}
