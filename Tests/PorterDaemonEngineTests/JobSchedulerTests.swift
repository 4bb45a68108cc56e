import PorterCore
import XCTest
@testable import PorterDaemon

/// porterd's scheduler on its own: events and a time in, actions out. No daemon, no
/// sockets, no clocks: every time is a number the test chooses.
final class JobSchedulerTests: XCTestCase {
    typealias S = JobScheduler

    static func policy(perSession: Int = 8, perHost: Int = 6, timeout: Double = 7 * 24 * 3600,
                       jitter: @escaping @Sendable (Int, Int) -> Double = { _, _ in 1 }) -> S.Policy {
        var p = S.Policy()
        p.perSession = perSession
        p.perHost = perHost
        p.resourceTimeout = timeout
        p.jitter = jitter
        return p
    }

    static func ticket(_ id: Int, session: String = "s", host: String = "a.example", priority: Float = 0.5,
                       discretionary: Bool = false, earliestBegin: Double? = nil) -> S.Ticket {
        S.Ticket(id: id, session: session, host: host, priority: priority, discretionary: discretionary, earliestBegin: earliestBegin)
    }

    /// A short name for an action and what it carries.
    static func tag(_ a: S.Action) -> String {
        func number(_ d: Double) -> String { d == d.rounded() ? String(Int(d)) : String(d) }
        switch a {
        case .start(let id, let attempt, _): return "start(\(id)#\(attempt))"
        case .cancelAttempt(let id): return "cancelAttempt(\(id))"
        case .scheduleTimer(let id, let at): return "timer(\(id)@\(number(at)))"
        case .cancelTimer(let id): return "cancelTimer(\(id))"
        case .recordSuspended(let id): return "recordSuspended(\(id))"
        case .recordRunning(let id): return "recordRunning(\(id))"
        case .keepBytes(let id): return "keepBytes(\(id))"
        case .retryLater(let id, let e, let retries, let at, _): return "retryLater(\(id),\(e.code),#\(retries)@\(number(at)))"
        case .clearRetry(let id): return "clearRetry(\(id))"
        case .end(let id, let how):
            switch how {
            case .outcome(nil): return "end(\(id),finished)"
            case .outcome(let e?): return "end(\(id),\(e.code))"
            case .cancelled(let rd): return "end(\(id),cancelled\(rd ? "+resumeData" : ""))"
            case .failed(let e): return "end(\(id),failed:\(e.code))"
            }
        }
    }

    func step(_ s: inout S, _ e: S.Event, at now: Double = 0) -> [String] { s.handle(e, now: now).map(JobSchedulerTests.tag) }

    /// The attempt number of a running or stopping job.
    func attempt(_ s: S, _ id: Int) -> Int {
        switch s.phase(of: id) {
        case .running(let a)?, .stopping(let a, _)?: return a.number
        default: XCTFail("job \(id) has no attempt"); return -1
        }
    }

    func started(_ actions: [String]) -> [String] { actions.filter { $0.hasPrefix("start(") } }

    let lost = PorterError(.networkConnectionLost, "the connection was lost")
    let notFound = PorterError(.badServerResponse, "404")

    func testAJobWaitsSuspendedUntilResumedAndEndsOnce() {
        var s = S(policy: Self.policy())
        XCTAssertEqual(step(&s, .add(Self.ticket(1), .suspended)), [], "a new task starts suspended")
        XCTAssertEqual(s.phase(of: 1), .suspended)
        XCTAssertEqual(step(&s, .resume(1), at: 10), ["recordRunning(1)", "start(1#1)"])
        XCTAssertEqual(step(&s, .resume(1)), [], "a second resume does nothing")
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 1, .success), at: 11), ["end(1,finished)"])
        XCTAssertNil(s.phase(of: 1), "an ended job is forgotten")
        for e: S.Event in [.resume(1), .suspend(1), .cancel(1, resumeData: true), .attemptEnded(1, attempt: 1, .success),
                           .timerFired(1, at: 0), .networkChanged, .writeFailed(1, attempt: 1, notFound)] {
            XCTAssertEqual(step(&s, e), [], "\(e) after the end")
        }
        XCTAssertEqual(s.activeBySession, [:])
        XCTAssertEqual(s.activeByHost, [:])
    }

    func testLimitsPerSessionAndPerHost() {
        var s = S(policy: Self.policy())
        var starts: [String] = []
        for id in 1...10 {
            _ = step(&s, .add(Self.ticket(id, host: "a.example"), .suspended))
            starts += started(step(&s, .resume(id)))
        }
        XCTAssertEqual(starts, (1...6).map { "start(\($0)#1)" }, "six at once per host, in order")
        for id in 11...14 {
            _ = step(&s, .add(Self.ticket(id, host: "b.example"), .suspended))
            starts += started(step(&s, .resume(id)))
        }
        XCTAssertEqual(starts.count, 8, "eight at once per session")
        XCTAssertEqual(s.activeBySession["s"], 8)
        // Another session is not held up by this one's limit, but shares the host's.
        _ = step(&s, .add(Self.ticket(20, session: "t", host: "c.example"), .suspended))
        XCTAssertEqual(started(step(&s, .resume(20))), ["start(20#1)"])
        _ = step(&s, .add(Self.ticket(21, session: "t", host: "a.example"), .suspended))
        XCTAssertEqual(started(step(&s, .resume(21))), [], "a.example has six already")
        // The slot that frees (session s, a.example) goes to a waiting job: a.example's of
        // session s (then s is full again) or of session t (then s has room for b.example's).
        let next = started(step(&s, .attemptEnded(1, attempt: 1, .success)))
        XCTAssertTrue(next == ["start(7#1)"] || Set(next) == ["start(21#1)", "start(13#1)"], "\(next)")
        XCTAssertEqual(s.activeBySession["s"], 8)
        XCTAssertEqual(s.activeByHost["a.example"], 6)
    }

    func testHigherPriorityFirstAndEqualPrioritiesKeepTheirOrder() {
        var s = S(policy: Self.policy(perHost: 1))
        _ = step(&s, .add(Self.ticket(1), .suspended))
        _ = step(&s, .resume(1))
        for (id, p) in [(2, Float(0.5)), (3, 0.9), (4, 0.5), (5, 0.9), (6, 0.1)] {
            _ = step(&s, .add(Self.ticket(id, priority: p), .suspended))
            XCTAssertEqual(started(step(&s, .resume(id))), [])
        }
        // Job 6 is raised above all: it goes first among the waiting.
        _ = step(&s, .reschedule(6, priority: 1, earliestBegin: nil))
        var order: [Int] = []
        var running = 1
        for _ in 0..<5 {
            let next = started(step(&s, .attemptEnded(running, attempt: 1, .success)))
            XCTAssertEqual(next.count, 1)
            running = Int(next[0].dropFirst(6).prefix { $0 != "#" })!
            order.append(running)
        }
        XCTAssertEqual(order, [6, 3, 5, 2, 4])
    }

    func testDiscretionaryJobsRunOneAtATimePerSession() {
        var s = S(policy: Self.policy())
        for id in 1...3 {
            _ = step(&s, .add(Self.ticket(id, host: "h", discretionary: true), .suspended))
        }
        _ = step(&s, .add(Self.ticket(4, host: "h4"), .suspended))
        XCTAssertEqual(started(step(&s, .resume(1))), ["start(1#1)"])
        XCTAssertEqual(started(step(&s, .resume(2))), [])
        XCTAssertEqual(started(step(&s, .resume(3))), [])
        XCTAssertEqual(started(step(&s, .resume(4))), ["start(4#1)"], "only discretionary jobs wait for each other")
        _ = step(&s, .add(Self.ticket(5, session: "other", host: "h5", discretionary: true), .suspended))
        XCTAssertEqual(started(step(&s, .resume(5))), ["start(5#1)"], "one per session")
        XCTAssertEqual(started(step(&s, .attemptEnded(1, attempt: 1, .success))), ["start(2#1)"])
        XCTAssertEqual(started(step(&s, .cancel(2, resumeData: false))), [])
        XCTAssertEqual(started(step(&s, .attemptEnded(2, attempt: 1, .failure(PorterError(.cancelled, "x"))))), ["start(3#1)"])
    }

    func testBackoffDoublesFromOneSecondToFiveMinutes() {
        XCTAssertEqual((1...12).map { S.backoff(retries: $0, jitter: 1) },
                       [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300])
        XCTAssertEqual(S.backoff(retries: 3, jitter: 0.8), 3.2)
        XCTAssertEqual(S.backoff(retries: 3, jitter: 1.2), 4.8)
        XCTAssertEqual(S.backoff(retries: 1_000_000, jitter: 1), 300, "no overflow however many retries")
    }

    func testRetriesNetworkFailuresWithBackoffAndJitter() {
        var s = S(policy: Self.policy(jitter: { _, retry in retry == 1 ? 0.8 : 1.2 }))
        _ = step(&s, .add(Self.ticket(1), .suspended))
        _ = step(&s, .resume(1), at: 100)
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 1, .failure(lost)), at: 110),
                       ["keepBytes(1)", "retryLater(1,networkConnectionLost,#1@110.8)", "timer(1@110.8)"])
        XCTAssertEqual(s.phase(of: 1), .waitingToRetry(at: 110.8))
        XCTAssertEqual(step(&s, .resume(1)), [], "resuming a job that waits to retry does nothing")
        XCTAssertEqual(step(&s, .timerFired(1, at: 99)), [], "a timer of an earlier wait")
        XCTAssertEqual(step(&s, .timerFired(1, at: 110.8), at: 111), ["clearRetry(1)", "start(1#2)"])
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 2, .failure(lost)), at: 120),
                       ["keepBytes(1)", "retryLater(1,networkConnectionLost,#2@122.4)", "timer(1@122.4)"])
        XCTAssertEqual(step(&s, .timerFired(1, at: 122.4), at: 123), ["clearRetry(1)", "start(1#3)"])
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 3, .failure(notFound)), at: 124), ["end(1,badServerResponse)"],
                       "the resource's errors are not retried")
    }

    func testNoRetryPastTheResourceTimeout() {
        var s = S(policy: Self.policy(timeout: 60))
        _ = step(&s, .add(Self.ticket(1), .suspended))
        _ = step(&s, .resume(1), at: 1000)
        _ = step(&s, .attemptEnded(1, attempt: 1, .failure(lost)), at: 1030)
        _ = step(&s, .timerFired(1, at: 1031), at: 1031)
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 2, .failure(lost)), at: 1060), ["end(1,networkConnectionLost)"],
                       "60 s after the first attempt")
    }

    func testEarliestBeginWaitsForItsTime() {
        var s = S(policy: Self.policy())
        _ = step(&s, .add(Self.ticket(1, earliestBegin: 500), .suspended))
        XCTAssertEqual(step(&s, .resume(1), at: 100), ["recordRunning(1)", "timer(1@500)"])
        XCTAssertEqual(step(&s, .networkChanged, at: 200), [], "a network change does not start it early")
        XCTAssertEqual(step(&s, .suspend(1), at: 300), ["cancelTimer(1)", "recordSuspended(1)"])
        XCTAssertEqual(step(&s, .resume(1), at: 400), ["recordRunning(1)", "timer(1@500)"])
        XCTAssertEqual(step(&s, .timerFired(1, at: 500), at: 500), ["clearRetry(1)", "start(1#1)"])
        // A date moved later while it waits in a queue: a job resumed later waits again.
        _ = step(&s, .add(Self.ticket(2), .suspended))
        _ = step(&s, .reschedule(2, priority: 0.5, earliestBegin: 900))
        XCTAssertEqual(step(&s, .resume(2), at: 600), ["recordRunning(2)", "timer(2@900)"])
        XCTAssertEqual(step(&s, .cancel(2, resumeData: false), at: 700), ["cancelTimer(2)", "end(2,cancelled)"])
    }

    func testANetworkChangeStartsWaitingRetriesAtOnce() {
        var s = S(policy: Self.policy())
        for id in 1...3 { _ = step(&s, .add(Self.ticket(id, host: "h\(id)"), .suspended)); _ = step(&s, .resume(id)) }
        _ = step(&s, .attemptEnded(1, attempt: 1, .failure(lost)), at: 10)
        _ = step(&s, .attemptEnded(2, attempt: 1, .failure(PorterError(.cannotFindHost, "no DNS"))), at: 10)
        _ = step(&s, .suspend(3))
        _ = step(&s, .attemptEnded(3, attempt: 1, .failure(PorterError(.cancelled, "x"))))
        XCTAssertEqual(step(&s, .networkChanged, at: 10.5),
                       ["cancelTimer(1)", "clearRetry(1)", "start(1#2)", "cancelTimer(2)", "clearRetry(2)", "start(2#2)"])
        XCTAssertEqual(s.phase(of: 3), .suspended, "a suspended job stays suspended")
        XCTAssertEqual(step(&s, .networkChanged), [], "nothing waits now")
    }

    func testSuspendStopsTheAttemptAndResumeStartsAnother() {
        var s = S(policy: Self.policy(perHost: 1))
        _ = step(&s, .add(Self.ticket(1), .suspended))
        _ = step(&s, .add(Self.ticket(2), .suspended))
        _ = step(&s, .resume(1))
        _ = step(&s, .resume(2))
        XCTAssertEqual(step(&s, .suspend(1)), ["recordSuspended(1)", "cancelAttempt(1)"])
        XCTAssertEqual(step(&s, .suspend(1)), [])
        // Resumed before the stop ended: a new attempt follows the old one, never beside it.
        XCTAssertEqual(step(&s, .resume(1)), ["recordRunning(1)"])
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 1, .failure(PorterError(.cancelled, "x")))),
                       ["keepBytes(1)", "start(2#1)"], "the waiting job had its turn first")
        XCTAssertEqual(s.phase(of: 1), .queued)
        XCTAssertEqual(step(&s, .attemptEnded(2, attempt: 1, .success)), ["end(2,finished)", "start(1#2)"])
        // Suspended while stopping: the stop's end keeps the bytes and nothing starts.
        _ = step(&s, .suspend(1))
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 2, .success)), ["keepBytes(1)"],
                       "an attempt stopped for a suspend never ends the job, whatever it reports")
        XCTAssertEqual(s.phase(of: 1), .suspended)
    }

    func testCancelEndsOnceWhetherOrNotAnAttemptRuns() {
        var s = S(policy: Self.policy())
        _ = step(&s, .add(Self.ticket(1), .suspended))
        XCTAssertEqual(step(&s, .cancel(1, resumeData: true)), ["end(1,cancelled+resumeData)"])
        _ = step(&s, .add(Self.ticket(2), .suspended))
        _ = step(&s, .resume(2))
        XCTAssertEqual(step(&s, .cancel(2, resumeData: false)), ["cancelAttempt(2)"])
        XCTAssertEqual(step(&s, .cancel(2, resumeData: true)), [], "the last request decides the kind of end")
        XCTAssertEqual(step(&s, .attemptEnded(2, attempt: 1, .success)), ["end(2,cancelled+resumeData)"],
                       "asked to end, it ends cancelled, whatever the attempt's outcome")
    }

    func testAChangedResourceStartsOverAfterTheAttempt() {
        var s = S(policy: Self.policy())
        _ = step(&s, .add(Self.ticket(1), .suspended))
        _ = step(&s, .resume(1))
        XCTAssertEqual(step(&s, .resourceChanged(1, attempt: 1)), ["cancelAttempt(1)"])
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 1, .failure(PorterError(.cancelled, "x")))), ["keepBytes(1)", "start(1#2)"])
    }

    /// The old flags allowed this: a suspend and a resume while a changed resource's
    /// attempt was stopping left `stopping` set, so the NEXT attempt's success was taken
    /// for a suspend's stop and the download ran a third time. As a phase, the stop's
    /// reason is replaced, never left behind.
    func testSuspendAndResumeWhileRestartingLeaveNoStaleStop() {
        var s = S(policy: Self.policy())
        _ = step(&s, .add(Self.ticket(1), .suspended))
        _ = step(&s, .resume(1))
        _ = step(&s, .resourceChanged(1, attempt: 1))
        XCTAssertEqual(step(&s, .suspend(1)), ["recordSuspended(1)"], "already stopping: no second cancel")
        XCTAssertEqual(step(&s, .resume(1)), ["recordRunning(1)"])
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 1, .failure(PorterError(.cancelled, "x")))), ["keepBytes(1)", "start(1#2)"])
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 2, .success)), ["end(1,finished)"])
    }

    func testAWriteFailureEndsTheJobOnceTheAttemptHasEnded() {
        var s = S(policy: Self.policy(perHost: 1))
        _ = step(&s, .add(Self.ticket(1), .suspended))
        _ = step(&s, .add(Self.ticket(2), .suspended))
        _ = step(&s, .resume(1))
        _ = step(&s, .resume(2))
        let full = PorterError(.cannotWriteToFile, "disk full")
        XCTAssertEqual(step(&s, .writeFailed(1, attempt: 1, full)), ["cancelAttempt(1)"])
        XCTAssertEqual(step(&s, .cancel(1, resumeData: true)), [], "it ends with its failure")
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 1, .failure(PorterError(.cancelled, "x")))),
                       ["end(1,failed:cannotWriteToFile)", "start(2#1)"], "the slot is free only when the attempt has ended")
        XCTAssertEqual(step(&s, .startFailed(2, attempt: 1, PorterError(.cannotCreateFile, "no file"))), ["end(2,failed:cannotCreateFile)"])
        XCTAssertEqual(s.activeByHost, [:])
    }

    func testATimedOutLoginEndsAsAuthenticationRequired() {
        var s = S(policy: Self.policy())
        _ = step(&s, .add(Self.ticket(1), .suspended))
        _ = step(&s, .resume(1))
        _ = step(&s, .loginTimedOut(1, attempt: 1))
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 1, .failure(PorterError(.userCancelledAuthentication, "x")))),
                       ["end(1,userAuthenticationRequired)"])
        // A timed-out login of an earlier attempt does not touch the next one.
        _ = step(&s, .add(Self.ticket(2), .suspended))
        _ = step(&s, .resume(2))
        _ = step(&s, .attemptEnded(2, attempt: 1, .failure(lost)), at: 1)
        _ = step(&s, .timerFired(2, at: 2), at: 2)
        _ = step(&s, .loginTimedOut(2, attempt: 1))
        XCTAssertEqual(step(&s, .attemptEnded(2, attempt: 2, .failure(PorterError(.userCancelledAuthentication, "x")))),
                       ["end(2,userCancelledAuthentication)"])
    }

    func testStaleReportsOfAnEarlierAttemptAreDropped() {
        var s = S(policy: Self.policy())
        _ = step(&s, .add(Self.ticket(1), .suspended))
        _ = step(&s, .resume(1))
        _ = step(&s, .attemptEnded(1, attempt: 1, .failure(lost)), at: 1)
        _ = step(&s, .timerFired(1, at: 2), at: 2)
        XCTAssertEqual(attempt(s, 1), 2)
        for e: S.Event in [.attemptEnded(1, attempt: 1, .success), .writeFailed(1, attempt: 1, notFound),
                           .resourceChanged(1, attempt: 1), .startFailed(1, attempt: 1, notFound)] {
            XCTAssertEqual(step(&s, e), [], "\(e)")
        }
        XCTAssertEqual(s.phase(of: 1), .running(S.Attempt(number: 2)))
    }

    /// A job the scheduler holds is one compact record (at most 64 bytes; it was 128 with
    /// the ticket's strings and optionals): its session and host are a place shared with
    /// the other jobs there, forgotten with the last of them. Its ticket reads back as it
    /// was given, and as its attempts changed it.
    func testAJobIsOneCompactRecordAndItsTicketReadsBack() {
        XCTAssertLessThanOrEqual(MemoryLayout<S.Job>.stride, 64)
        var s = S(policy: Self.policy())
        let given = S.Ticket(id: 7, session: "x", host: "h.example", priority: 0.9, discretionary: true,
                             earliestBegin: 500, retries: 3, firstAttempt: 42)
        _ = step(&s, .add(given, .suspended))
        XCTAssertEqual(s.ticket(of: 7), given)
        XCTAssertEqual(s.session(of: 7), "x")
        _ = step(&s, .add(Self.ticket(8, session: "x", host: "h.example"), .suspended))
        _ = step(&s, .add(Self.ticket(9, session: "y", host: "h.example"), .suspended))
        XCTAssertEqual(s.placesInUse, 2, "x and y at h.example")
        XCTAssertEqual(step(&s, .resume(9), at: 10), ["recordRunning(9)", "start(9#1)"])
        _ = step(&s, .attemptEnded(9, attempt: 1, .failure(PorterError(.cannotConnectToHost, "refused"))), at: 11)
        XCTAssertEqual(s.ticket(of: 9)?.retries, 1)
        XCTAssertEqual(s.ticket(of: 9)?.firstAttempt, 10)
        XCTAssertNil(s.ticket(of: 9)?.earliestBegin)
        for id in [7, 8, 9] { _ = step(&s, .cancel(id, resumeData: false), at: 12) }
        XCTAssertEqual(s.placesInUse, 0)
        XCTAssertNil(s.ticket(of: 7))
        // A place is reused, not grown, by the next jobs.
        _ = step(&s, .add(Self.ticket(10, session: "z", host: "q.example"), .suspended))
        XCTAssertEqual(s.placesInUse, 1)
        XCTAssertEqual(s.session(of: 10), "z")
    }

    /// A host that refuses (or cannot be found) is down: its queue waits with a back-off
    /// of its own (1 s, 2 s, ...; the attempts that failed beside the first do not add to
    /// it), then tries one job at a time, and is up again at the first answer. Ten thousand
    /// tasks for a dead host no longer fail in turn as fast as porterd can start them (a
    /// retry storm that kept porterd busy and slowed every list); each job still keeps its
    /// own retries and back-off, and the queue its order.
    func testADownHostsQueueWaitsWithItsOwnBackoffThenTriesOneJobAtATime() {
        var s = S(policy: Self.policy())
        let refused = PorterError(.cannotConnectToHost, "refused")
        for id in 1...10 { _ = step(&s, .add(Self.ticket(id), .suspended)) }
        var starts: [String] = []
        for id in 1...10 { starts += started(step(&s, .resume(id), at: 0)) }
        XCTAssertEqual(starts, (1...6).map { "start(\($0)#1)" })
        XCTAssertEqual(step(&s, .attemptEnded(1, attempt: 1, .failure(refused)), at: 0.5),
                       ["keepBytes(1)", "retryLater(1,cannotConnectToHost,#1@1.5)", "timer(1@1.5)", "timer(-1@1.5)"],
                       "its own retry, and the host's wait: job 7 does not start")
        for id in 2...6 { XCTAssertEqual(started(step(&s, .attemptEnded(id, attempt: 1, .failure(refused)), at: 0.5)), []) }
        XCTAssertEqual(s.downHosts["a.example"], S.HostWait(until: 1.5, failures: 1), "once for the six that failed together")
        // The wait ends: one job, the queue's first.
        XCTAssertEqual(step(&s, .timerFired(S.admissionTimer, at: 1.5), at: 1.5), ["start(7#1)"])
        for id in 1...6 { XCTAssertEqual(started(step(&s, .timerFired(id, at: 1.5), at: 1.5)), [], "job \(id)'s retry waits its turn") }
        XCTAssertEqual(step(&s, .attemptEnded(7, attempt: 1, .failure(refused)), at: 2),
                       ["keepBytes(7)", "retryLater(7,cannotConnectToHost,#1@3)", "timer(7@3)", "timer(-1@4)"], "the host waits 2 s now")
        XCTAssertEqual(started(step(&s, .timerFired(7, at: 3), at: 3)), [])
        XCTAssertEqual(step(&s, .timerFired(S.admissionTimer, at: 4), at: 4), ["start(8#1)"])
        // An answer: the host is up, its queue goes on in order, six at a time.
        XCTAssertEqual(started(step(&s, .attemptEnded(8, attempt: 1, .success), at: 5)),
                       ["start(9#1)", "start(10#1)", "start(1#2)", "start(2#2)", "start(3#2)", "start(4#2)"])
        XCTAssertNil(s.downHosts["a.example"])
        // Another host is not held up by a down one; a network change ends every wait.
        _ = step(&s, .add(Self.ticket(20, host: "b.example"), .suspended))
        _ = step(&s, .attemptEnded(9, attempt: 1, .failure(refused)), at: 6)
        XCTAssertNotNil(s.downHosts["a.example"])
        XCTAssertEqual(started(step(&s, .resume(20), at: 6)), ["start(20#1)"])
        _ = step(&s, .networkChanged, at: 6.5)
        XCTAssertNil(s.downHosts["a.example"])
    }

    /// A down host whose tasks are all gone is forgotten once its wait is over: a
    /// long-lived porterd does not keep an entry for every dead host it ever saw.
    func testADownHostWithNothingLeftIsForgotten() {
        var s = S(policy: Self.policy())
        let refused = PorterError(.cannotConnectToHost, "refused")
        _ = step(&s, .add(Self.ticket(1), .suspended))
        XCTAssertEqual(started(step(&s, .resume(1), at: 0)), ["start(1#1)"])
        _ = step(&s, .attemptEnded(1, attempt: 1, .failure(refused)), at: 0.5)
        XCTAssertNotNil(s.downHosts["a.example"])
        _ = step(&s, .cancel(1, resumeData: false), at: 0.6)
        XCTAssertNotNil(s.downHosts["a.example"], "its wait is not over yet")
        _ = step(&s, .timerFired(S.admissionTimer, at: 1.5), at: 1.5)
        XCTAssertNil(s.downHosts["a.example"], "nothing runs or waits there any more")
    }

    func testTheJournalsJobsContinueAfterARestart() {
        var s = S(policy: Self.policy())
        XCTAssertEqual(step(&s, .add(Self.ticket(1), .running(nextAttempt: nil)), at: 100), ["start(1#1)"])
        XCTAssertEqual(step(&s, .add(Self.ticket(2), .running(nextAttempt: 150)), at: 100), ["timer(2@150)"])
        XCTAssertEqual(step(&s, .add(Self.ticket(3), .running(nextAttempt: 50)), at: 100), ["start(3#1)"], "its time passed")
        XCTAssertEqual(step(&s, .add(Self.ticket(4, earliestBegin: 300), .running(nextAttempt: nil)), at: 100), ["timer(4@300)"])
        XCTAssertEqual(step(&s, .add(Self.ticket(5), .suspended), at: 100), [])
        XCTAssertEqual(step(&s, .add(Self.ticket(1), .suspended), at: 100), [], "a job is added once")
    }

    /// Ten thousand queued jobs: each resume and each end costs the same whatever the
    /// queue's length (the admission stops at the first full limit), so this finishes in
    /// well under a second even in a debug build. No time is asserted: a quadratic
    /// admission would show as a slow test, not a failure under load.
    func testTenThousandJobsDrainInOrderWithinTheLimits() {
        var s = S(policy: Self.policy())
        var order: [Int] = []
        for id in 1...10_000 {
            _ = s.handle(.add(Self.ticket(id), .suspended), now: 0)
            for case .start(let started, _, _) in s.handle(.resume(id), now: 0) { order.append(started) }
        }
        var i = 0
        while i < order.count {
            XCTAssertLessThanOrEqual(s.activeByHost["a.example"] ?? 0, 6)
            for case .start(let started, _, _) in s.handle(.attemptEnded(order[i], attempt: 1, .success), now: 1) { order.append(started) }
            i += 1
        }
        XCTAssertEqual(order, Array(1...10_000))
        XCTAssertEqual(s.activeByHost, [:])
        XCTAssertTrue(s.jobs.isEmpty)
    }
}
