import CPorterIPC
import Foundation
import Porter
import PorterBackground
import PorterCore
import PorterIPC
import PorterSession
import PorterStorage
import Synchronization

// Connections: the handshake (who may talk to porterd), a client's requests, each about
// its own session only, and the enqueue and control rules.
extension Daemon {
    /// A client. Messages to it go through its own writer thread, so a client that stops
    /// reading (stopped, in a debugger, a delegate that blocks) never holds up the daemon:
    /// progress updates to it are dropped while its backlog is long, and a client whose
    /// backlog passes `dropLimit` messages is disconnected (its events stay journaled).
    final class Connection: @unchecked Sendable {
        let channel: Channel
        /// The session this connection holds (`attach`) or looks at (`watch`): every
        /// request it makes is about that session's tasks only.
        var session: String?
        /// It attached (holds the session: events, logins, launch command).
        var holds = false
        /// The connecting process, by pidfd (set before its first message is handled).
        var process: PeerProcess?
        private let writer = DispatchQueue(label: "porterd.client")
        private let backlog = Atomic<Int>(0)
        static let updateLimit = 64
        static let dropLimit = 50_000
        /// Messages read from a client whose handling and answers are not yet done, at
        /// most (`serve`).
        static let inFlight = 64
        init(_ channel: Channel) { self.channel = channel }

        func send(_ m: BackgroundDaemonMessage) {
            let waiting = backlog.load(ordering: .relaxed)
            if case .update = m, waiting > Connection.updateLimit { return }
            if waiting > Connection.dropLimit {
                channel.close()
                return
            }
            backlog.add(1, ordering: .relaxed)
            writer.async { [self] in
                try? BackgroundProtocol.send(m, on: channel)
                backlog.subtract(1, ordering: .relaxed)
            }
        }

        /// Runs `work` on this client's writer, in order with the messages sent before and
        /// after; `work` sends through the function it is given (at once, on the writer).
        func sendFromWriter(_ work: @escaping @Sendable (_ send: (BackgroundDaemonMessage) -> Void) -> Void) {
            backlog.add(1, ordering: .relaxed)
            writer.async { [self] in
                work { m in try? BackgroundProtocol.send(m, on: channel) }
                backlog.subtract(1, ordering: .relaxed)
            }
        }

        /// Runs `done` on the writer once everything sent before it has been written to the
        /// client (not a message: it does not count in the backlog).
        func afterWrites(_ done: @escaping @Sendable () -> Void) {
            writer.async(execute: done)
        }
    }

    // MARK: - connections

    func serve(_ channel: Channel) {
        // Counted at once (the idle exit waits for it), before its handshake.
        let c = Connection(channel)
        queue.sync { connections[ObjectIdentifier(c)] = c }
        let t = Thread { [self] in
            let forget = { self.queue.async { self.connections[ObjectIdentifier(c)] = nil } }
            guard let peer = channel.peer, peer.uid == geteuid() else {
                channel.goodbye("refused: porterd serves only uid \(geteuid())")
                return forget()
            }
            // Never for sandboxed code (a plugin worker): identified by pidfd, not by a pid
            // that could name another process by the time /proc is read.
            let process: PeerProcess
            switch PeerProcess.of(channel) {
            case .failure(let refusal):
                note("refused a connection: \(refusal.reason)")
                channel.goodbye("refused: \(refusal.reason)")
                return forget()
            case .success(let p):
                process = p
            }
            if let reason = process.sandboxReason() {
                note("refused a connection: porterd does not act for sandboxed code: \(reason)")
                channel.goodbye("refused: porterd does not act for sandboxed code: \(reason)")
                return forget()
            }
            queue.sync { c.process = process }
            do {
                channel.setReceiveTimeout(10)
                try channel.answer(BackgroundProtocol.hello)
                channel.setReceiveTimeout(0)
            } catch {
                note("a connection from pid \(peer.pid) failed its handshake: \(error)")
                channel.close()
                return forget()
            }
            // At most `Connection.inFlight` of its messages are in porterd at once, each
            // from when it is read until it is handled and its answers are written: a
            // client that sends ten thousand tasks at once is read as fast as porterd
            // handles them and the client takes the answers (the rest wait in the socket,
            // then in the client), never decoded into a backlog of requests, nor of
            // answers it does not read, in porterd's memory.
            let slots = DispatchSemaphore(value: Connection.inFlight)
            while true {
                do {
                    let m = try channel.receive(BackgroundClientMessage.self)
                    slots.wait()
                    queue.async {
                        self.handle(m, from: c)
                        c.afterWrites { slots.signal() }
                    }
                } catch {
                    if (error as? IPCError)?.code != .closed { note("pid \(peer.pid): \(error); closing its connection") }
                    channel.close()
                    queue.async {
                        self.connections[ObjectIdentifier(c)] = nil
                        if let s = c.session, self.holders[s] === c { self.holders[s] = nil }
                    }
                    return
                }
            }
        }
        t.start()
    }

    func handle(_ message: BackgroundClientMessage, from c: Connection) {
        busy = true
        switch message {
        case .attach(let session, let launchCommand):
            if let s = c.session, s != session, holders[s] === c { holders[s] = nil }
            c.session = session
            c.holds = true
            holders[session] = c
            do {
                let decided = launchCommand.flatMap { self.launchCommand($0, session: session, from: c) }
                try journal.attached(session, launchCommand: decided?.argv, owner: decided?.owner)
            } catch { note("session \(session): \(error)") }
            sendTasks(of: session, reference: 0, to: c) { .attached(session: session, tasks: $0) }
            for e in (try? journal.events(session: session)) ?? [] { c.send(.event(e)) }
            c.send(.eventsSent)
            for (id, p) in pendingChallenges where p.transfer.row.session == session {
                c.send(.challenge(task: p.transfer.row.id, id: id, p.info))
            }
        case .watch(let session):
            if let s = c.session, holders[s] === c { holders[s] = nil }
            c.session = session
            c.holds = false
        case .enqueue(let reference, let spec):
            guard let session = c.session, c.holds else { return c.send(.refused(reference: reference, message: "attach to a session first")) }
            enqueue(spec, session: session, reference: reference, reply: c)
        case .control(let id, let action):
            control(id, action, from: c)
        case .schedule(let id, let priority, let earliestBegin):
            guard let session = c.session, scheduler.session(of: id) == session else { return }
            changeRow(id) {
                $0.spec.priority = priority
                $0.spec.earliestBegin = earliestBegin
            }
            send(.reschedule(id, priority: priority, earliestBegin: earliestBegin))
        case .describe(let id, let text):
            guard let session = c.session, row(id)?.session == session else { return }
            changeRow(id) {
                $0.spec.taskDescription = text.map { String($0.utf8.prefix(Daemon.maximumDescription)) ?? String($0.prefix(1024)) }
            }
        case .delivered(let sequence):
            guard let session = c.session, c.holds, let e = try? journal.delivered(sequence, session: session) else { return }
            if e.kind == .finishedDownloading, let file = e.file { unlink(file) }
        case .answer(let id, let answer):
            guard c.holds, let p = pendingChallenges[id], p.transfer.row.session == c.session else { return }
            pendingChallenges[id] = nil
            p.timer.cancel()
            p.completion(answer.disposition)
        case .ping(let reference):
            c.send(.pong(reference: reference))
        case .list(let session, let reference):
            // Only the connection's own session: a client of one session neither sees nor
            // steers another's tasks.
            guard let own = c.session, session == nil || session == own else {
                return c.send(.refused(reference: reference, message: c.session == nil
                    ? "attach to or watch a session first" : "a connection lists only the tasks of its own session"))
            }
            sendTasks(of: own, reference: reference, to: c) { .tasks(reference: reference, $0) }
        }
    }

    /// The launch-command rule. A session's launch command is the application's: it may
    /// name only the program of the process that attaches (its /proc/PID/exe, so no
    /// client makes porterd run a shell or another program), and once a program has set
    /// it (the session's owner, recorded on its first attach), a client running another
    /// program can neither change nor clear it. Returns what to record (argv with the
    /// program resolved, and its owner), or nil to leave it as it is.
    func launchCommand(_ given: [String], session: String, from c: Connection) -> (argv: [String], owner: String)? {
        let pid = c.process?.pid ?? 0
        guard let exe = c.process?.executable() else {
            note("session \(session): cannot tell which program pid \(pid) runs; its launch command is ignored")
            return nil
        }
        if let owner = try? journal.launchOwner(session), owner != exe {
            note("session \(session): pid \(pid) (\(exe)) may not change the launch command of the session's application (\(owner)); ignored")
            return nil
        }
        guard let program = given.first else { return ([], exe) }
        let resolved = program.hasPrefix("/") ? realpath(program, nil) : nil
        defer { free(resolved) }
        guard let resolved, String(cString: resolved) == exe else {
            note("session \(session): a launch command may only run the attaching program itself (\(exe)); pid \(pid) asked for \(given.prefix(1)): ignored")
            return nil
        }
        return ([exe] + given.dropFirst(), exe)
    }

    /// Sends `session`'s tasks to `c`: `taskPage`s, then `last` with the last page. The
    /// running ones as their transfers have them now; the rest read from the journal on
    /// the client's writer (through the journal's own reading connection), a short read
    /// per page, so a long list costs the daemon's queue only this call, never sits in
    /// memory whole, and holds no read transaction while the client takes its pages.
    func sendTasks(of session: String, reference: Int, to c: Connection,
                   last: @escaping @Sendable ([BackgroundTaskSnapshot]) -> BackgroundDaemonMessage) {
        var running: [Int: BackgroundTaskSnapshot] = [:]
        for (id, t) in transfers where t.row.session == session { running[id] = t.row.snapshot() }
        let journal = self.journal
        c.sendFromWriter { [running] send in
            let page = Daemon.paged(session: session, reference: reference, journal: journal, running: running, send: send) { why in
                self.note("session \(session): cannot list its tasks: \(why)")
            }
            send(last(page))
        }
    }

    /// Tasks read from the journal at a time for a list (one short read each).
    static let listBatch = 256

    /// Sends all but the last page of `session`'s tasks as `taskPage`s; returns the last
    /// page. The journal is read in batches by id (`Journal.snapshots`), each read over
    /// before a page is written: a write to a client that does not read blocks only here,
    /// with no transaction open.
    static func paged(session: String, reference: Int, journal: Journal, running: [Int: BackgroundTaskSnapshot],
                      send: (BackgroundDaemonMessage) -> Void, failed: (Error) -> Void) -> [BackgroundTaskSnapshot] {
        // Pages of at most ~256 KiB of JSON (a snapshot is its strings plus ~400 bytes;
        // URLs and descriptions are bounded when they enter), far below the 1 MiB frame
        // (a compact page is smaller still).
        var page: [BackgroundTaskSnapshot] = []
        var size = 0
        var after = 0
        do {
            while true {
                let (batch, last) = try journal.snapshots(session: session, after: after, limit: listBatch)
                guard let last else { break }
                after = last
                for listed in batch {
                    let t = running[listed.id] ?? listed
                    let cost = 400 + t.url.absoluteString.utf8.count * 2 + (t.taskDescription?.utf8.count ?? 0) * 2
                        + (t.destination?.utf8.count ?? 0) * 2 + (t.errorMessage?.utf8.count ?? 0) * 2
                    if size + cost > 256 << 10, !page.isEmpty {
                        send(.taskPage(reference: reference, page))
                        page.removeAll(keepingCapacity: true)
                        size = 0
                    }
                    page.append(t)
                    size += cost
                }
            }
        } catch {
            failed(error)
        }
        return page
    }

    /// Bounds on what a client may make the daemon keep (and send back in lists).
    static let maximumURL = 16 << 10
    static let maximumDescription = 4 << 10

    func enqueue(_ given: BackgroundTaskSpec, session: String, reference: Int, reply c: Connection) {
        var spec = given
        guard spec.url.absoluteString.utf8.count <= Daemon.maximumURL, (spec.destination?.utf8.count ?? 0) <= 4096,
              session.utf8.count <= 1024 else {
            return c.send(.refused(reference: reference, message: "porterd keeps URLs up to 16 KiB and paths up to 4 KiB"))
        }
        if let d = spec.taskDescription, d.utf8.count > Daemon.maximumDescription {
            spec.taskDescription = String(d.prefix(1024))
        }
        // Never journaled: each attempt asks the stores for cookies and credentials again.
        spec.headers = ResumeData.withoutSecrets(spec.headers)
        if let destination = spec.destination {
            // The output rule (OutputFile): a folder is refused now, not at the end.
            do { try OutputFile.check(destination) } catch {
                return c.send(.refused(reference: reference, message: error.message))
            }
        }
        if spec.kind == .upload {
            guard let file = spec.uploadFile, access(file, R_OK) == 0 else {
                return c.send(.refused(reference: reference, message: "porterd cannot read the upload file \(spec.uploadFile ?? "(none)")"))
            }
        }
        do {
            var row = try journal.insert(session: session, spec: spec) { id in self.partialsFolder + "/task-\(id).part" }
            // Resume data (a cancelled background download's): adopt its partial file —
            // only one porterd itself kept; anything else starts from the beginning.
            if let data = spec.resumeData, let resume = try? ResumeData(data: data), let partial = row.partial, resume.bytesReceived > 0 {
                if adoptPartial(resume.partialFilePath, bytes: resume.bytesReceived, as: partial) {
                    row.received = resume.bytesReceived
                    row.expected = resume.expectedTotalBytes
                    row.validator = resume.validator
                    try journal.save(row)
                } else {
                    note("task \(row.id): its resume data names \(resume.partialFilePath), not a partial file porterd kept; starting from the beginning")
                }
            }
            send(.add(Daemon.ticket(row), .suspended))
            c.send(.enqueued(reference: reference, task: row.snapshot()))
        } catch {
            c.send(.refused(reference: reference, message: "porterd cannot record the task: \(error)"))
        }
    }

    func control(_ id: Int, _ action: BackgroundControl, from c: Connection) {
        // Only a task of the connection's own session.
        guard let session = c.session else { return }
        if let owner = scheduler.session(of: id) {
            guard owner == session else { return }
        } else {
            // A job the scheduler does not hold (none should be): from its journal row.
            guard let row = try? journal.task(id), row.session == session, row.state != "completed" else { return }
            send(.add(Daemon.ticket(row), row.state == "running" ? .running(nextAttempt: row.nextAttempt) : .suspended))
        }
        // What follows (a stop, a new attempt, the end) is the scheduler's.
        switch action {
        case .resume: send(.resume(id))
        case .suspend: send(.suspend(id))
        case .cancel: send(.cancel(id, resumeData: false))
        case .cancelProducingResumeData: send(.cancel(id, resumeData: true))
        }
    }
}
