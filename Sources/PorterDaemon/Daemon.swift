import CPorterIPC
import CPorterNetlink
import Foundation
import Porter
import PorterBackground
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

    let options: Options
    let queue = DispatchQueue(label: "porterd")
    let journal: Journal
    var listener: Listener?
    /// The session that runs the transfers, made by the first attempt (`engine`).
    private var engineSession: Session?
    /// The transfers' settings (`engine`; a capped session copies them).
    static let resourceTimeout: Double = 7 * 24 * 3600
    /// The session that runs the transfers (on `queue`). Made when the first attempt
    /// starts, with the handlers, plugins and stores it needs: a porterd that only lists,
    /// or whose tasks all wait, never loads them (the stores' databases, the registry).
    var engine: Session {
        if let engineSession { return engineSession }
        Porter.bootstrap()
        var config = SessionConfiguration.default
        config.timeoutIntervalForResource = Daemon.resourceTimeout
        let s = Session(configuration: config, delegate: self, delegateQueue: queue)
        engineSession = s
        return s
    }
    // On `queue`:
    /// Every job's queue, limits, back-off and life cycle (`JobScheduler`); the shell
    /// below only performs its actions.
    var scheduler = JobScheduler()
    /// Events raised while actions are performed wait here (`send`).
    var pendingEvents: [JobScheduler.Event] = []
    var performing = false
    /// The running attempts' transfers (a waiting job is only its scheduler ticket).
    var transfers: [Int: Transfer] = [:]
    /// Every waiting job's deadline (earliest begin, next retry), and the one timer armed
    /// for the earliest.
    var deadlines = Deadlines()
    var armedTimer: DispatchWorkItem?
    var armedAt: Double?
    var byTask: [ObjectIdentifier: Transfer] = [:]
    var holders: [String: Connection] = [:]
    var connections: [ObjectIdentifier: Connection] = [:]
    var idleSince: Date? = Date()
    let log: FileHandle?
    var lockFD: Int32 = -1
    /// One engine session per bytes-per-second cap (the cap is a session setting).
    var capped: [Int64: Session] = [:]
    let syncQueue = DispatchQueue(label: "porterd.sync")
    var pendingChallenges: [Int: PendingChallenge] = [:]
    /// A client's message was handled since the run loop last looked (on `queue`).
    var busy = false
    var nextChallenge = 1

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
        let line = "\(Daemon.logStamp(time(nil))) porterd[\(getpid())]: \(text)\n"
        log?.write(Data(line.utf8))
    }

    /// A log line's time, ISO 8601 in UTC ("2026-11-26T06:55:35Z"), from the C library:
    /// Foundation's date formatters load ICU's calendar and time-zone data (~6 MiB of
    /// porterd's resident memory, and a formatter per line while thousands of tasks retry).
    static func logStamp(_ seconds: time_t) -> String {
        var t = seconds
        var v = tm()
        gmtime_r(&t, &v)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(v.tm_year + 1900)-\(two(v.tm_mon + 1))-\(two(v.tm_mday))T\(two(v.tm_hour)):\(two(v.tm_min)):\(two(v.tm_sec))Z"
    }

    /// Listens, resumes the journal's transfers, and serves until idle. Returns when the
    /// daemon should exit.
    public func run() throws {
        var policy = JobScheduler.Policy()
        policy.resourceTimeout = Daemon.resourceTimeout
        policy.challengeWait = challengeWait
        scheduler = JobScheduler(policy: policy)
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
            // Memory freed after a burst (thousands of tasks queued, a long list sent) goes
            // back to the system instead of staying with the allocator's arenas.
            if queue.sync(execute: { () -> Bool in defer { busy = false }; return busy }) { _ = porter_ipc_release_free_memory() }
            let done = queue.sync { () -> Bool in
                if !connections.isEmpty || !deadlines.isEmpty || transfers.values.contains(where: { $0.task != nil }) {
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
        let fd = porter_netlink_route_watch()
        guard fd >= 0 else { return note("cannot watch the network (rtnetlink): \(String(cString: strerror(errno)))") }
        let t = Thread { [self] in
            while true {
                let r = porter_netlink_route_wait(fd, -1)
                if r < 0 && errno != EINTR { return }
                if r > 0 { queue.async { self.networkChanged() } }
            }
        }
        t.start()
    }

    private func networkChanged() { send(.networkChanged) }
}
