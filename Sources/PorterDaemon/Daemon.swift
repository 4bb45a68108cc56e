import CPorterIPC
import Foundation
import Porter
import PorterCore
import PorterIPC
import PorterSession
import Synchronization
import PorterStorage

/// porterd: runs the transfers of background sessions for one user, journals them, and
/// hands their events to whichever process holds the session.
///
/// Threads: one accepts connections, one reads each connection; everything else (the
/// journal, the transfers, the engine session's delegate calls) runs on `queue`.
public final class Daemon: DataDelegate, @unchecked Sendable {
    public struct Options: Sendable {
        public var runtimeFolder: String
        public var stateFolder: String
        /// Seconds without connections and transfers before the daemon exits.
        public var idleExit: Double
        public init(runtimeFolder: String, stateFolder: String, idleExit: Double) {
            self.runtimeFolder = runtimeFolder
            self.stateFolder = stateFolder
            self.idleExit = idleExit
        }

        /// From the environment: the folders of `BackgroundProtocol`, and
        /// `PORTERD_IDLE_EXIT` seconds (default 30).
        public static func fromEnvironment() throws -> Options {
            let env = ProcessInfo.processInfo.environment
            guard let state = BackgroundProtocol.stateFolder(environment: env), let run = BackgroundProtocol.runtimeFolder(environment: env) else {
                throw PorterError(.unsupportedConfiguration, "porterd: neither XDG_STATE_HOME nor HOME is an absolute path")
            }
            return Options(runtimeFolder: run, stateFolder: state,
                           idleExit: env["PORTERD_IDLE_EXIT"].flatMap(Double.init) ?? 30)
        }
    }

    /// Transfers retried after these errors (the network, not the resource).
    static let retryable: Set<PorterError.Code> = [.timedOut, .cannotFindHost, .cannotConnectToHost, .networkConnectionLost]

    let options: Options
    let queue = DispatchQueue(label: "porterd")
    let journal: Journal
    private var listener: Listener?
    private var engine: Session!
    // On `queue`:
    private var transfers: [Int: Transfer] = [:]
    private var byTask: [ObjectIdentifier: Transfer] = [:]
    private var holders: [String: Connection] = [:]
    private var connections: [ObjectIdentifier: Connection] = [:]
    private var idleSince: Date? = Date()
    private let log: FileHandle?
    private var lockFD: Int32 = -1

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
        var ending: BackgroundControl?
        var retryTimer: DispatchWorkItem?
        /// A background sync of the partial file is under way.
        var syncing = false
        /// Bumped when the partial file starts over (a sync begun before must not record
        /// its count then).
        var epoch = 0
        /// No app answered a login in time: the task fails with userAuthenticationRequired.
        var loginTimedOut = false
        /// The attempt was stopped for a suspend (its end is not the task's end).
        var stopping = false
        /// The attempt was stopped because its 206 was of another version: start again.
        var restarting = false
        init(_ row: Journal.Task) { self.row = row }
    }

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
                try? channel.send(message: m)
                backlog.subtract(1, ordering: .relaxed)
            }
        }
    }

    var partialsFolder: String { options.stateFolder + "/partial" }
    func finishedFolder(_ session: String) -> String {
        BackgroundProtocol.finishedFolder(stateFolder: options.stateFolder, session: session)
    }

    public init(options: Options) throws {
        self.options = options
        try PrivateFiles.makeFolder(options.stateFolder)
        try PrivateFiles.makeFolder(options.stateFolder + "/partial")
        try PrivateFiles.makeFolder(options.stateFolder + "/finished")
        try PrivateFiles.makeFolder(options.runtimeFolder)
        // One daemon per user: two started at once (two clients after a crash) would both
        // resume the journal's transfers into the same partial files.
        let lockPath = options.stateFolder + "/porterd.lock"
        lockFD = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard lockFD >= 0, flock(lockFD, LOCK_EX | LOCK_NB) == 0 else {
            throw PorterError(.unsupportedConfiguration, "another porterd runs for this user (\(lockPath) is locked)")
        }
        let logPath = options.stateFolder + "/porterd.log"
        let fd = open(logPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o600)
        log = fd >= 0 ? FileHandle(fileDescriptor: fd, closeOnDealloc: true) : nil
        journal = try Journal(path: options.stateFolder + "/porterd.sqlite")
        if let aside = journal.setAside { note(aside) }
    }

    func note(_ text: String) {
        let line = "\(ISO8601DateFormatter().string(from: Date())) porterd[\(getpid())]: \(text)\n"
        log?.write(Data(line.utf8))
    }

    /// Listens, resumes the journal's transfers, and serves until idle. Returns when the
    /// daemon should exit.
    public func run() throws {
        Porter.bootstrap()
        var config = SessionConfiguration.default
        config.timeoutIntervalForResource = 7 * 24 * 3600
        engine = Session(configuration: config, delegate: self, delegateQueue: queue)
        let socket = options.runtimeFolder + "/porterd.sock"
        let l: Listener
        var adopted = false
        let env = ProcessInfo.processInfo.environment
        if env["LISTEN_PID"] == String(getpid()), env["LISTEN_FDS"] == "1" {
            // systemd socket activation (porterd.socket): the listening socket is fd 3.
            l = Listener(adopting: 3, path: socket)
            adopted = true
            note("serving the socket systemd passed (socket activation)")
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        } else {
            l = try Listener(path: socket)
        }
        listener = l
        let pidFile = options.runtimeFolder + "/porterd.pid"
        _ = PrivateFiles.writeAtomically(Data("\(getpid())\n".utf8), to: pidFile)
        note("listening at \(socket)")
        queue.sync { resumeJournal() }
        let acceptor = Thread { [self] in
            while let c = l.accept() { self.serve(c) }
        }
        acceptor.start()
        watchRoutes()
        while true {
            sleep(1)
            let done = queue.sync { () -> Bool in
                if !connections.isEmpty || transfers.values.contains(where: { $0.task != nil || $0.retryTimer != nil }) {
                    idleSince = nil
                    return false
                }
                if idleSince == nil { idleSince = Date() }
                guard Date().timeIntervalSince(idleSince!) >= options.idleExit else { return false }
                // Decided on the queue, where connections register: none slips in after it.
                if !adopted { unlink(socket) }
                l.close()
                return true
            }
            if done { break }
        }
        note("idle for \(Int(options.idleExit)) s: exiting")
        unlink(pidFile)
    }

    /// Tasks waiting to retry after a network failure start at once when the kernel says
    /// a link, an address or a route appeared (rtnetlink), instead of at their back-off
    /// time: a machine that comes back online resumes its transfers in a moment.
    private func watchRoutes() {
        let fd = porter_ipc_route_watch()
        guard fd >= 0 else { return note("cannot watch the network (rtnetlink): \(String(cString: strerror(errno)))") }
        let t = Thread { [self] in
            while true {
                let r = porter_ipc_route_wait(fd, -1)
                if r < 0 && errno != EINTR { return }
                if r > 0 { queue.async { self.networkChanged() } }
            }
        }
        t.start()
    }

    private func networkChanged() {
        let waiting = transfers.values.filter {
            $0.retryTimer != nil && $0.task == nil && $0.row.state == "running"
                && $0.row.errorCode.flatMap { Int($0) }.flatMap { PorterError.Code(rawValue: $0) }.map { Daemon.retryable.contains($0) } == true
        }
        guard !waiting.isEmpty else { return }
        note("the network changed: \(waiting.count) waiting task(s) try again now")
        for t in waiting {
            t.retryTimer?.cancel()
            t.retryTimer = nil
            t.row.nextAttempt = nil
            t.row.errorCode = nil
            t.row.errorMessage = nil
            admit(t)
        }
    }

    // MARK: - connections

    private func serve(_ channel: Channel) {
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
            while true {
                do {
                    let m = try channel.receive(BackgroundClientMessage.self)
                    queue.async { self.handle(m, from: c) }
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

    private func handle(_ message: BackgroundClientMessage, from c: Connection) {
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
            let tasks = ((try? journal.tasks(session: session)) ?? []).map { current($0).snapshot() }
            c.send(.attached(session: session, tasks: paged(tasks, reference: 0, to: c)))
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
            guard let t = transfers[id], t.row.session == c.session else { return }
            t.row.spec.priority = priority
            t.row.spec.earliestBegin = earliestBegin
            try? journal.save(t.row)
            sortWaiting()
        case .describe(let id, let text):
            guard let session = c.session,
                  var row = transfers[id]?.row ?? (try? journal.tasks(session: session).first { $0.id == id }),
                  row.session == session else { return }
            row.spec.taskDescription = text.map { String($0.utf8.prefix(Daemon.maximumDescription)) ?? String($0.prefix(1024)) }
            transfers[id]?.row = row
            try? journal.save(row)
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
            let tasks = ((try? journal.tasks(session: own)) ?? []).map { current($0).snapshot() }
            c.send(.tasks(reference: reference, paged(tasks, reference: reference, to: c)))
        }
    }

    /// The launch-command rule. A session's launch command is the application's: it may
    /// name only the program of the process that attaches (its /proc/PID/exe, so no
    /// client makes porterd run a shell or another program), and once a program has set
    /// it (the session's owner, recorded on its first attach), a client running another
    /// program can neither change nor clear it. Returns what to record (argv with the
    /// program resolved, and its owner), or nil to leave it as it is.
    private func launchCommand(_ given: [String], session: String, from c: Connection) -> (argv: [String], owner: String)? {
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

    /// Sends all but the last page of `tasks` as `taskPage`s; returns the last page.
    private func paged(_ tasks: [BackgroundTaskSnapshot], reference: Int, to c: Connection) -> [BackgroundTaskSnapshot] {
        // Pages of at most ~256 KiB of JSON (a snapshot is its strings plus ~400 bytes;
        // URLs and descriptions are bounded when they enter), far below the 1 MiB frame.
        var page: [BackgroundTaskSnapshot] = []
        var size = 0
        for t in tasks {
            let cost = 400 + t.url.absoluteString.utf8.count * 2 + (t.taskDescription?.utf8.count ?? 0) * 2
                + (t.destination?.utf8.count ?? 0) * 2 + (t.errorMessage?.utf8.count ?? 0) * 2
            if size + cost > 256 << 10, !page.isEmpty {
                c.send(.taskPage(reference: reference, page))
                page.removeAll()
                size = 0
            }
            page.append(t)
            size += cost
        }
        return page
    }

    /// Bounds on what a client may make the daemon keep (and send back in lists).
    static let maximumURL = 16 << 10
    static let maximumDescription = 4 << 10

    /// The freshest view of a task: the running transfer's, else the journal's.
    private func current(_ row: Journal.Task) -> Journal.Task { transfers[row.id]?.row ?? row }

    private func enqueue(_ given: BackgroundTaskSpec, session: String, reference: Int, reply c: Connection) {
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
            transfers[row.id] = Transfer(row)
            c.send(.enqueued(reference: reference, task: row.snapshot()))
        } catch {
            c.send(.refused(reference: reference, message: "porterd cannot record the task: \(error)"))
        }
    }

    /// Moves the partial file resume data names to `partial`, when it is one porterd kept
    /// (`endWithResumeData`): named `task-<n>.part.resume` directly in porterd's partial
    /// folder, a regular file of this user's with one link and at least `bytes` long,
    /// looked at and renamed relative to the folder without following a link. Resume
    /// data is the application's (stored, sent by any client): it must not make porterd
    /// take, append to or hand back a file of its choosing.
    func adoptPartial(_ named: String, bytes: Int64, as partial: String) -> Bool {
        let prefix = partialsFolder + "/"
        guard named.hasPrefix(prefix), case let name = String(named.dropFirst(prefix.count)),
              name.hasPrefix("task-"), name.hasSuffix(".part.resume"),
              case let number = name.dropFirst(5).dropLast(12), !number.isEmpty, number.allSatisfy({ $0.isASCII && $0.isNumber }),
              partial.hasPrefix(prefix), case let target = String(partial.dropFirst(prefix.count)), !target.contains("/") else { return false }
        let dir = open(partialsFolder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard dir >= 0 else { return false }
        defer { close(dir) }
        let fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == geteuid(), st.st_nlink == 1,
              Int64(st.st_size) >= bytes else { return false }
        return renameat(dir, name, dir, target) == 0
    }

    private func syncFile(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return fsync(fd) == 0
    }

    private func copyFile(_ from: String, _ to: String) -> Bool {
        (try? FileManager.default.copyItem(atPath: from, toPath: to)) != nil
    }

    private func control(_ id: Int, _ action: BackgroundControl, from c: Connection) {
        // Only a task of the connection's own session.
        guard let session = c.session,
              let t = transfers[id] ?? (try? journal.tasks(session: session).first { $0.id == id && $0.state != "completed" }).map(Transfer.init),
              t.row.session == session else { return }
        transfers[id] = t
        switch action {
        case .resume:
            guard t.row.state != "running" || (t.task == nil && t.retryTimer == nil) else { return }
            t.row.state = "running"
            try? journal.save(t.row)
            if t.task == nil { admit(t) }
        case .suspend:
            guard t.row.state == "running" else { return }
            // The attempt stops (its slot goes to a waiting task); resume starts a new
            // one with a Range from the synced bytes.
            t.row.state = "suspended"
            checkpoint(t)
            t.retryTimer?.cancel()
            t.retryTimer = nil
            if let task = t.task {
                t.stopping = true
                task.cancel()
            }
        case .cancel, .cancelProducingResumeData:
            t.ending = action
            t.retryTimer?.cancel()
            t.retryTimer = nil
            if let task = t.task {
                task.cancel()  // didCompleteWithError(.cancelled) ends it
            } else if action == .cancelProducingResumeData {
                endWithResumeData(t)
            } else {
                end(t, error: PorterError(.cancelled, "cancelled", url: t.row.spec.url), status: nil)
            }
        }
    }

    // MARK: - transfers

    private func resumeJournal() {
        for row in (try? journal.tasks()) ?? [] where row.state == "running" || row.state == "suspended" {
            let t = Transfer(row)
            transfers[row.id] = t
            guard row.state == "running" else { continue }
            if let next = row.nextAttempt, next > Date().timeIntervalSince1970 {
                schedule(t, at: next)
            } else {
                if row.received > 0 { note("task \(row.id): continuing after a restart from byte \(row.received)") }
                if let begin = row.spec.earliestBegin, begin > Date().timeIntervalSince1970 {
                    schedule(t, at: begin)
                    continue
                }
                waiting[row.session, default: [:]][row.spec.url.host ?? "", default: []].append(row.id)
            }
        }
        admitQueued()
    }

    /// Transfers at once per session and per host; the rest wait their turn, in order
    /// (per session and host: a slow host does not hold up another's tasks).
    static let perSession = 8
    static let perHost = 6
    private var waiting: [String: [String: [Int]]] = [:]
    private var activeBySession: [String: Int] = [:]
    private var activeByHost: [String: Int] = [:]

    private func admit(_ t: Transfer) {
        if let begin = t.row.spec.earliestBegin, begin > Date().timeIntervalSince1970 {
            // earliestBeginDate: wait for it (the retry timer's path, which admits then).
            return schedule(t, at: begin)
        }
        waiting[t.row.session, default: [:]][t.row.spec.url.host ?? "", default: []].append(t.row.id)
        sortWaiting(session: t.row.session)
        admitQueued()
    }

    /// Higher priority first within each queue; equal priorities keep their order.
    private func sortWaiting(session only: String? = nil) {
        for (session, hosts) in waiting where only == nil || session == only {
            var sorted = hosts
            for (host, ids) in hosts where ids.count > 1 {
                let ranked = ids.enumerated().map { (i, id) in (i, id, transfers[id]?.row.spec.priority ?? 0.5) }
                if ranked.allSatisfy({ $0.2 == 0.5 }) { continue }
                sorted[host] = ranked.sorted { $0.2 != $1.2 ? $0.2 > $1.2 : $0.0 < $1.0 }.map(\.1)
            }
            waiting[session] = sorted
        }
    }

    /// Starts waiting transfers while the limits allow; the work is bounded by the number
    /// of sessions and hosts with tasks waiting, not by the number of tasks.
    private func admitQueued() {
        for session in Array(waiting.keys) {
            guard var hosts = waiting[session] else { continue }
            for host in Array(hosts.keys) {
                guard let ids = hosts[host], !ids.isEmpty else { continue }
                var kept: [Int] = []
                var i = 0
                // Stops at the first full limit: a long queue costs nothing while it waits.
                while i < ids.count, activeBySession[session, default: 0] < Daemon.perSession,
                      activeByHost[host, default: 0] < Daemon.perHost {
                    let id = ids[i]
                    i += 1
                    guard let t = transfers[id], t.row.state == "running", t.task == nil, t.retryTimer == nil else { continue }
                    if t.row.spec.isDiscretionary == true, activeDiscretionary[session, default: 0] > 0 {
                        kept.append(id)
                        continue
                    }
                    start(t)
                }
                if i == 0 { continue }
                kept.append(contentsOf: ids[i...])
                hosts[host] = kept.isEmpty ? nil : kept
            }
            waiting[session] = hosts.isEmpty ? nil : hosts
        }
    }

    /// Counts a transfer that starts (+1) or stops (-1) against its limits.
    private func count(_ t: Transfer, _ delta: Int) {
        activeBySession[t.row.session, default: 0] += delta
        activeByHost[t.row.spec.url.host ?? "", default: 0] += delta
        if t.row.spec.isDiscretionary == true { activeDiscretionary[t.row.session, default: 0] += delta }
    }
    /// Discretionary transfers run one at a time per session.
    private var activeDiscretionary: [String: Int] = [:]

    private func start(_ t: Transfer) {
        var request = Request(url: t.row.spec.url, method: t.row.spec.method)
        for pair in t.row.spec.headers where pair.count == 2 { _ = request.addValue(pair[1], forHeader: pair[0]) }
        for (key, value) in t.row.spec.properties ?? [:] { request.setProperty(value, forKey: key) }
        if t.row.spec.kind == .upload, let file = t.row.spec.uploadFile {
            request.body = .file(URL(fileURLWithPath: file))
        }
        guard let partial = t.row.partial else { return end(t, error: PorterError(.cannotCreateFile, "no partial file"), status: nil) }
        // The journal's count is what was synced; anything past it may be torn: cut it.
        var flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW
        if t.row.received == 0 { flags |= O_TRUNC }
        t.fd = open(partial, flags, 0o600)
        guard t.fd >= 0 else {
            return end(t, error: PorterError(.cannotCreateFile, "porterd cannot open \(partial)", cause: .errno(errno)), status: nil)
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
        if t.row.firstAttempt == nil { t.row.firstAttempt = Date().timeIntervalSince1970 }
        t.row.state = "running"
        t.row.nextAttempt = nil
        try? journal.save(t.row)
        let task = engine(for: t.row.spec.maximumBytesPerSecond).dataTask(with: request)
        t.task = task
        count(t, 1)
        byTask[ObjectIdentifier(task)] = t
        task.resume()
        idleSince = nil
    }

    /// One engine session per bytes-per-second cap (the cap is a session setting).
    private var capped: [Int64: Session] = [:]
    private func engine(for cap: Int64?) -> Session {
        guard let cap, cap > 0 else { return engine }
        if let s = capped[cap] { return s }
        var config = engine.configuration
        config.maximumBytesPerSecond = cap
        let s = Session(configuration: config, delegate: self, delegateQueue: queue)
        capped[cap] = s
        return s
    }

    private func transfer(_ task: SessionTask) -> Transfer? {
        byTask[ObjectIdentifier(task)].flatMap { transfers[$0.row.id] === $0 ? $0 : nil }
    }

    /// Syncs the partial file on another thread (the transfer does not wait for the
    /// disk), then records the count it had reached when the sync began: the journal's
    /// count is always bytes that are on disk.
    private func progressCheckpoint(_ t: Transfer) {
        guard !t.syncing, t.fd >= 0 else { return }
        let fd = dup(t.fd)
        guard fd >= 0 else { return checkpoint(t) }
        t.syncing = true
        t.sinceCheckpoint = 0
        t.lastCheckpoint = Date()
        let count = t.row.received, epoch = t.epoch
        syncQueue.async {
            fdatasync(fd)
            close(fd)
            self.queue.async {
                t.syncing = false
                guard t.epoch == epoch, t.task != nil, t.row.state == "running", self.transfers[t.row.id] === t else { return }
                var row = t.row
                row.received = count
                try? self.journal.save(row)
            }
        }
    }
    private let syncQueue = DispatchQueue(label: "porterd.sync")

    /// Syncs the partial file, then records how much of it is good.
    private func checkpoint(_ t: Transfer) {
        if t.fd >= 0 { fsync(t.fd) }
        t.sinceCheckpoint = 0
        t.lastCheckpoint = Date()
        try? journal.save(t.row)
    }

    private func update(_ t: Transfer, force: Bool = false) {
        guard let c = holders[t.row.session], force || Date().timeIntervalSince(t.lastUpdate) > 0.1 else { return }
        t.lastUpdate = Date()
        c.send(.update(t.row.snapshot()))
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
            t.restarting = true
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
    private func restartFile(_ t: Transfer) {
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
            t.ending = .cancel
            task.cancel()
            end(t, error: PorterError(.cannotWriteToFile, "porterd cannot write the partial file", cause: .errno(errno)), status: nil)
            return
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

    // MARK: - challenges

    /// How long a login waits for an app to answer when the credential store has none
    /// (`PORTERD_CHALLENGE_WAIT` seconds, default 300).
    var challengeWait: Double { ProcessInfo.processInfo.environment["PORTERD_CHALLENGE_WAIT"].flatMap(Double.init) ?? 300 }
    private var pendingChallenges: [Int: (transfer: Transfer, info: BackgroundChallenge, timer: DispatchWorkItem,
                                          completion: @Sendable (ChallengeDisposition) -> Void)] = [:]
    private var nextChallenge = 1

    public func session(_ session: Session, didReceive challenge: AuthenticationChallenge,
                        completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        // Server trust and client certificates: the system's CAs and the configuration
        // only; never an app's say-so from here.
        completion(.performDefaultHandling)
    }

    /// A login: the credential store's default for the space; else the app holding the
    /// session is asked; else the task waits `challengeWait` for an app to attach (and
    /// answer), then fails with userAuthenticationRequired.
    public func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                     completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        let space = challenge.protectionSpace
        guard let t = transfer(task), !space.authenticationMethod.isConnectionLevel else { return completion(.performDefaultHandling) }
        if challenge.previousFailureCount == 0, let stored = task.session.configuration.credentialStore?.defaultCredential(for: space) {
            return completion(.useCredential(stored))
        }
        let id = nextChallenge
        nextChallenge += 1
        let info = BackgroundChallenge(challenge)
        let timer = DispatchWorkItem { [weak self] in
            guard let self, let p = self.pendingChallenges.removeValue(forKey: id) else { return }
            p.transfer.loginTimedOut = true
            self.note("task \(p.transfer.row.id): no app answered the login for \(space) in \(Int(self.challengeWait)) s")
            p.completion(.cancelAuthenticationChallenge)
        }
        pendingChallenges[id] = (t, info, timer, completion)
        queue.asyncAfter(deadline: .now() + challengeWait, execute: timer)
        holders[t.row.session]?.send(.challenge(task: t.row.id, id: id, info))
    }

    public func task(_ task: SessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        guard let t = transfer(task) else { return }
        t.row.sent = totalBytesSent
        update(t)
    }

    public func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        guard let t = byTask.removeValue(forKey: ObjectIdentifier(task)) else { return }
        t.task = nil
        count(t, -1)
        defer { admitQueued() }
        guard transfers[t.row.id] === t else { return }  // ended already (a write failure)
        var error = error
        if t.loginTimedOut, error?.code == .userCancelledAuthentication {
            error = PorterError(.userAuthenticationRequired,
                                "the server asked for a login that the credential store does not have, and no app answered it in \(Int(challengeWait)) s",
                                url: t.row.spec.url)
        }
        if let ending = t.ending {
            // Asked to end: it ends, whatever the last attempt's outcome.
            if ending == .cancelProducingResumeData { return endWithResumeData(t) }
            return end(t, error: PorterError(.cancelled, "cancelled", url: t.row.spec.url), status: nil)
        }
        if t.restarting, t.row.state == "running" {
            // The attempt was stopped for a changed resource: the next one asks for it all.
            t.restarting = false
            closeFile(t)
            admit(t)
            return
        }
        t.restarting = false
        if t.stopping || t.row.state == "suspended" {
            // The attempt stopped for a suspend: keep the synced bytes for the resume (and
            // start again at once if the task was resumed before the attempt had ended).
            t.stopping = false
            checkpoint(t)
            closeFile(t)
            if t.row.state == "running" { admit(t) }
            return
        }
        if let error, Daemon.retryable.contains(error.code), t.row.state == "running" {
            let elapsed = Date().timeIntervalSince1970 - (t.row.firstAttempt ?? Date().timeIntervalSince1970)
            if elapsed < engine.configuration.timeoutIntervalForResource {
                checkpoint(t)
                closeFile(t)
                t.row.retries += 1
                // Exponential back-off with jitter: 1 s, 2 s, 4 s … at most 5 minutes.
                let delay = min(300, pow(2, Double(min(t.row.retries - 1, 9)))) * Double.random(in: 0.8...1.2)
                t.row.nextAttempt = Date().timeIntervalSince1970 + delay
                t.row.errorCode = String(error.code.rawValue)
                t.row.errorMessage = error.message
                try? journal.save(t.row)
                note("task \(t.row.id): \(error.message); attempt \(t.row.retries + 1) in \(Int(delay.rounded())) s")
                schedule(t, at: t.row.nextAttempt!)
                update(t, force: true)
                return
            }
        }
        end(t, error: error, status: t.row.statusCode)
    }

    private func schedule(_ t: Transfer, at time: Double) {
        t.retryTimer?.cancel()
        let item = DispatchWorkItem { [weak self, weak t] in
            guard let self, let t, t.row.state == "running", t.task == nil else { return }
            t.retryTimer = nil
            t.row.errorCode = nil
            t.row.errorMessage = nil
            self.admit(t)
        }
        t.retryTimer = item
        queue.asyncAfter(deadline: .now() + max(0, time - Date().timeIntervalSince1970), execute: item)
    }

    private func closeFile(_ t: Transfer) {
        if t.fd >= 0 { close(t.fd) }
        t.fd = -1
    }

    private func endWithResumeData(_ t: Transfer) {
        checkpoint(t)
        closeFile(t)
        var data: Data?
        if let partial = t.row.partial, t.row.received > 0, t.row.validator != nil {
            // The partial file becomes the caller's: move it out of the daemon's way.
            let kept = partial + ".resume"
            if rename(partial, kept) == 0 {
                // The spec's headers lost their secrets when the task was queued.
                data = ResumeData(url: t.row.spec.url, method: t.row.spec.method, headers: t.row.spec.headers, validator: t.row.validator,
                                  bytesReceived: t.row.received, expectedTotalBytes: t.row.expected, partialFilePath: kept).encoded()
            }
        }
        holders[t.row.session]?.send(.resumeData(task: t.row.id, data))
        // Without resume data nobody will use the partial file: it goes.
        end(t, error: PorterError(.cancelled, "cancelled", url: t.row.spec.url, resumeData: data), status: nil, keepPartial: data != nil)
    }

    /// Runs the session's launch command (once until a process holds the session again),
    /// as this user, detached, with PORTER_BACKGROUND_SESSION naming the session: Linux
    /// has no app to wake, so a service is started to collect its files.
    private func launch(_ session: String) {
        guard let argv = (try? journal.launchOnce(session)) ?? nil, let program = argv.first else {
            return note("session \(session): events wait and no process holds it; it has no launch command to run (none, or it ran already)")
        }
        var env = ProcessInfo.processInfo.environment
        env["PORTER_BACKGROUND_SESSION"] = session
        var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        var cEnv: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            cArgs.forEach { free($0) }
            cEnv.forEach { free($0) }
        }
        if porter_ipc_spawn_detached_env(program, &cArgs, &cEnv) == 0 {
            note("session \(session): events wait and no process holds it: ran \(argv)")
        } else {
            note("session \(session): cannot run its launch command \(argv): \(String(cString: strerror(errno)))")
        }
    }

    /// The task's end: the file goes where it belongs, the state and the events are
    /// committed together, then the holder (if any) hears them.
    private func end(_ t: Transfer, error: PorterError?, status: Int?, keepPartial: Bool = false) {
        for (id, p) in pendingChallenges where p.transfer === t {
            p.timer.cancel()
            pendingChallenges[id] = nil
        }
        if t.fd >= 0 { fsync(t.fd) }
        closeFile(t)
        var error = error
        var events: [BackgroundEvent] = []
        if error == nil, t.row.spec.kind == .download, let partial = t.row.partial {
            if let destination = t.row.spec.destination {
                // porter --background -o FILE: the daemon puts it there itself, by the output
                // rule every writer follows (devices and FIFOs written through, never
                // replaced; the mode a new file or the existing one has; nothing partial at
                // the destination). A FIFO nobody reads fails at once: porterd never waits.
                if !syncFile(partial) { note("task \(t.row.id): cannot sync \(partial)") }
                do {
                    try OutputFile.place(partial, at: destination, nonBlocking: true)
                } catch let failure {
                    error = PorterError(.cannotMoveFile, "porterd cannot put the download at \(destination): \(failure.message)",
                                        url: t.row.spec.url, cause: failure.cause)
                }
            } else {
                let folder = finishedFolder(t.row.session)
                let file = folder + "/task-\(t.row.id)"
                if (try? PrivateFiles.makeFolder(folder)) == nil {
                    // A planted link or someone else's folder: never written through.
                    error = PorterError(.cannotMoveFile, "porterd refuses \(folder): not its own private folder")
                    unlink(partial)
                } else if rename(partial, file) == 0 {
                    events.append(BackgroundEvent(sequence: 0, task: t.row.id, kind: .finishedDownloading, file: file, statusCode: status))
                } else {
                    error = PorterError(.cannotMoveFile, "porterd cannot keep the download", cause: .errno(errno))
                }
            }
        } else if !keepPartial, let partial = t.row.partial {
            unlink(partial)
        }
        let wire = BackgroundProtocol.wire(error)
        events.append(BackgroundEvent(sequence: 0, task: t.row.id, kind: .completed, statusCode: status,
                                      errorCode: wire.code, errorMessage: wire.message))
        t.row.state = "completed"
        t.row.errorCode = wire.code
        t.row.errorMessage = wire.message
        t.row.nextAttempt = nil
        transfers[t.row.id] = nil
        do {
            let committed = try journal.finish(t.row, events: events)
            note("task \(t.row.id) \(error.map { "failed: \($0.message)" } ?? "finished") (\(t.row.received) bytes)")
            if let c = holders[t.row.session] {
                for e in committed { c.send(.event(e)) }
            } else {
                launch(t.row.session)
            }
        } catch {
            note("task \(t.row.id): the journal refused its end: \(error)")
        }
    }
}
