import CPorterIPC
import CPorterPlugin
import Foundation
import Logging
import PorterCore
import PorterStorage
import PorterIPC

/// The factory of an isolated plugin: its handlers forward every load to the plugin's worker.
final class IsolatedPluginFactory: ProtocolHandlerFactory, @unchecked Sendable {
    let plugin: IsolatedPlugin
    init(plugin: IsolatedPlugin) { self.plugin = plugin }
    var schemes: Set<String> { Set(plugin.description.schemes.map(\.name)) }
    var name: String { plugin.description.name }
    /// The plugin's own `can_handle` is asked in the worker, at start.
    func canHandle(_ request: Request) -> Bool { true }
    func canonicalRequest(for request: Request) -> Request { request }
    func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool { a.url == b.url }
    var mayBeRedirectTarget: Bool { plugin.description.schemes.contains { $0.mayBeRedirectTarget } }
    func mayBeRedirectTarget(scheme: String) -> Bool {
        plugin.description.schemes.first { $0.name == scheme }?.mayBeRedirectTarget ?? false
    }
    /// As the worker's probe read them from the descriptor (`PluginDescription`).
    func defaultPort(for scheme: String) -> Int? { plugin.description.schemes.defaultPort(for: scheme) }
    func carriesCookies(for scheme: String) -> Bool { plugin.description.schemes.carriesCookies(for: scheme) }
    func makeHandler(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) -> any ProtocolHandler {
        IsolatedHandler(plugin: plugin, request: request, cached: cachedResponse, client: client)
    }
}

/// One plugin file run in workers: starts a worker on first use and after a crash, and
/// disables the plugin when it keeps crashing.
final class IsolatedPlugin: @unchecked Sendable {
    let path: String
    let description: PluginDescription
    /// The checked plugin file, open for the life of the process; each worker maps it.
    let fd: Int32
    let workerPath: String
    let isolation: PluginIsolation
    private let lock = NSLock()
    private var current: WorkerProcess?
    private var crashes: [Date] = []
    private var disabledReason: String?
    /// Why no load may start at all (the stand-in below), checked before anything else.
    private let refusal: PorterError?
    static let logger = Logger(label: "porter.plugins")
    /// Workers started (`IsolatedPluginStatus.workersStarted`).
    private(set) var workersStarted = 0

    init(path: String, description: PluginDescription, fd: Int32, workerPath: String, isolation: PluginIsolation,
         refusal: PorterError? = nil) {
        self.path = path
        self.description = description
        self.fd = fd
        self.workerPath = workerPath
        self.isolation = isolation
        self.refusal = refusal
        if !description.subscriptions.isEmpty {
            let wanted = Set(description.subscriptions)
            // Subscriptions last for the process, as the plugin lives for it. The event is
            // posted on the loop thread (or a task's executor): finding or starting the
            // worker happens on the plugin's own event queue, in order, as in process.
            let queue = HookQueue(image: path)
            _ = TaskEventCenter.shared.addObserver { [weak self] event in
                guard let wire = WireTaskEvent(event), wanted.contains(wire.kind) else { return }
                queue.enqueue { [weak self] in
                    guard let self, case .success(let worker) = self.worker() else { return }
                    worker.send(.event(wire))
                }
            }
        }
    }

    var name: String { description.name }

    /// Stands in for the plugin of a handler made without its factory (never the case
    /// through the registry): each of its loads fails with `unsupportedURL`.
    static let none = IsolatedPlugin(
        path: "", description: PluginDescription(name: "unknown", version: "?", schemes: [], readPaths: [], writePaths: [],
                                                 subscriptions: [], abiMinor: Int(PORTER_PLUGIN_ABI_MINOR), needs: 0),
        fd: -1, workerPath: "", isolation: PluginIsolation(),
        refusal: PorterError(.unsupportedURL, "a plugin handler made without its plugin's factory has no plugin to load with"))

    /// The running worker, started if there is none; or why the plugin cannot run.
    func worker() -> Result<WorkerProcess, PorterError> {
        if let refusal { return .failure(refusal) }
        lock.lock()
        defer { lock.unlock() }
        if let disabledReason { return .failure(PorterError(.pluginCrashed, disabledReason)) }
        if let current, current.isAlive { return .success(current) }
        do {
            let w = try WorkerProcess.start(plugin: self)
            current = w
            workersStarted += 1
            return .success(w)
        } catch {
            return .failure(error)
        }
    }

    /// A worker ended while it had work, or was killed: counts toward disabling.
    func workerDied(_ worker: WorkerProcess, crashed: Bool) {
        lock.lock()
        defer { lock.unlock() }
        if current === worker { current = nil }
        guard crashed else { return }
        let now = Date()
        crashes = crashes.filter { now.timeIntervalSince($0) < isolation.crashWindow } + [now]
        if crashes.count >= isolation.crashLimit, disabledReason == nil {
            disabledReason = "plugin \(name) is disabled: its worker died \(crashes.count) times within \(Int(isolation.crashWindow)) s"
            Self.logger.error("\(path): \(disabledReason!)")
        }
    }

    private var lastSandbox: String?
    func noteSandbox(_ s: String) { lock.withLock { lastSandbox = s } }

    var status: IsolatedPluginStatus {
        lock.withLock {
            IsolatedPluginStatus(path: path, name: name, workerPID: current?.isAlive == true ? current?.pid : nil,
                                 workersStarted: workersStarted, disabledReason: disabledReason, sandbox: lastSandbox,
                                 readPaths: profile.readPaths, writePaths: profile.writePaths, network: profile.network,
                                 needs: LocalService.names(of: description.needs))
        }
    }

    /// Arguments for the worker: name, limits, network, paths ("~/" expanded).
    var workerArguments: [String] {
        let network = description.isLegacy || description.schemes.contains { $0.needsNetwork }
        let program = PluginWorker.Program(path: workerPath, isSelf: workerPath == PluginWorker.selfExecutable)
        var a = program.leadingArguments + ["--serve", "--name", name,
                 "--memory-mb", String(isolation.memoryLimitMB), "--cpu-seconds", String(isolation.cpuLimitSeconds),
                 "--network", network ? "1" : "0", "--legacy", description.isLegacy ? "1" : "0"]
        // Checked again now (a link may have moved since the load), and handed over
        // resolved; the user's own additions go through the same bounds.
        for (paths, write) in [(description.readPaths + isolation.readablePaths, false),
                               (description.writePaths + isolation.writablePaths, true)] {
            for p in paths.prefix(64) {
                if let why = DeclaredPaths.refusal(p, write: write) {
                    Self.logger.error("plugin \(name): \(write ? "write" : "read") path '\(p)' not granted: \(why)")
                } else if let e = DeclaredPaths.expand(p).map(DeclaredPaths.resolve) {
                    a += [write ? "--write" : "--read", e]
                }
            }
        }
        return a
    }

    /// The declared paths, and whether the network is granted (for `porter plugins`).
    var profile: (readPaths: [String], writePaths: [String], network: Bool) {
        (description.readPaths + isolation.readablePaths, description.writePaths + isolation.writablePaths,
         description.isLegacy || description.schemes.contains { $0.needsNetwork })
    }

    /// The sandbox report of a running worker (one is started if none runs), waiting
    /// up to `timeout` for its greeting; nil when none came.
    func sandboxReport(timeout: TimeInterval) -> String? {
        if let s = lock.withLock({ lastSandbox }) { return s }
        guard case .success = worker() else { return nil }
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let s = lock.withLock({ lastSandbox }) { return s }
            usleep(10_000)
        }
        return nil
    }
}

/// One running worker: its process, its socket, and the loads in flight on it.
///
/// Nothing the host does waits on the worker: messages to it go through a queue that a
/// writer thread of its own drains, so a worker that stops reading cannot hold a session's
/// thread (or every task's event post); a queue that grows past `outboundLimit` means the
/// worker stopped reading, and it is killed.
final class WorkerProcess: @unchecked Sendable {
    let pid: pid_t
    let channel: Channel
    unowned let plugin: IsolatedPlugin
    private let lock = NSCondition()
    private var loads: [UInt64: IsolatedHandler] = [:]
    private var nextLoad: UInt64 = 0
    private var alive = true
    private var reaped = false
    private var killReason: String?
    /// Encoded bytes waiting for the writer thread (each with a descriptor to pass along
    /// with its first byte, or -1), and whether it is sending some now.
    private var outbound: [(bytes: [UInt8], descriptor: Int32)] = []
    private var outboundBytes = 0
    private var writing = false
    static let outboundLimit = 16 << 20
    /// Larger than a data frame: a request with big header fields still fits.
    static let maximumPayload = 4 << 20
    /// How long a worker whose connection closed may take to exit before it is killed
    /// and reported as "closed its connection": only a worker that closed its socket and
    /// lives on waits this long; an exit ends the wait at once.
    static let exitWaitMilliseconds: Int32 = 30_000

    /// The copier of the worker's stderr (nil when no pipe could be made).
    private let stderrCopy: WorkerStderr?

    private init(pid: pid_t, channel: Channel, plugin: IsolatedPlugin, stderrCopy: WorkerStderr?) {
        self.pid = pid
        self.channel = channel
        self.plugin = plugin
        self.stderrCopy = stderrCopy
    }

    static func start(plugin: IsolatedPlugin) throws(PorterError) -> WorkerProcess {
        // A raw pair: the child's end is only closed here, never shut down (a Channel
        // would shut the socket down for both processes when it goes away).
        var fds: [Int32] = [-1, -1]
        guard porter_ipc_socketpair(&fds) == 0 else {
            throw PorterError(.pluginCrashed, "plugin \(plugin.name): cannot make a socket for its worker: \(String(cString: strerror(errno)))")
        }
        let host = Channel(fd: fds[0], maximumPayload: maximumPayload)
        let child = fds[1]
        // Room for several body chunks each way: the worker reads its next chunk from the
        // server while this process takes the last one (a default buffer holds less than
        // one chunk, so each send waited for the reader).
        host.setBufferSizes(WorkerWire.socketBuffer)
        Channel.setBufferSizes(child, WorkerWire.socketBuffer)
        let args = plugin.workerArguments
        let copies = args.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        var argv: [UnsafeMutablePointer<CChar>?] = copies + [nil]
        // The worker's stderr is a pipe this process copies from, never its own stderr
        // (the user's terminal, which the plugin could read through /proc/self/fd/2).
        var errPipe: [Int32] = [-1, -1]
        if porter_ipc_pipe(&errPipe) != 0 { errPipe = [-1, -1] }
        let pid = argv.withUnsafeMutableBufferPointer {
            porter_ipc_spawn_worker_err(plugin.workerPath, $0.baseAddress, child, plugin.fd, errPipe[1])
        }
        let spawnErrno = errno
        Glibc.close(child)
        if errPipe[1] >= 0 { Glibc.close(errPipe[1]) }
        guard pid > 0 else {
            if errPipe[0] >= 0 { Glibc.close(errPipe[0]) }
            throw PorterError(.pluginCrashed, "plugin \(plugin.name): cannot start \(plugin.workerPath): \(String(cString: strerror(spawnErrno)))")
        }
        let stderrCopy = errPipe[0] >= 0 ? WorkerStderr.start(from: errPipe[0], plugin: plugin.name, pid: pid) : nil
        let w = WorkerProcess(pid: pid, channel: host, plugin: plugin, stderrCopy: stderrCopy)
        // The greeting goes first; the reader takes the answer.
        w.send(WorkerWire.hello.frame)
        let bodies: [(String, @Sendable () -> Void)] = [("porter-plugin-\(pid)", { w.readLoop() }),
                                                        ("porter-plugin-\(pid)-w", { w.writeLoop() })]
        for (name, body) in bodies {
            let thread = Thread(block: body)
            thread.name = name
            thread.stackSize = 256 << 10
            thread.start()
        }
        return w
    }

    /// Alive and not being killed (a reader waiting for a paused load gives up once this
    /// is false).
    var isAlive: Bool { lock.withLock { alive && killReason == nil } }

    /// Registers a load; nil when the worker already died or is being killed.
    func attach(_ handler: IsolatedHandler) -> UInt64? {
        lock.withLock {
            guard alive, killReason == nil else { return nil }
            nextLoad += 1
            loads[nextLoad] = handler
            return nextLoad
        }
    }

    func detach(_ id: UInt64) { _ = lock.withLock { loads.removeValue(forKey: id) } }

    func send(_ m: ToWorker, passing descriptor: Int32 = -1) {
        guard let bytes = WorkerCodec.encoded(m) else {
            if descriptor >= 0 { Glibc.close(descriptor) }
            return
        }
        send(encoded: bytes, passing: descriptor)
    }

    func send(_ frame: Frame, passing descriptor: Int32 = -1) {
        send(encoded: frame.encoded(), passing: descriptor)
    }

    /// Sends a frame without ever blocking: at once when nothing is queued and the socket
    /// takes it whole, else (what is left of it) through the writer thread's queue.
    /// `passing`: a descriptor this process owns, handed to the worker with the frame's
    /// first byte (SCM_RIGHTS) and closed here once sent (or once the worker is gone).
    func send(encoded: [UInt8], passing descriptor: Int32 = -1) {
        var bytes = encoded
        var pass = descriptor
        let overflow = lock.withLock { () -> Bool in
            guard alive, killReason == nil else { return false }
            if outbound.isEmpty && !writing {
                let n = bytes.withUnsafeBytes {
                    porter_ipc_send_with_fd(channel.fd, $0.baseAddress, $0.count, pass, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                }
                if n > 0, pass >= 0 { Glibc.close(pass); pass = -1 }   // it went with the first byte
                if n == bytes.count { return false }
                if n > 0 { bytes.removeFirst(n) }
            }
            outbound.append((bytes, pass))
            pass = -1
            outboundBytes += bytes.count
            lock.broadcast()
            return outboundBytes > Self.outboundLimit
        }
        if pass >= 0 { Glibc.close(pass) }   // not queued: the worker is gone
        if overflow { kill(reason: "its worker was killed: it stopped reading what the host sent it") }
    }

    private func writeLoop() {
        while true {
            let batch = lock.withLock { () -> [(bytes: [UInt8], descriptor: Int32)]? in
                while outbound.isEmpty && alive && killReason == nil { lock.wait() }
                guard alive, killReason == nil else { return nil }
                defer { outbound.removeAll(keepingCapacity: true); outboundBytes = 0; writing = true }
                return outbound
            }
            guard let batch else { dropOutbound(); return }
            for (i, item) in batch.enumerated() {
                do {
                    try channel.sendRaw(item.bytes, passing: item.descriptor)
                    if item.descriptor >= 0 { Glibc.close(item.descriptor) }
                } catch {
                    // The reader sees the end; what was not sent is not leaked.
                    for rest in batch[i...] where rest.descriptor >= 0 { Glibc.close(rest.descriptor) }
                    dropOutbound()
                    return
                }
            }
            lock.withLock { writing = false }
        }
    }

    /// Closes the descriptors of what will never be sent now.
    private func dropOutbound() {
        let left = lock.withLock { () -> [Int32] in
            defer { outbound.removeAll(); outboundBytes = 0 }
            return outbound.map(\.descriptor).filter { $0 >= 0 }
        }
        for d in left { Glibc.close(d) }
    }

    /// Ends the worker now (SIGKILL); its loads fail with `reason`.
    func kill(reason: String) {
        lock.withLock {
            guard alive, !reaped, killReason == nil else { return }
            killReason = reason
            lock.broadcast()
            // Under the lock: the pid cannot have been reaped (and reused) meanwhile.
            Glibc.kill(pid, SIGKILL)
        }
        channel.close()
    }

    private func readLoop() {
        var failure: String?
        do {
            let reply = try Hello(frame: try channel.receive())
            guard reply.service == WorkerWire.hello.service, reply.minimumVersion == reply.maximumVersion,
                  reply.minimumVersion == WorkerWire.hello.maximumVersion else {
                throw IPCError(.versionMismatch, "the worker speaks \(reply.service) \(reply.minimumVersion)–\(reply.maximumVersion)")
            }
            while true {
                switch try channel.receiveIncoming() {
                case .data(let id, let body):
                    if let h = handler(id) { h.deliverData(body, from: self) }
                case .frame(let frame):
                    handle(try WorkerCodec.decode(FromWorker.self, from: frame))
                }
            }
        } catch let error as IPCError {
            // A close between frames is the worker's end; one in the middle of a frame is a
            // frame cut short (the protocol broken), and the load's error says so.
            failure = error.code == .closed ? (error.message == "the peer closed the connection" ? nil : error.message) : error.description
        } catch {
            failure = "\(error)"
        }
        finish(protocolFailure: failure)
    }

    private func handler(_ id: UInt64) -> IsolatedHandler? { lock.withLock { loads[id] } }

    private func handle(_ m: FromWorker) {
        switch m {
        case .ready(_, let sandbox):
            plugin.noteSandbox(sandbox)
        case .response(let id, let head): handler(id)?.workerResponse(head)
        case .redirect(let id, let url, let head): handler(id)?.workerRedirect(url, head)
        case .finish(let id):
            // What the plugin wrote to stderr before it ended the load is shown first.
            stderrCopy?.drain()
            handler(id)?.workerFinish()
        case .fail(let id, let code, let message, let domain, let causeCode):
            stderrCopy?.drain()
            handler(id)?.workerFail(code: code, message: message, domain: domain, causeCode: causeCode)
        case .challenge(let id, let c): handler(id)?.workerChallenge(c)
        case .cancelChallenge(let id, let c): handler(id)?.workerCancelChallenge(c)
        case .cachedValid(let id, let revalidated): handler(id)?.workerCachedValid(revalidated)
        case .sent(let id, let bytes, let total, let expected): handler(id)?.workerSent(bytes, total, expected)
        case .readBody(let id, let capacity): handler(id)?.workerReadBody(capacity)
        case .log(let id, let level, let text):
            let lvl: Logger.Level = [.trace, .debug, .info, .warning, .error][max(0, min(4, level))]
            let logger = id.flatMap { handler($0) }?.logger ?? IsolatedPlugin.logger
            logger.log(level: lvl, "plugin \(plugin.name): \(text)")
        case .destroyed(let id):
            let h = lock.withLock { loads.removeValue(forKey: id) }
            h?.workerDestroyed()
        case .connectService(let id, let request, let service):
            if let h = handler(id) {
                h.workerConnectService(request: request, service: service, worker: self)
            } else {
                // No such load (over, or never): refused, and nothing is connected.
                send(.service(load: id, request: request, code: PorterError.Code.cancelled.rawValue,
                              message: "no load \(id) in flight"))
            }
        }
    }

    /// The worker is gone: say why, fail what was in flight, reap it.
    private func finish(protocolFailure: String?) {
        let (killed, orphans) = lock.withLock { () -> (String?, [IsolatedHandler]) in
            alive = false
            lock.broadcast()
            if protocolFailure != nil && killReason == nil { Glibc.kill(pid, SIGKILL) }
            defer { loads.removeAll() }
            return (killReason, Array(loads.values))
        }
        channel.close()
        dropOutbound()
        // The exit status says why. A worker whose connection closed is exiting (the kernel
        // closes its socket as it goes, or it was killed): wait for that exit as an event,
        // with a deadline that only bounds a worker that closed its socket and lives on — a
        // short one would, under load, report a crash as "closed its connection".
        var status: Int32 = 0
        // A worker the host killed is reported by that reason, whatever its status: a short
        // wait, so one stuck in the kernel does not hold this thread (it is reaped off it).
        let exited = porter_ipc_wait_exit(pid, killed == nil ? Self.exitWaitMilliseconds : 1000, &status) == 1
        if !exited {
            _ = lock.withLock { Glibc.kill(pid, SIGKILL) }
        }
        let why: String
        var crashed = true
        let signal = exited ? status & 0x7f : 0
        if let killed {
            why = killed
        } else if signal != 0, !(protocolFailure != nil && signal == SIGKILL) {
            // (A SIGKILL after a protocol failure is this process's own: the failure says why.)
            why = "its worker crashed (\(PluginProbe.signalName(signal)))"
        } else if let protocolFailure {
            why = "its worker broke the protocol (\(protocolFailure)) and was stopped"
        } else if exited {
            let code = (status >> 8) & 0xff
            why = "its worker exited with status \(code)"
            crashed = code != 0
        } else {
            why = "its worker closed its connection and was killed"
        }
        // What it wrote before it went (a crash report, say) is shown before its loads fail.
        stderrCopy?.drain()
        plugin.workerDied(self, crashed: crashed || !orphans.isEmpty)
        for h in orphans { h.workerDied("plugin \(plugin.name): \(why)") }
        if !exited {
            // Reaped off this thread: a worker stuck in the kernel must not hold it.
            let pid = self.pid
            DispatchQueue.global().async {
                var st: Int32 = 0
                while waitpid(pid, &st, 0) < 0 && errno == EINTR {}
                self.lock.withLock { self.reaped = true }
            }
        } else {
            lock.withLock { reaped = true }
        }
    }
}
