import CCurl
import Foundation
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

    private static let byTrust = Locked([LoopKey: CurlLoop]())

    /// The loop for a session: one per distinct TLS trust configuration (and connection
    /// limit per host, and set of pinned host names). Connections are
    /// reused only within a loop, so a connection verified under one set of trust settings
    /// (CA file, pinned key, client certificate, verification off) never serves a session
    /// with other settings: libcurl does not compare them for every protocol (FTP with
    /// explicit TLS, for one).
    public static func loop(for configuration: SessionConfiguration) -> CurlLoop {
        let key = LoopKey(configuration)
        if key == LoopKey.plain { return shared }
        return byTrust.withLock { loops in
            if let existing = loops[key] { return existing }
            let made = CurlLoop(name: "porter.curl.\(loops.count + 1)",
                                maxConnectionsPerHost: max(1, configuration.httpMaximumConnectionsPerHost))
            loops[key] = made
            return made
        }
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
    /// The loop's thread (set once, before it starts).
    private var thread: Thread?

    /// True on the loop's thread.
    public var isCurrent: Bool { thread.map { Thread.current === $0 } ?? false }

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
    private var commands: [() -> Void] = []
    /// The loop waits in (or is about to enter) curl_multi_poll: a command must wake it.
    private var sleeping = false
    // Loop thread only:
    private var active: [UnsafeMutableRawPointer: CurlTransfer] = [:]
    private var flushes: [CurlTransfer] = []

    /// Asks for `transfer.onFlush` before the loop next waits (loop thread): a handler
    /// that batches small writes hands them over then, so batching adds no latency.
    func requestFlush(_ transfer: CurlTransfer) { flushes.append(transfer) }

    /// `maxConnectionsPerHost`: CURLMOPT_MAX_HOST_CONNECTIONS for every transfer of
    /// this loop (a loop serves sessions whose settings agree: see `loop(for:)`).
    public init(name: String, maxConnectionsPerHost: Int = 6) {
        CurlLoop.globalInit
        multi = curl_multi_init()
        guard let multi else { return }
        _ = porter_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, 64)
        _ = porter_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, maxConnectionsPerHost)
        let thread = Thread { [unowned self] in self.run() }
        thread.name = name
        thread.stackSize = 1 << 20
        self.thread = thread
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
        lock.unlock()
        if wake { curl_multi_wakeup(multi) }
    }

    /// Starts a configured transfer (loop thread).
    func add(_ transfer: CurlTransfer) {
        guard let multi else { return transfer.finish(CURLE_OUT_OF_MEMORY) }
        active[transfer.easy] = transfer
        let rc = curl_multi_add_handle(multi, transfer.easy)
        if rc != CURLM_OK {
            active[transfer.easy] = nil
            transfer.finish(CURLE_FAILED_INIT)
        }
    }

    /// Stops a transfer without a completion (loop thread).
    func remove(_ transfer: CurlTransfer) {
        guard let multi, active.removeValue(forKey: transfer.easy) != nil else { return }
        curl_multi_remove_handle(multi, transfer.easy)
    }

    private func run() {
        guard let multi else { return }
        var running: Int32 = 0
        while true {
            lock.lock()
            let work = commands
            commands.removeAll(keepingCapacity: true)
            lock.unlock()
            for w in work { w() }

            curl_multi_perform(multi, &running)
            var left: Int32 = 0
            while let msg = curl_multi_info_read(multi, &left) {
                guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
                let result = porter_curlmsg_result(msg)
                if let transfer = active.removeValue(forKey: easy) {
                    curl_multi_remove_handle(multi, easy)
                    transfer.finish(result)
                }
            }
            if !flushes.isEmpty {
                // More bytes already waiting? Keep batching; flush only before a real wait.
                var ready: Int32 = 0
                curl_multi_poll(multi, nil, 0, 0, &ready)
                if ready > 0 { continue }
                let due = flushes
                flushes.removeAll(keepingCapacity: true)
                for t in due { t.flush() }
            }
            lock.lock()
            let pending = !commands.isEmpty
            sleeping = !pending
            lock.unlock()
            if !pending {
                curl_multi_poll(multi, nil, 0, 1000, nil)
                lock.lock()
                sleeping = false
                lock.unlock()
            }
        }
    }
}
