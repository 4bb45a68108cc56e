import PorterCore

/// porterd's jobs, decided in one place: the queues (per session and host, by priority),
/// the limits, earliest-begin dates, back-off and retries, and each job's life cycle from
/// `add` to its one end. A value without I/O or clocks (AsyncHTTPClient's
/// `HTTPConnectionPool+StateMachine` is the model): an event goes in with the time, actions
/// come out, and the daemon's job runner (`Daemon+Jobs.swift`) only performs them — opens
/// and syncs the partial file, starts and cancels the engine's task, schedules timers,
/// writes the journal, tells the holder.
///
/// The scheduler and the job life cycle are one machine, not two: a slot is released
/// exactly when an attempt ends, a resume lands in a queue, a timer's end is an admission,
/// and two machines would each have to keep the other's copy of those facts in step (the
/// flags this replaces were such copies). Each job's state is one `Phase` with its
/// payload; an ended job is forgotten, so any later event about it does nothing.
struct JobScheduler {
    struct Policy: Sendable {
        /// Attempts at once per session and per host (a slow host does not hold up another's
        /// tasks); discretionary jobs run one at a time per session.
        var perSession = 8
        var perHost = 6
        /// A job retries network failures while its first attempt is younger than this.
        var resourceTimeout: Double = 7 * 24 * 3600
        /// How long a login waits for an app (for the error a timed-out login ends with).
        var challengeWait: Double = 300
        /// Errors retried: the network's, not the resource's.
        var retryable: Set<PorterError.Code> = [.timedOut, .cannotFindHost, .cannotConnectToHost, .networkConnectionLost]
        /// Errors that say a host is down (nothing answered): its queue waits with a back-off
        /// of its own, then tries one job at a time until something answers, instead of
        /// every job of the host failing in turn as fast as the daemon can start them.
        var hostDown: Set<PorterError.Code> = [.cannotConnectToHost, .cannotFindHost]
        /// The jitter factor (0.8 ... 1.2) of a job's nth retry; injected so tests are exact.
        var jitter: @Sendable (_ job: Int, _ retry: Int) -> Double = { _, _ in Double.random(in: 0.8...1.2) }
    }

    /// What the scheduler knows of a job (from its spec and journal row).
    struct Ticket: Sendable, Equatable {
        var id: Int
        var session: String
        /// The server: the URL's host, and its port when it names one (`Daemon.server(of:)`).
        var host: String
        var priority: Float = 0.5
        var discretionary = false
        var earliestBegin: Double?
        var retries = 0
        var firstAttempt: Double?
    }

    /// One attempt (one engine task) of a job; `number` drops a stale report.
    struct Attempt: Sendable, Equatable {
        var number: Int
        /// No app answered a login in time: a cancelled login ends as userAuthenticationRequired.
        var loginTimedOut = false
    }

    /// Why a running attempt was asked to stop; what happens when it has ended.
    enum Stop: Sendable, Equatable {
        /// The job is suspended: keep the synced bytes.
        case suspend
        /// Start a new attempt (resumed before a suspend's stop ended, or the resource changed).
        case restart
        /// The job ends cancelled (with resume data when asked).
        case cancel(resumeData: Bool)
        /// The job ends with this error (the partial file could not be written). Boxed:
        /// every waiting job's phase would otherwise be the size of an error.
        indirect case fail(PorterError)

        static func == (a: Stop, b: Stop) -> Bool {
            switch (a, b) {
            case (.suspend, .suspend), (.restart, .restart): return true
            case (.cancel(let x), .cancel(let y)): return x == y
            case (.fail(let x), .fail(let y)): return x.code == y.code && x.message == y.message
            default: return false
            }
        }
    }

    /// A job's state; illegal combinations (a retry timer while an attempt runs, a stop
    /// reason without an attempt) cannot be written.
    enum Phase: Sendable, Equatable {
        case suspended
        /// Resumed, waiting for its earliest-begin date (a timer is set).
        case waitingToBegin(at: Double)
        /// Waiting in its session's and host's queue for a slot.
        case queued
        case running(Attempt)
        /// The attempt was cancelled; its end decides what follows.
        case stopping(Attempt, for: Stop)
        /// A network failure: the next attempt at `at` (a timer is set), or at once when
        /// the network changes.
        case waitingToRetry(at: Double)
    }

    /// How a job arrives: a new task (suspended, as a URLSession task starts), or one the
    /// journal had (after a restart of the daemon).
    enum Arrival: Sendable, Equatable {
        case suspended
        case running(nextAttempt: Double?)
    }

    /// What the engine's task ended with; the scheduler decides what it means (a retry,
    /// the job's end, or nothing but a stop the job asked for).
    enum Outcome: Sendable {
        case success
        case failure(PorterError)
    }

    enum Event: Sendable {
        case add(Ticket, Arrival)
        case resume(Int)
        case suspend(Int)
        case cancel(Int, resumeData: Bool)
        case attemptEnded(Int, attempt: Int, Outcome)
        /// The attempt could not start (no partial file); it never ran.
        case startFailed(Int, attempt: Int, PorterError)
        /// The partial file could not be written: the job ends with `error` once the attempt has.
        case writeFailed(Int, attempt: Int, PorterError)
        /// A 206 of another version: the attempt is cancelled (none of it is written) and
        /// the job starts again without a range.
        case resourceChanged(Int, attempt: Int)
        case loginTimedOut(Int, attempt: Int)
        case timerFired(Int, at: Double)
        /// A link, an address or a route appeared: jobs waiting to retry try at once.
        case networkChanged
        case reschedule(Int, priority: Float, earliestBegin: Double?)
    }

    /// How a job ends (exactly once).
    enum End: Sendable {
        /// The last attempt's own outcome: nil is success (the response's status is kept).
        case outcome(PorterError?)
        case cancelled(resumeData: Bool)
        /// Ended by porterd itself (the partial file), without a status.
        case failed(PorterError)
    }

    enum Action: Sendable {
        /// Open the partial file and start attempt `attempt` (journal: running, first attempt at `firstAttempt`).
        case start(Int, attempt: Int, firstAttempt: Double)
        case cancelAttempt(Int)
        case scheduleTimer(Int, at: Double)
        case cancelTimer(Int)
        /// Journal: suspended, with the synced count.
        case recordSuspended(Int)
        /// Journal: running again (the job was resumed).
        case recordRunning(Int)
        /// The attempt is over: sync and close the partial file, keeping its bytes.
        case keepBytes(Int)
        /// Journal the failure and the next attempt's time (retry number `retries`).
        case retryLater(Int, error: PorterError, retries: Int, at: Double, delay: Double)
        /// The wait is over: forget the last error and the next-attempt time.
        case clearRetry(Int)
        case end(Int, End)
    }

    /// What the scheduler keeps of every job it holds, waiting or not: ten thousand queued
    /// jobs are ten thousand of these (64 bytes each), their rows stay in the journal.
    /// The session and host are one shared `Place`; times are NaN when there is none (an
    /// optional Double takes 16 bytes here).
    struct Job: Sendable {
        var place: Int32
        var retries: Int32
        var attempts: Int32 = 0
        var priority: Float
        var discretionary: Bool
        /// Its id is in its queue (perhaps stale: dropped when admission reaches it).
        var listed = false
        private var begin: Double
        private var first: Double
        var phase: Phase

        init(_ t: Ticket, place: Int32) {
            self.place = place
            retries = Int32(clamping: t.retries)
            priority = t.priority
            discretionary = t.discretionary
            begin = t.earliestBegin ?? .nan
            first = t.firstAttempt ?? .nan
            phase = .suspended
        }

        var earliestBegin: Double? {
            get { begin.isNaN ? nil : begin }
            set { begin = newValue ?? .nan }
        }
        var firstAttempt: Double? {
            get { first.isNaN ? nil : first }
            set { first = newValue ?? .nan }
        }
    }

    /// A session and host, shared by the jobs that queue there (`uses` of them).
    private struct Place: Sendable {
        var session: String
        var host: String
        var uses: Int
    }

    private struct Entry: Sendable {
        var id: Int
        var priority: Float
    }

    /// A host that is down (`Policy.hostDown`): no attempt starts there before `until`,
    /// then one at a time, until an attempt there gets an answer.
    struct HostWait: Sendable, Equatable {
        var until: Double
        var failures: Int
    }

    /// The id of the scheduler's own timer (a down host's wait ends), never a job's.
    static let admissionTimer = -1

    let policy: Policy
    private(set) var jobs: [Int: Job] = [:]
    private(set) var downHosts: [String: HostWait] = [:]
    /// When the admission timer is set for (nil: not set).
    private var admissionAt: Double?
    private var places: [Place] = []
    private var placeIndex: [String: [String: Int32]] = [:]
    /// Places no job uses any more, for reuse.
    private var freePlaces: [Int32] = []
    /// Per session, per host: ids by priority (higher first; equal ones in arrival order).
    private var waiting: [String: [String: [Entry]]] = [:]
    private(set) var activeBySession: [String: Int] = [:]
    private(set) var activeByHost: [String: Int] = [:]
    private(set) var activeDiscretionary: [String: Int] = [:]

    init(policy: Policy = Policy()) { self.policy = policy }

    func phase(of id: Int) -> Phase? { jobs[id]?.phase }

    /// The session of a job the scheduler holds.
    func session(of id: Int) -> String? { jobs[id].map { places[Int($0.place)].session } }

    /// The job as its ticket says (with its retries and first attempt as they are now).
    func ticket(of id: Int) -> Ticket? {
        guard let job = jobs[id] else { return nil }
        let p = places[Int(job.place)]
        return Ticket(id: id, session: p.session, host: p.host, priority: job.priority, discretionary: job.discretionary,
                      earliestBegin: job.earliestBegin, retries: Int(job.retries), firstAttempt: job.firstAttempt)
    }

    /// The sessions and hosts with jobs (a place is forgotten with its last job).
    var placesInUse: Int { places.count - freePlaces.count }

    private mutating func enter(_ session: String, _ host: String) -> Int32 {
        if let i = placeIndex[session]?[host] {
            places[Int(i)].uses += 1
            return i
        }
        let place = Place(session: session, host: host, uses: 1)
        let i: Int32
        if let free = freePlaces.popLast() {
            i = free
            places[Int(i)] = place
        } else {
            i = Int32(places.count)
            places.append(place)
        }
        placeIndex[session, default: [:]][host] = i
        return i
    }

    private mutating func leave(_ i: Int32) {
        places[Int(i)].uses -= 1
        guard places[Int(i)].uses == 0 else { return }
        let p = places[Int(i)]
        placeIndex[p.session]?[p.host] = nil
        if placeIndex[p.session]?.isEmpty == true { placeIndex[p.session] = nil }
        places[Int(i)] = Place(session: "", host: "", uses: 0)
        freePlaces.append(i)
    }

    /// The delay before retry number `retries` (1, 2, ...): 1 s, 2 s, 4 s ... at most
    /// 5 minutes, times the jitter factor.
    static func backoff(retries: Int, jitter: Double) -> Double {
        min(300, Double(1 << max(0, min(retries - 1, 9)))) * jitter
    }

    mutating func handle(_ event: Event, now: Double) -> [Action] {
        var out: [Action] = []
        switch event {
        case .add(let ticket, let arrival):
            guard jobs[ticket.id] == nil else { break }
            jobs[ticket.id] = Job(ticket, place: enter(ticket.session, ticket.host))
            if case .running(let next) = arrival {
                if let next, next > now {
                    jobs[ticket.id]!.phase = .waitingToRetry(at: next)
                    out.append(.scheduleTimer(ticket.id, at: next))
                } else {
                    admit(ticket.id, now: now, into: &out)
                }
            }

        case .resume(let id):
            guard let job = jobs[id] else { break }
            switch job.phase {
            case .suspended:
                out.append(.recordRunning(id))
                admit(id, now: now, into: &out)
            case .stopping(let a, .suspend):
                // Resumed before the suspend's stop ended: a new attempt follows it.
                jobs[id]!.phase = .stopping(a, for: .restart)
                out.append(.recordRunning(id))
            default:
                break
            }

        case .suspend(let id):
            guard let job = jobs[id] else { break }
            switch job.phase {
            case .running(let a):
                // The attempt stops (its slot goes to a waiting job); a resume starts a new
                // one with a Range from the synced bytes.
                jobs[id]!.phase = .stopping(a, for: .suspend)
                out += [.recordSuspended(id), .cancelAttempt(id)]
            case .stopping(let a, .restart):
                jobs[id]!.phase = .stopping(a, for: .suspend)
                out.append(.recordSuspended(id))
            case .queued:
                jobs[id]!.phase = .suspended
                out.append(.recordSuspended(id))
            case .waitingToBegin, .waitingToRetry:
                jobs[id]!.phase = .suspended
                out += [.cancelTimer(id), .recordSuspended(id)]
            case .suspended, .stopping:
                break
            }

        case .cancel(let id, let resumeData):
            guard let job = jobs[id] else { break }
            switch job.phase {
            case .running(let a):
                jobs[id]!.phase = .stopping(a, for: .cancel(resumeData: resumeData))
                out.append(.cancelAttempt(id))
            case .stopping(_, .fail):
                break  // it ends with its failure
            case .stopping(let a, _):
                // Asked to end: it ends when the attempt has, whatever that attempt's outcome.
                jobs[id]!.phase = .stopping(a, for: .cancel(resumeData: resumeData))
            case .waitingToBegin, .waitingToRetry:
                out.append(.cancelTimer(id))
                end(id, .cancelled(resumeData: resumeData), into: &out)
            case .suspended, .queued:
                end(id, .cancelled(resumeData: resumeData), into: &out)
            }

        case .attemptEnded(let id, let number, let outcome):
            guard let job = jobs[id], case let (a, stop)? = job.attempt, a.number == number else { break }
            release(job)
            hostAnswered(places[Int(job.place)].host, outcome, now: now)
            switch stop {
            case nil:
                switch outcome {
                case .success:
                    end(id, .outcome(nil), into: &out)
                case .failure(var error):
                    if a.loginTimedOut, error.code == .userCancelledAuthentication {
                        error = PorterError(.userAuthenticationRequired,
                                            "the server asked for a login that the credential store does not have, and no app answered it in \(Int(policy.challengeWait)) s",
                                            url: error.url)
                    }
                    if policy.retryable.contains(error.code), now - (job.firstAttempt ?? now) < policy.resourceTimeout {
                        let retries = Int(job.retries) + 1
                        let delay = JobScheduler.backoff(retries: retries, jitter: policy.jitter(id, retries))
                        jobs[id]!.retries = Int32(clamping: retries)
                        jobs[id]!.phase = .waitingToRetry(at: now + delay)
                        out += [.keepBytes(id), .retryLater(id, error: error, retries: retries, at: now + delay, delay: delay),
                                .scheduleTimer(id, at: now + delay)]
                    } else {
                        end(id, .outcome(error), into: &out)
                    }
                }
            case .suspend?:
                jobs[id]!.phase = .suspended
                out.append(.keepBytes(id))
            case .restart?:
                out.append(.keepBytes(id))
                admit(id, now: now, into: &out)
            case .cancel(let resumeData)?:
                end(id, .cancelled(resumeData: resumeData), into: &out)
            case .fail(let error)?:
                end(id, .failed(error), into: &out)
            }
            admitQueued(now: now, into: &out)

        case .startFailed(let id, let number, let error):
            guard let job = jobs[id], case let (a, _)? = job.attempt, a.number == number else { break }
            release(job)
            end(id, .failed(error), into: &out)
            admitQueued(now: now, into: &out)

        case .writeFailed(let id, let number, let error):
            guard let job = jobs[id], case let (a, stop)? = job.attempt, a.number == number else { break }
            switch stop {
            case nil:
                jobs[id]!.phase = .stopping(a, for: .fail(error))
                out.append(.cancelAttempt(id))
            case .fail?:
                break
            case .suspend?, .restart?, .cancel?:
                jobs[id]!.phase = .stopping(a, for: .fail(error))
            }

        case .resourceChanged(let id, let number):
            guard let job = jobs[id], case .running(let a) = job.phase, a.number == number else { break }
            jobs[id]!.phase = .stopping(a, for: .restart)
            out.append(.cancelAttempt(id))

        case .loginTimedOut(let id, let number):
            guard let job = jobs[id], case let (a, stop)? = job.attempt, a.number == number else { break }
            var timedOut = a
            timedOut.loginTimedOut = true
            jobs[id]!.phase = stop.map { .stopping(timedOut, for: $0) } ?? .running(timedOut)

        case .timerFired(let id, let at):
            if id == JobScheduler.admissionTimer {
                admissionAt = nil
                admitQueued(now: now, into: &out)
                break
            }
            guard let job = jobs[id] else { break }
            switch job.phase {
            case .waitingToBegin(at), .waitingToRetry(at):
                out.append(.clearRetry(id))
                admit(id, now: now, into: &out)
            default:
                break  // a timer of an earlier wait
            }

        case .networkChanged:
            downHosts.removeAll()
            let waitingToRetry = jobs.filter {
                if case .waitingToRetry = $0.value.phase { return true }
                return false
            }.map(\.key).sorted()
            for id in waitingToRetry {
                out += [.cancelTimer(id), .clearRetry(id)]
                admit(id, now: now, into: &out)
            }
            admitQueued(now: now, into: &out)

        case .reschedule(let id, let priority, let earliestBegin):
            guard var job = jobs[id] else { break }
            job.earliestBegin = earliestBegin
            let moved = job.priority != priority
            job.priority = priority
            jobs[id] = job
            if moved, job.listed { reposition(id, job) }
        }
        return out
    }

    /// The job goes to its queue (or waits for its earliest begin), and admission runs.
    private mutating func admit(_ id: Int, now: Double, into out: inout [Action]) {
        guard let job = jobs[id] else { return }
        if let begin = job.earliestBegin, begin > now {
            jobs[id]!.phase = .waitingToBegin(at: begin)
            out.append(.scheduleTimer(id, at: begin))
            return
        }
        jobs[id]!.phase = .queued
        if !job.listed {
            jobs[id]!.listed = true
            let p = places[Int(job.place)]
            // Taken out of the tables while it changes, so the insert happens in place.
            var hosts = waiting.removeValue(forKey: p.session) ?? [:]
            var queue = hosts.removeValue(forKey: p.host) ?? []
            // Behind every entry of its priority or higher: equal priorities keep their order.
            var low = queue.startIndex, high = queue.endIndex
            while low < high {
                let mid = (low + high) / 2
                if queue[mid].priority >= job.priority { low = mid + 1 } else { high = mid }
            }
            queue.insert(Entry(id: id, priority: job.priority), at: low)
            hosts[p.host] = queue
            waiting[p.session] = hosts
        }
        admitQueued(now: now, into: &out)
    }

    /// A listed job's priority changed: its queue is sorted again (stable).
    private mutating func reposition(_ id: Int, _ job: Job) {
        let p = places[Int(job.place)]
        guard var queue = waiting[p.session]?[p.host] else { return }
        for i in queue.indices where queue[i].id == id { queue[i].priority = job.priority }
        queue = queue.enumerated().sorted { $0.element.priority != $1.element.priority
            ? $0.element.priority > $1.element.priority : $0.offset < $1.offset }.map(\.element)
        waiting[p.session]![p.host] = queue
    }

    /// Starts queued jobs while the limits allow; the work is bounded by the number of
    /// sessions and hosts with jobs waiting, not by the number of jobs (it stops at the
    /// first full limit: a long queue costs nothing while it waits).
    private mutating func admitQueued(now: Double, into out: inout [Action]) {
        var wake: Double?
        for session in Array(waiting.keys) {
            guard var hosts = waiting[session] else { continue }
            for host in Array(hosts.keys) {
                guard let entries = hosts[host], !entries.isEmpty else { continue }
                var perHost = policy.perHost
                if let down = downHosts[host] {
                    if now < down.until {
                        wake = min(wake ?? down.until, down.until)
                        continue
                    }
                    perHost = 1
                }
                var kept: [Entry] = []
                var i = 0
                while i < entries.count, activeBySession[session, default: 0] < policy.perSession,
                      activeByHost[host, default: 0] < perHost {
                    let entry = entries[i]
                    i += 1
                    guard let job = jobs[entry.id] else { continue }  // ended
                    guard job.phase == .queued else {
                        jobs[entry.id]!.listed = false  // stale: suspended or started since
                        continue
                    }
                    if job.discretionary, activeDiscretionary[session, default: 0] > 0 {
                        kept.append(entry)
                        continue
                    }
                    jobs[entry.id]!.listed = false
                    start(entry.id, now: now, into: &out)
                }
                if i == 0 { continue }
                kept.append(contentsOf: entries[i...])
                hosts[host] = kept.isEmpty ? nil : kept
            }
            waiting[session] = hosts.isEmpty ? nil : hosts
        }
        // A down host nobody is running or queueing for any more is forgotten once its
        // wait is over (else each dead host:port would stay for porterd's life).
        for (host, down) in downHosts where down.until <= now && activeByHost[host, default: 0] == 0
            && !waiting.values.contains(where: { $0[host] != nil }) {
            downHosts[host] = nil
        }
        // A down host's queue goes on when its wait ends.
        if let wake, admissionAt.map({ wake < $0 }) ?? true {
            admissionAt = wake
            out.append(.scheduleTimer(JobScheduler.admissionTimer, at: wake))
        }
    }

    /// An attempt at `host` ended: a failure that says the host is down makes the host's
    /// queue wait (once per wait: the attempts that ran beside it fail alike), with the
    /// retries' back-off; an answer (success, or an error from the server or the resource)
    /// ends the wait. A cancelled attempt says nothing.
    private mutating func hostAnswered(_ host: String, _ outcome: Outcome, now: Double) {
        switch outcome {
        case .success:
            downHosts[host] = nil
        case .failure(let error) where policy.hostDown.contains(error.code):
            var down = downHosts[host] ?? HostWait(until: now, failures: 0)
            guard now >= down.until else { return }
            down.failures += 1
            down.until = now + JobScheduler.backoff(retries: down.failures, jitter: 1)
            downHosts[host] = down
        case .failure(let error) where policy.retryable.contains(error.code) || error.code == .cancelled
            || error.code == .userCancelledAuthentication:
            break
        case .failure:
            downHosts[host] = nil
        }
    }

    private mutating func start(_ id: Int, now: Double, into out: inout [Action]) {
        var job = jobs[id]!
        job.attempts += 1
        let first = job.firstAttempt ?? now
        job.firstAttempt = first
        job.phase = .running(Attempt(number: Int(job.attempts)))
        jobs[id] = job
        let p = places[Int(job.place)]
        activeBySession[p.session, default: 0] += 1
        activeByHost[p.host, default: 0] += 1
        if job.discretionary { activeDiscretionary[p.session, default: 0] += 1 }
        out.append(.start(id, attempt: Int(job.attempts), firstAttempt: first))
    }

    /// The attempt's slot is free again.
    private mutating func release(_ job: Job) {
        let t = places[Int(job.place)]
        activeBySession[t.session, default: 0] -= 1
        if activeBySession[t.session] == 0 { activeBySession[t.session] = nil }
        activeByHost[t.host, default: 0] -= 1
        if activeByHost[t.host] == 0 { activeByHost[t.host] = nil }
        if job.discretionary {
            activeDiscretionary[t.session, default: 0] -= 1
            if activeDiscretionary[t.session] == 0 { activeDiscretionary[t.session] = nil }
        }
    }

    /// The job's one end: it is forgotten, so nothing about it happens after.
    private mutating func end(_ id: Int, _ how: End, into out: inout [Action]) {
        if let job = jobs.removeValue(forKey: id) { leave(job.place) }
        out.append(.end(id, how))
    }
}

extension JobScheduler.Job {
    /// The live attempt and why it is stopping (nil: it runs), if there is one.
    var attempt: (JobScheduler.Attempt, JobScheduler.Stop?)? {
        switch phase {
        case .running(let a): return (a, nil)
        case .stopping(let a, let why): return (a, why)
        default: return nil
        }
    }
}
