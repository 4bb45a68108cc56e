import CPorterIPC
import Foundation
import Porter
import PorterCore
import PorterIPC
import PorterSession

// The job runner: the shell that performs what `JobScheduler` decides (the partial file,
// the engine's tasks, timers, the journal) and feeds it the engine's reports.
extension Daemon {
    /// A running attempt's I/O: its journal row, engine task and partial file. Whether it
    /// runs, waits or ends is `JobScheduler`'s, never decided here. Made from the journal
    /// when an attempt starts and dropped when it has ended: a job that waits (in its
    /// queue, for its earliest begin, to retry) is only its scheduler ticket in memory.
    /// Confined to `queue` (a sync callback captures one only to hop back onto it).
    final class Transfer: @unchecked Sendable {
        var row: Journal.Task
        var task: DataTask?
        var fd: Int32 = -1
        var sinceCheckpoint: Int64 = 0
        /// Bytes up to which writeback was started.
        var writebackFrom: Int64 = 0
        var lastCheckpoint = Date()
        var lastUpdate = Date.distantPast
        /// The attempt this transfer runs (the scheduler's number: a stale report is dropped).
        var attempt = 0
        /// A background sync of the partial file is under way.
        var syncing = false
        /// Bumped when the partial file starts over (a sync begun before must not record
        /// its count then).
        var epoch = 0
        init(_ row: Journal.Task) { self.row = row }
    }

    // MARK: - the scheduler's shell

    /// The server a job's attempts go to, as the scheduler groups them: the URL's host,
    /// and its port when it names one (a port that refuses says nothing of another
    /// service on the same host, whose queue must not wait for it).
    static func server(of url: URL) -> String {
        let host = url.host ?? ""
        return url.port.map { "\(host):\($0)" } ?? host
    }

    /// What the scheduler knows of a job.
    static func ticket(_ row: Journal.Task) -> JobScheduler.Ticket {
        JobScheduler.Ticket(id: row.id, session: row.session, host: Daemon.server(of: row.spec.url), priority: row.spec.priority ?? 0.5,
                            discretionary: row.spec.isDiscretionary == true, earliestBegin: row.spec.earliestBegin,
                            retries: row.retries, firstAttempt: row.firstAttempt)
    }

    /// Hands an event to the scheduler and performs its actions. An event raised while
    /// actions are performed (a start that fails) waits its turn: the scheduler sees
    /// events one at a time, in order.
    func send(_ event: JobScheduler.Event) {
        pendingEvents.append(event)
        guard !performing else { return }
        performing = true
        defer { performing = false }
        var i = 0
        while i < pendingEvents.count {
            let e = pendingEvents[i]
            i += 1
            let actions = scheduler.handle(e, now: Date().timeIntervalSince1970)
            if case .networkChanged = e {
                let woken = actions.filter { if case .clearRetry = $0 { return true } else { return false } }.count
                if woken > 0 { note("the network changed: \(woken) waiting task(s) try again now") }
            }
            // An attempt that ends to retry keeps its bytes, then journals its whole row with
            // the retry: one write for both (ten thousand failing tasks retry at once).
            var retrying: Set<Int> = []
            for a in actions { if case .retryLater(let id, _, _, _, _) = a { retrying.insert(id) } }
            for a in actions {
                if case .keepBytes(let id) = a, retrying.contains(id), let t = transfers[id] {
                    syncFile(t)
                    closeFile(t)
                    continue
                }
                perform(a)
            }
            for a in actions { if case .keepBytes(let id) = a { release(id) } }
        }
        pendingEvents.removeAll(keepingCapacity: true)
        armTimer()
    }

    /// The attempt is over and the job waits (suspended, to retry, in its queue again):
    /// its row is in the journal, its transfer goes.
    func release(_ id: Int) {
        guard let t = transfers[id], t.task == nil, scheduler.jobs[id]?.attempt == nil,
              !pendingChallenges.values.contains(where: { $0.transfer === t }) else { return }
        closeFile(t)
        transfers[id] = nil
    }

    /// The job's row: its running transfer's, else the journal's.
    func row(_ id: Int) -> Journal.Task? { transfers[id]?.row ?? (try? journal.task(id)) }

    /// Changes the row of a job that is not running, in the journal (a running one's
    /// transfer holds it, and saves it at its checkpoints).
    func changeRow(_ id: Int, _ body: (inout Journal.Task) -> Void) {
        if let t = transfers[id] {
            body(&t.row)
            try? journal.save(t.row)
        } else {
            do { try journal.change(id, body) } catch { note("task \(id): the journal refused a change: \(error)") }
        }
    }

    // MARK: - timers

    /// One timer for every job's wait, set for the earliest deadline.
    func armTimer() {
        guard let at = deadlines.earliest() else {
            armedTimer?.cancel()
            armedTimer = nil
            armedAt = nil
            return
        }
        if let armedAt, armedAt <= at, armedTimer != nil { return }
        armedTimer?.cancel()
        let item = DispatchWorkItem { [weak self] in self?.timerFired() }
        armedTimer = item
        armedAt = at
        queue.asyncAfter(deadline: .now() + max(0, at - Date().timeIntervalSince1970), execute: item)
    }

    private func timerFired() {
        armedTimer = nil
        armedAt = nil
        let now = Date().timeIntervalSince1970
        let due = deadlines.popDue(now: now)
        for d in due { send(.timerFired(d.id, at: d.at)) }
        armTimer()
    }

    func perform(_ action: JobScheduler.Action) {
        switch action {
        case .start(let id, let attempt, let firstAttempt):
            // The row is read from the journal now: nothing of a waiting job but its
            // ticket is kept in memory.
            guard let row = row(id) else {
                return send(.startFailed(id, attempt: attempt, PorterError(.unknown, "the journal has no task \(id)")))
            }
            // A transfer kept from an earlier attempt may hold changes not yet journaled.
            let journaled = transfers[id] == nil ? row : nil
            let t = transfers[id] ?? Transfer(row)
            transfers[id] = t
            t.attempt = attempt
            t.row.firstAttempt = firstAttempt
            start(t, journaled: journaled)
        case .cancelAttempt(let id):
            transfers[id]?.task?.cancel()  // didCompleteWithError reports the attempt's end
        case .scheduleTimer(let id, let at):
            deadlines.set(id, at: at)
        case .cancelTimer(let id):
            deadlines.cancel(id)
        case .recordSuspended(let id):
            if let t = transfers[id] {
                t.row.state = "suspended"
                checkpoint(t)
                update(t, force: true)
            } else {
                do { try journal.setState(id, "suspended") } catch { note("task \(id): the journal refused a change: \(error)") }
                updateHolder(id)
            }
        case .recordRunning(let id):
            if transfers[id] != nil {
                changeRow(id) { $0.state = "running" }
            } else {
                do { try journal.setState(id, "running") } catch { note("task \(id): the journal refused a change: \(error)") }
            }
            updateHolder(id)
        case .keepBytes(let id):
            guard let t = transfers[id] else { return }
            checkpoint(t)
            closeFile(t)
        case .retryLater(let id, let error, let retries, let at, let delay):
            changeRow(id) {
                $0.retries = retries
                $0.nextAttempt = at
                $0.errorCode = String(error.code.rawValue)
                $0.errorMessage = error.message
            }
            note("task \(id): \(error.message); attempt \(retries + 1) in \(Int(delay.rounded())) s")
            updateHolder(id)
        case .clearRetry(let id):
            if transfers[id] != nil {
                changeRow(id) {
                    $0.nextAttempt = nil
                    $0.errorCode = nil
                    $0.errorMessage = nil
                }
            } else {
                do { try journal.clearRetry(id) } catch { note("task \(id): the journal refused a change: \(error)") }
            }
        case .end(let id, let how):
            deadlines.cancel(id)
            guard let row = row(id) else { return }
            let t = transfers[id] ?? Transfer(row)
            switch how {
            case .outcome(let error): end(t, error: error, status: t.row.statusCode)
            case .cancelled(resumeData: false): end(t, error: PorterError(.cancelled, "cancelled", url: t.row.spec.url), status: nil)
            case .cancelled(resumeData: true): endWithResumeData(t)
            case .failed(let error): end(t, error: error, status: nil)
            }
        }
    }

    /// The journal's unfinished jobs, after a restart: each continues where it was (its
    /// ticket goes to the scheduler; the row stays in the journal until an attempt starts).
    func resumeJournal() {
        let now = Date().timeIntervalSince1970
        // Read first, then handed to the scheduler (whose actions read the journal too).
        var arrivals: [(JobScheduler.Ticket, JobScheduler.Arrival)] = []
        try? journal.forEachTask { row in
            guard row.state == "running" || row.state == "suspended" else { return }
            guard row.state == "running" else { return arrivals.append((Daemon.ticket(row), .suspended)) }
            if row.received > 0, (row.nextAttempt ?? 0) <= now, (row.spec.earliestBegin ?? 0) <= now {
                note("task \(row.id): continuing after a restart from byte \(row.received)")
            }
            arrivals.append((Daemon.ticket(row), .running(nextAttempt: row.nextAttempt)))
        }
        for (ticket, arrival) in arrivals { send(.add(ticket, arrival)) }
    }

    /// Opens the partial file and starts the engine's task for the scheduler's attempt.
    /// `journaled`: the journal's row, when `t` was made from it for this attempt.
    func start(_ t: Transfer, journaled: Journal.Task?) {
        var request = Request(url: t.row.spec.url, method: t.row.spec.method)
        for pair in t.row.spec.headers where pair.count == 2 { _ = request.addValue(pair[1], forHeader: pair[0]) }
        for (key, value) in t.row.spec.properties ?? [:] { request.setProperty(value, forKey: key) }
        if t.row.spec.kind == .upload, let file = t.row.spec.uploadFile {
            request.body = .file(URL(fileURLWithPath: file))
        }
        guard let partial = t.row.partial else {
            return send(.startFailed(t.row.id, attempt: t.attempt, PorterError(.cannotCreateFile, "no partial file")))
        }
        // The journal's count is what was synced; anything past it may be torn: cut it.
        var flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW
        if t.row.received == 0 { flags |= O_TRUNC }
        t.fd = open(partial, flags, 0o600)
        guard t.fd >= 0 else {
            let failure = PorterError(.cannotCreateFile, "porterd cannot open \(partial)", cause: .errno(errno))
            return send(.startFailed(t.row.id, attempt: t.attempt, failure))
        }
        if t.row.received > 0 {
            var st = stat()
            if fstat(t.fd, &st) != 0 || Int64(st.st_size) < t.row.received || t.row.validator == nil {
                // The partial file lost bytes, or nothing can tell whether the resource
                // changed (a Range without If-Range could splice two versions): start over.
                t.row.received = 0
            }
            ftruncate(t.fd, off_t(t.row.received))
            lseek(t.fd, off_t(t.row.received), SEEK_SET)
            if t.row.received > 0 { request.resumeRange = ResumeRange(offset: t.row.received, validator: t.row.validator) }
            t.writebackFrom = t.row.received
        }
        // Journaled only when it changes the row (a retry's row already says running,
        // with no next attempt since the wait ended, and its first attempt).
        let unchanged = journaled.map {
            $0.state == "running" && $0.nextAttempt == nil && $0.received == t.row.received && $0.firstAttempt == t.row.firstAttempt
        } ?? false
        if !unchanged {
            t.row.state = "running"
            t.row.nextAttempt = nil
            try? journal.save(t.row)
        }
        let task = engine(for: t.row.spec.maximumBytesPerSecond).dataTask(with: request)
        t.task = task
        byTask[ObjectIdentifier(task)] = t
        task.resume()
        idleSince = nil
    }

    /// One engine session per bytes-per-second cap (the cap is a session setting).
    func engine(for cap: Int64?) -> Session {
        guard let cap, cap > 0 else { return engine }
        if let s = capped[cap] { return s }
        var config = engine.configuration
        config.maximumBytesPerSecond = cap
        let s = Session(configuration: config, delegate: self, delegateQueue: queue)
        capped[cap] = s
        return s
    }

    func transfer(_ task: SessionTask) -> Transfer? {
        byTask[ObjectIdentifier(task)].flatMap { transfers[$0.row.id] === $0 ? $0 : nil }
    }

    /// Syncs the partial file on another thread (the transfer does not wait for the
    /// disk), then records the count it had reached when the sync began: the journal's
    /// count is always bytes that are on disk.
    func progressCheckpoint(_ t: Transfer) {
        guard !t.syncing, t.fd >= 0 else { return }
        let fd = dup(t.fd)
        guard fd >= 0 else { return checkpoint(t) }
        t.syncing = true
        t.sinceCheckpoint = 0
        t.lastCheckpoint = Date()
        let count = t.row.received, epoch = t.epoch, attempt = t.attempt
        syncQueue.async {
            fdatasync(fd)
            close(fd)
            self.queue.async {
                t.syncing = false
                guard t.epoch == epoch, t.attempt == attempt, t.task != nil, t.row.state == "running", self.transfers[t.row.id] === t else { return }
                var row = t.row
                row.received = count
                try? self.journal.save(row)
            }
        }
    }

    /// Syncs the partial file, then records how much of it is good.
    func checkpoint(_ t: Transfer) {
        syncFile(t)
        try? journal.save(t.row)
    }

    /// Syncs the partial file's bytes (none to sync when it is empty: a journal that says
    /// 0 bytes is always true).
    func syncFile(_ t: Transfer) {
        if t.fd >= 0, t.row.received > 0 { fsync(t.fd) }
        t.sinceCheckpoint = 0
        t.lastCheckpoint = Date()
    }

    func update(_ t: Transfer, force: Bool = false) {
        guard let c = holders[t.row.session], force || Date().timeIntervalSince(t.lastUpdate) > 0.1 else { return }
        t.lastUpdate = Date()
        c.send(.update(t.row.snapshot()))
    }

    /// Tells the session's holder (if any) a job's state changed (resumed, suspended,
    /// waiting to retry): its task objects, and what it counts, follow porterd's word.
    func updateHolder(_ id: Int) {
        if let t = transfers[id] { return update(t, force: true) }
        guard let session = scheduler.session(of: id) ?? (try? journal.snapshot(id))?.session,
              let c = holders[session], let snapshot = (try? journal.snapshot(id)) ?? nil else { return }
        c.send(.update(snapshot))
    }

    public func dataTask(_ task: DataTask, didReceive response: Response,
                         completion: @escaping @Sendable (ResponseDisposition) -> Void) {
        guard let t = transfer(task) else { return completion(.cancel) }
        t.row.statusCode = response.statusCode
        // The one resume rule (ResumeCheck), as the in-process download task applies it.
        let asked = t.row.received > 0 ? ResumeRange(offset: t.row.received, validator: t.row.validator) : nil
        switch ResumeCheck.verdict(asked: asked, knownTotal: t.row.expected, response: response) {
        case .append:
            break  // 206 for the range asked, of the same version: the bytes append.
        case .startOver:
            // A full response (the server ignored the range, or the validator changed):
            // start the file over, never mix two versions.
            if t.row.received > 0 { note("task \(t.row.id): the server sent the whole resource again; starting the file over") }
            restartFile(t)
        case .mismatch(let why):
            // A part of another version (or range): none of it is written. The partial file
            // is dropped and the task starts again without a range.
            note("task \(t.row.id): \(why); starting over without a range")
            restartFile(t)
            t.row.validator = nil
            t.row.expected = -1
            checkpoint(t)
            send(.resourceChanged(t.row.id, attempt: t.attempt))  // cancels the attempt; the next follows
            return completion(.cancel)
        }
        t.row.validator = response.validator
        // A server's length is input: a sum that overflows is an unknown length, not a trap.
        let (total, overflow) = response.expectedContentLength.addingReportingOverflow(t.row.received)
        t.row.expected = response.expectedContentLength >= 0 && !overflow ? total : -1
        checkpoint(t)
        update(t, force: true)
        completion(.allow)
    }

    /// The partial file starts over from byte 0 (a sync begun before must not record its count).
    func restartFile(_ t: Transfer) {
        ftruncate(t.fd, 0)
        lseek(t.fd, 0, SEEK_SET)
        t.row.received = 0
        t.writebackFrom = 0
        t.epoch += 1
    }

    public func dataTask(_ task: DataTask, didReceive data: Data) {
        guard let t = transfer(task), t.fd >= 0 else { return }
        let ok = data.withUnsafeBytes { raw -> Bool in
            var off = 0
            while off < raw.count {
                let n = write(t.fd, raw.baseAddress! + off, raw.count - off)
                if n < 0 { if errno == EINTR { continue }; return false }
                off += n
            }
            return true
        }
        guard ok else {
            // Nothing more is written; the job ends with this error once the attempt has.
            let failure = PorterError(.cannotWriteToFile, "porterd cannot write the partial file", cause: .errno(errno))
            closeFile(t)
            return send(.writeFailed(t.row.id, attempt: t.attempt, failure))
        }
        t.row.received += Int64(data.count)
        t.sinceCheckpoint += Int64(data.count)
        // Let the disk keep up while bytes arrive (the end's sync then has little left):
        // start writeback of every 8 MiB, on the sync thread.
        if t.row.received - t.writebackFrom >= 8 << 20 {
            let from = t.writebackFrom, length = t.row.received - t.writebackFrom
            t.writebackFrom = t.row.received
            let fd = dup(t.fd)
            if fd >= 0 {
                syncQueue.async {
                    _ = porter_ipc_start_writeback(fd, from, length)
                    close(fd)
                }
            }
        }
        if Date().timeIntervalSince(t.lastCheckpoint) >= 1 { progressCheckpoint(t) }
        update(t)
    }

    public func task(_ task: SessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        guard let t = transfer(task) else { return }
        t.row.sent = totalBytesSent
        update(t)
    }

    public func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        guard let t = byTask.removeValue(forKey: ObjectIdentifier(task)) else { return }
        t.task = nil
        send(.attemptEnded(t.row.id, attempt: t.attempt, error.map { .failure($0) } ?? .success))
    }

    func closeFile(_ t: Transfer) {
        if t.fd >= 0 { close(t.fd) }
        t.fd = -1
    }
}
