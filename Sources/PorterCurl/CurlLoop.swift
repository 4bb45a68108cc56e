import CCurl
import Foundation
import Synchronization
import PorterCore

/// One thread driving one libcurl multi handle. Every curl call on a handle of this
/// loop happens on its thread; other threads hand it work with `execute` and wake it
/// with `curl_multi_wakeup`. Connections, DNS results and TLS sessions are cached by the
/// multi handle and reused by every transfer on the loop.
///
/// It is the `TaskExecutor` of the tasks whose handlers it serves: their life cycle runs
/// on its thread, in the callbacks of their transfers.
public final class CurlLoop: TaskExecutor, @unchecked Sendable {
    /// The loop for sessions without TLS settings of their own.
    public static let shared = CurlLoop(name: "porter.curl")

    private struct Loops {
        var byKey: [LoopKey: CurlLoop] = [:]
        var last: (key: LoopKey, loop: CurlLoop)?
        /// The settings asked for last (`SessionConfiguration.settingsVersion`) and their
        /// loop: a session's every task asks with the same configuration, answered without
        /// building and comparing its key.
        var lastConfiguration: (version: AnyObject, loop: CurlLoop)?
    }
    private static let byTrust = Locked(Loops())

    /// The loop for a session: one per distinct TLS trust configuration (and connection
    /// limit per host, and set of pinned host names). Connections are
    /// reused only within a loop, so a connection verified under one set of trust settings
    /// (CA file, pinned key, client certificate, verification off) never serves a session
    /// with other settings: libcurl does not compare them for every protocol (FTP with
    /// explicit TLS, for one).
    public static func loop(for configuration: SessionConfiguration) -> CurlLoop {
        let version = configuration.settingsVersion
        if let hit = byTrust.withLock({ $0.lastConfiguration.flatMap { $0.version === version ? $0.loop : nil } }) {
            return hit
        }
        let key = LoopKey(configuration)
        if key == LoopKey.plain {
            byTrust.withLock { $0.lastConfiguration = (version, shared) }
            return shared
        }
        // Found (or made) and remembered under one lock: a loop `forget` drops is never
        // remembered after it (it would be handed out again beside a new one for its key).
        return byTrust.withLock { loops in
            let loop = keyed(key, in: &loops)
            loops.lastConfiguration = (version, loop)
            return loop
        }
    }

    /// The loop for a session's streams (stream and WebSocket tasks): a multi handle of
    /// their own per trust configuration, as a connect-only connection sits idle in its
    /// multi's connection cache, where libcurl would count it against the per-host limit
    /// of the session's transfers and close it when pruning old or surplus connections.
    /// Here nothing limits or prunes them.
    public static func streamLoop(for configuration: SessionConfiguration) -> CurlLoop {
        var key = LoopKey(configuration)
        key.streams = true
        return loop(for: key)
    }

    private static func loop(for key: LoopKey) -> CurlLoop {
        if key == LoopKey.plain { return shared }
        return byTrust.withLock { keyed(key, in: &$0) }
    }

    /// The loop of a key that is not the plain one, made when there is none (under the lock).
    private static func keyed(_ key: LoopKey, in loops: inout Loops) -> CurlLoop {
        // The last key asked for answers without hashing (one session asks for the
        // same loop for every task).
        if let last = loops.last, last.key == key { return last.loop }
        let loop: CurlLoop
        if let existing = loops.byKey[key] {
            loop = existing
        } else {
            loop = CurlLoop(name: key.streams ? "porter.streams.\(loops.byKey.count + 1)" : "porter.curl.\(loops.byKey.count + 1)",
                            maxConnectionsPerHost: key.streams ? 0 : key.perHost, keyed: true,
                            maximumConnections: key.streams ? 1 << 20 : 64)
            loops.byKey[key] = loop
        }
        loops.last = (key, loop)
        return loop
    }

    /// What separates loops: the trust settings, the connection limit per host and the
    /// pinned names (a value compared field by field, built per task without strings).
    struct LoopKey: Hashable {
        var caFile: String?
        var insecure: Bool
        var pin: String?
        var certificate: String?
        var key: String?
        var tlsMinimum: Int?
        var tlsMaximum: Int?
        var perHost: Int
        var overrides: [HostOverride]
        /// A loop of streams (`streamLoop(for:)`).
        var streams = false

        init(_ c: SessionConfiguration) {
            caFile = c.caCertificateFile
            insecure = c.tlsVerificationDisabled
            pin = c.pinnedPublicKey
            certificate = c.clientCertificate?.certificatePath
            key = c.clientCertificate?.keyPath
            tlsMinimum = c.tlsMinimumVersion.map { Int($0.rawValue) }
            tlsMaximum = c.tlsMaximumVersion.map { Int($0.rawValue) }
            perHost = c.httpMaximumConnectionsPerHost == 6 ? 6 : max(1, c.httpMaximumConnectionsPerHost)
            // Pinned names enter the loop's DNS cache: never share them with other sessions.
            overrides = c.hostOverrides.count > 1 ? c.hostOverrides.sorted { $0.description < $1.description } : c.hostOverrides
        }

        private init() {
            insecure = false
            perHost = 6
            overrides = []
        }

        static let plain = LoopKey()
    }

    /// The body buffers of this loop's transfers (`BodyStager`): recycled across loads, so
    /// a warm loop allocates none per response.
    public let bodyBuffers = BufferPool(bufferSize: BodyStager.bufferSize, keep: 8)

    private let multi: UnsafeMutableRawPointer?
    /// The loop's thread while it runs (pthread_self of it), else 0. The thread starts
    /// with the first work and ends after `idleExit` without transfers or work, so an
    /// idle program (or a loop made for one set of pinned names) keeps no thread.
    private let threadID = Atomic<UInt>(0)
    private let name: String
    private let isKeyed: Bool

    /// How long a loop without transfers keeps its thread (milliseconds; tests shorten it).
    static let idleExitMilliseconds = Atomic<Int>(10_000)

    /// True on the loop's thread.
    public var isCurrent: Bool { threadID.load(ordering: .relaxed) == UInt(pthread_self()) }

    /// True while the loop has a thread.
    var hasThread: Bool { lock.withLock { threadRunning } }

    public func execute(_ work: @escaping @Sendable () -> Void) {
        enqueue(work)
    }
    /// False when libcurl could not make the multi handle: transfers then fail to start.
    var isUsable: Bool { multi != nil }

    /// Easy handles kept for reuse: a new handle allocates its state and a 256 KiB
    /// receive buffer, which is most of a small request's malloc work.
    private let idleHandles = Locked([UnsafeMutableRawPointer]())
    private static let idleHandleLimit = 64

    /// An easy handle with default options (from the pool, or new); nil if libcurl has no memory.
    func takeHandle() -> UnsafeMutableRawPointer? {
        idleHandles.withLock { $0.popLast() } ?? curl_easy_init()
    }

    /// Gives back a handle that is in no multi handle any more (any thread).
    func recycle(_ handle: UnsafeMutableRawPointer) {
        curl_easy_reset(handle)
        let kept = idleHandles.withLock { idle -> Bool in
            guard idle.count < CurlLoop.idleHandleLimit else { return false }
            idle.append(handle)
            return true
        }
        if !kept { curl_easy_cleanup(handle) }
    }
    private let lock = NSLock()
    // `commands`, `sleeping` and `threadRunning` are only touched under `lock`, which
    // makes each access exclusive: they skip the runtime's check (every enqueue).
    @exclusivity(unchecked) private var commands: [() -> Void] = []
    /// The loop waits in (or is about to enter) curl_multi_poll: a command must wake it.
    @exclusivity(unchecked) private var sleeping = false
    /// A thread runs (or is being started) for this loop.
    @exclusivity(unchecked) private var threadRunning = false
    // Loop thread only:
    private var active: [UnsafeMutableRawPointer: CurlTransfer] = [:]
    /// Connect-only transfers that connected: in the multi handle (libcurl finds their
    /// connection through it) until their stream closes.
    private var kept: [UnsafeMutableRawPointer: CurlTransfer] = [:]
    /// Streams waiting for their socket, with the poll events they wait for.
    private var watched: [ObjectIdentifier: (stream: CurlStream, events: Int16)] = [:]
    private var flushes: [CurlTransfer] = []
    /// The other halves of `commands` and `flushes`: a batch is swapped out and run from
    /// here, then emptied in place, so neither array is reallocated per batch (copying
    /// one out and emptying it "keeping capacity" made a new buffer each time, as the
    /// copy still shared the old one).
    private var runningCommands: [() -> Void] = []
    private var dueFlushes: [CurlTransfer] = []
    /// Loads admitted per host and the order of those waiting (`HostQueue`), with the
    /// transfers that wait (not yet in the multi handle).
    private var hostQueue: HostQueue<ObjectIdentifier>
    private var waiting: [ObjectIdentifier: CurlTransfer] = [:]

    /// Sets the socket events `stream` waits for (0: none) (loop thread).
    func watch(_ stream: CurlStream, events: Int16) {
        if events == 0 { watched[ObjectIdentifier(stream)] = nil } else { watched[ObjectIdentifier(stream)] = (stream, events) }
    }

    /// Asks for `transfer.onFlush` before the loop next waits (loop thread): a handler
    /// that batches small writes hands them over then, so batching adds no latency.
    func requestFlush(_ transfer: CurlTransfer) { flushes.append(transfer) }

    /// `maxConnectionsPerHost`: CURLMOPT_MAX_HOST_CONNECTIONS for every transfer of
    /// this loop (a loop serves sessions whose settings agree: see `loop(for:)`).
    public convenience init(name: String, maxConnectionsPerHost: Int = 6) {
        self.init(name: name, maxConnectionsPerHost: max(1, maxConnectionsPerHost), keyed: false)
    }

    /// `maxConnectionsPerHost` 0: no limit (a loop of streams).
    private init(name: String, maxConnectionsPerHost: Int, keyed: Bool, maximumConnections: Int = 64) {
        CurlLoop.globalInit
        self.name = name
        self.isKeyed = keyed
        hostQueue = HostQueue(limit: maxConnectionsPerHost)
        multi = curl_multi_init()
        guard let multi else { return }
        _ = porter_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, maximumConnections)
        _ = porter_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, maxConnectionsPerHost)
    }

    deinit {
        for handle in idleHandles.withLock({ $0 }) { curl_easy_cleanup(handle) }
        if let multi { curl_multi_cleanup(multi) }
    }

    /// Starts the loop's thread (the caller set `threadRunning` under the lock). The
    /// thread holds the loop until it ends.
    private func startThread() {
        let thread = Thread { self.run() }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
    }

    private static let globalInit: Void = { curl_global_init(porter_global_default) }()

    /// Runs `work` on the loop thread, soon.
    public func enqueue(_ work: @escaping () -> Void) {
        guard let multi else {
            work()  // no loop thread (libcurl had no memory): transfers fail as they start
            return
        }
        lock.lock()
        commands.append(work)
        // Wake the loop only when it waits (or is about to): a busy loop takes the
        // command before its next wait anyway, and a wake-up is a syscall.
        let wake = sleeping
        sleeping = false
        let start = !threadRunning
        threadRunning = true
        lock.unlock()
        if start {
            startThread()
        } else if wake {
            curl_multi_wakeup(multi)
        }
    }

    /// Starts a configured transfer, or queues it behind the loads its host already has
    /// when it would need a connection over the limit (`HostQueue`) (loop thread).
    func add(_ transfer: CurlTransfer) {
        guard multi != nil else { return transfer.finish(CURLE_OUT_OF_MEMORY) }
        if let host = transfer.queueHost, !transfer.keepsConnection,
           !hostQueue.arrive(ObjectIdentifier(transfer), host: host, priority: transfer.priority) {
            waiting[ObjectIdentifier(transfer)] = transfer
            transfer.isWaiting = true
            return
        }
        begin(transfer)
    }

    private func begin(_ transfer: CurlTransfer) {
        guard let multi else { return transfer.finish(CURLE_OUT_OF_MEMORY) }
        transfer.isWaiting = false
        active[transfer.easy] = transfer
        let rc = curl_multi_add_handle(multi, transfer.easy)
        if rc != CURLM_OK {
            active[transfer.easy] = nil
            release(transfer)
            transfer.finish(CURLE_FAILED_INIT)
        }
    }

    /// `transfer` is out of the multi handle: the load waiting for its place starts.
    private func release(_ transfer: CurlTransfer) {
        guard transfer.queueHost != nil, let next = hostQueue.leave(ObjectIdentifier(transfer)),
              let t = waiting.removeValue(forKey: next) else { return }
        begin(t)
    }

    /// Stops a transfer without a completion (loop thread); closes a kept connection.
    func remove(_ transfer: CurlTransfer) {
        guard let multi else { return }
        if waiting.removeValue(forKey: ObjectIdentifier(transfer)) != nil {
            _ = hostQueue.leave(ObjectIdentifier(transfer))
            return
        }
        guard active.removeValue(forKey: transfer.easy) != nil || kept.removeValue(forKey: transfer.easy) != nil else { return }
        curl_multi_remove_handle(multi, transfer.easy)
        release(transfer)
    }

    /// Transfers added and not ended: in the multi handle, or waiting for their host
    /// (tests; from any thread but the loop's).
    func transferCount() -> (running: Int, waiting: Int) {
        let counts = Locked((0, 0))
        let done = DispatchSemaphore(value: 0)
        enqueue {
            counts.withLock { $0 = (self.active.count, self.waiting.count) }
            done.signal()
        }
        done.wait()
        return counts.current
    }

    private func run() {
        guard let multi else { return }
        threadID.store(UInt(pthread_self()), ordering: .relaxed)
        // Foundation's Thread.name does not reach the kernel here: name it for ps and /proc.
        porter_name_this_thread(name)
        porter_block_sigpipe_on_this_thread()
        var running: Int32 = 0
        var idleSince: ContinuousClock.Instant?
        while true {
            lock.lock()
            swap(&commands, &runningCommands)
            lock.unlock()
            for w in runningCommands { w() }
            runningCommands.removeAll(keepingCapacity: true)

            curl_multi_perform(multi, &running)
            var left: Int32 = 0
            while let msg = curl_multi_info_read(multi, &left) {
                guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
                let result = porter_curlmsg_result(msg)
                if let transfer = active.removeValue(forKey: easy) {
                    if transfer.keepsConnection && result == CURLE_OK {
                        kept[easy] = transfer
                    } else {
                        curl_multi_remove_handle(multi, easy)
                        // First the load that waited for this place, then this one's end
                        // (which may add the next load of its task).
                        release(transfer)
                    }
                    transfer.finish(result)
                }
            }
            if !flushes.isEmpty {
                // More bytes already waiting? Keep batching; flush only before a real wait.
                var ready: Int32 = 0
                curl_multi_poll(multi, nil, 0, 0, &ready)
                if ready > 0 { continue }
                swap(&flushes, &dueFlushes)
                for t in dueFlushes { t.flush() }
                dueFlushes.removeAll(keepingCapacity: true)
            }
            let limit = CurlLoop.idleExitMilliseconds.load(ordering: .relaxed)
            if active.isEmpty && flushes.isEmpty && kept.isEmpty && watched.isEmpty && waiting.isEmpty {
                let now = ContinuousClock.now
                if let since = idleSince, now - since >= .milliseconds(limit) {
                    if endThreadIfIdle() { return }
                    idleSince = nil
                } else if idleSince == nil {
                    idleSince = now
                }
            } else {
                idleSince = nil
            }
            lock.lock()
            let pending = !commands.isEmpty
            sleeping = !pending
            lock.unlock()
            if !pending {
                let timeout = Int32(min(1000, max(10, limit)))
                if watched.isEmpty {
                    curl_multi_poll(multi, nil, 0, timeout, nil)
                } else {
                    waitForSockets(multi, timeout: timeout)
                }
                lock.lock()
                sleeping = false
                lock.unlock()
            }
        }
    }

    /// Waits for libcurl's sockets and the watched streams' together, then lets each
    /// stream whose socket is ready go on (loop thread).
    private func waitForSockets(_ multi: UnsafeMutableRawPointer, timeout: Int32) {
        let entries = Array(watched.values)
        var fds = entries.map { curl_waitfd(fd: $0.stream.pollSocket, events: $0.events, revents: 0) }
        curl_multi_poll(multi, &fds, UInt32(fds.count), timeout, nil)
        for (i, fd) in fds.enumerated() where fd.revents != 0 {
            entries[i].stream.socketReady(fd.revents)
        }
    }

    /// Ends the loop's thread unless work arrived (loop thread). The handles kept for
    /// reuse go (their receive buffers are most of an idle loop's memory); a loop made for
    /// one session's settings leaves the table, so a program that made many (one set of
    /// pinned names per session, say) keeps none of them once they are idle.
    private func endThreadIfIdle() -> Bool {
        lock.lock()
        guard commands.isEmpty else {
            lock.unlock()
            return false
        }
        threadRunning = false
        sleeping = false
        threadID.store(0, ordering: .relaxed)
        lock.unlock()
        for handle in idleHandles.withLock({ idle in defer { idle.removeAll() }; return idle }) {
            curl_easy_cleanup(handle)
        }
        if isKeyed { CurlLoop.forget(self) }
        return true
    }

    private static func forget(_ loop: CurlLoop) {
        byTrust.withLock { loops in
            for (key, value) in loops.byKey where value === loop { loops.byKey[key] = nil }
            if loops.last?.loop === loop { loops.last = nil }
            if loops.lastConfiguration?.loop === loop { loops.lastConfiguration = nil }
        }
    }

    /// How many loops made for particular settings exist (tests).
    static var keyedLoopCount: Int { byTrust.withLock { $0.byKey.count } }

    /// Whether `loop` is still in the table of loops made for particular settings (tests:
    /// other tests' loops that never ran stay there, so a count says less).
    package static func isInTable(_ loop: CurlLoop) -> Bool {
        byTrust.withLock { $0.byKey.values.contains { $0 === loop } }
    }
}
