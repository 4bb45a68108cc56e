import CPorterIPC
import CPorterPlugin
import Foundation
import HTTPTypes
import Logging
import PorterCore
import PorterStorage
import PorterIPC
import PorterPluginKit

/// The worker side: `porter-plugin-worker --serve` confines itself (porter_worker_sandbox),
/// maps the plugin the host opened and checked (fd 4), and serves its loads over the
/// socket the host handed it (fd 3), until the host goes away.
public enum PluginWorkerServer {
    /// Runs the worker; never returns.
    public static func serve(arguments: [String]) -> Never {
        var name = "plugin", memoryMB: UInt64 = 0, cpuSeconds: UInt64 = 0, network = false, legacy = false
        var reads: [String] = [], writes: [String] = []
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            let value = i + 1 < arguments.count ? arguments[i + 1] : ""
            switch a {
            case "--name": name = value; i += 1
            case "--memory-mb": memoryMB = UInt64(value) ?? 0; i += 1
            case "--cpu-seconds": cpuSeconds = UInt64(value) ?? 0; i += 1
            case "--network": network = value == "1"; i += 1
            case "--legacy": legacy = value == "1"; i += 1
            case "--read": reads.append(value); i += 1
            case "--write": writes.append(value); i += 1
            default: break
            }
            i += 1
        }
        let channel = Channel(fd: 3, maximumPayload: WorkerProcess.maximumPayload)
        // The host hands over connected descriptors for local services (connect_service).
        channel.receivesDescriptors = true
        do {
            try channel.answer(WorkerWire.hello)
        } catch {
            _exit(65)
        }
        // The sandbox first: nothing of the plugin's has run yet.
        let (status, report) = confine(pluginFD: 4, memoryMB: memoryMB, cpuSeconds: cpuSeconds, network: network,
                                       legacy: legacy, reads: reads, writes: writes)
        if status < 0 {
            channel.goodbye("the sandbox could not be set up: \(String(cString: strerror(errno))) \(report)")
            _exit(70)
        }
        let sandbox = describe(status, skipped: report)
        // A write to a socket whose peer closed (the agent's, a server's) fails with EPIPE
        // instead of killing the worker: the plugin sees an error, as it would in a host
        // that ignores SIGPIPE, and its loads in flight do not die with it. The worker's
        // own writes to the host end it on any error already.
        signal(SIGPIPE, SIG_IGN)
        _ = dlerror()
        guard let handle = dlopen("/proc/self/fd/4", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE),
              let symbol = dlsym(handle, PORTER_PLUGIN_ENTRY_SYMBOL) else {
            channel.goodbye("cannot map the plugin: " + (dlerror().map { String(cString: $0) } ?? "no entry point"))
            _exit(71)
        }
        let entry = unsafeBitCast(symbol, to: porter_plugin_entry_fn.self)
        let factory: PluginHandlerFactory
        switch PluginLoader.describe(entry: entry, path: name) {
        case .failure(let d):
            channel.goodbye("the plugin was refused: \(d)")
            _exit(72)
        case .success(let (f, _)):
            factory = f
        }
        let server = Server(channel: channel, factory: factory)
        server.send(.ready(subscriptions: PluginEvents.shared.subscribedEvents, sandbox: sandbox))
        server.run()
    }

    /// Confines this process (porter_worker_sandbox): the status (bits of what is in
    /// force, or -1) and what was skipped.
    public static func confine(pluginFD: Int32, memoryMB: UInt64 = 4096, cpuSeconds: UInt64 = 0, network: Bool = false,
                               legacy: Bool = false, reads: [String] = [], writes: [String] = []) -> (Int32, String) {
        let home = ProcessInfo.processInfo.environment["HOME"]
        var report = [CChar](repeating: 0, count: 1024)
        let closed = XDG.porterFolders()
        let status: Int32 = withCStrings(reads) { readList in
            withCStrings(writes) { writeList in
                withCStrings(closed) { closedList in
                    var box = porter_sandbox()
                    box.closed_paths = closedList.baseAddress.map { UnsafePointer($0) }
                    box.closed_path_count = UInt32(closedList.count)
                    box.memory_bytes = memoryMB * 1_048_576
                    box.cpu_seconds = cpuSeconds
                    box.network = network ? 1 : 0
                    box.legacy = legacy ? 1 : 0
                    box.plugin_fd = pluginFD
                    box.read_paths = readList.baseAddress.map { UnsafePointer($0) }
                    box.read_path_count = UInt32(readList.count)
                    box.write_paths = writeList.baseAddress.map { UnsafePointer($0) }
                    box.write_path_count = UInt32(writeList.count)
                    return home.withOptionalCString { h in
                        box.home = h
                        return porter_worker_sandbox(&box, &report, report.count)
                    }
                }
            }
        }
        return (status, CErrorBuffer.read(report))
    }

    /// The probe's answer line: `RESULT {description}` or `REFUSED {diagnostic}`.
    public static func probeResult(entry: porter_plugin_entry_fn) -> String {
        switch PluginLoader.describe(entry: entry, path: "probe") {
        case .success(let (_, description)):
            return "RESULT " + String(decoding: (try? JSONEncoder().encode(description)) ?? Data(), as: UTF8.self)
        case .failure(let d):
            return "REFUSED " + String(decoding: (try? JSONEncoder().encode(d)) ?? Data(), as: UTF8.self)
        }
    }

    public static func json(stage: String, reason: String, detail: String?) -> String {
        let d = PluginDiagnostic(path: "probe", stage: PluginLoadStage(rawValue: stage) ?? .open, reason: reason, detail: detail)
        return String(decoding: (try? JSONEncoder().encode(d)) ?? Data(), as: UTF8.self)
    }

    static func describe(_ status: Int32, skipped: String) -> String {
        var parts: [String] = []
        if status & 1 != 0 { parts.append("limits") }
        if status & 2 != 0 { parts.append("no-new-privs") }
        if status & 4 != 0 { parts.append("landlock-files") }
        if status & 8 != 0 { parts.append("landlock-tcp") }
        if status & 16 != 0 { parts.append("landlock-scopes") }
        if status & 32 != 0 { parts.append("seccomp") }
        if status & 64 != 0 { parts.append("no-capabilities") }
        if status & 128 != 0 { parts.append("no-terminal") }
        return parts.joined(separator: ",") + (skipped.isEmpty ? "" : " (\(skipped))")
    }

    private static func withCStrings<R>(_ list: [String], _ body: (UnsafeBufferPointer<UnsafePointer<CChar>?>) -> R) -> R {
        let copies = list.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        let pointers = copies.map { UnsafePointer($0) }
        return pointers.withUnsafeBufferPointer(body)
    }

    /// One load in the worker: the plugin's `PluginLoad` (whose serial queue runs the
    /// plugin's functions: start and stop never run at once, and a plugin stuck in one
    /// never blocks the others) and the body the host streams.
    final class Load: @unchecked Sendable {
        let id: UInt64
        let pluginLoad: PluginLoad
        let client: WorkerClient
        let body: RemoteBody?
        var queue: DispatchQueue { pluginLoad.queue }
        init(id: UInt64, pluginLoad: PluginLoad, client: WorkerClient, body: RemoteBody?) {
            self.id = id
            self.pluginLoad = pluginLoad
            self.client = client
            self.body = body
        }
    }

    final class Server: @unchecked Sendable {
        let channel: Channel
        let factory: PluginHandlerFactory
        private let loads = Locked<[UInt64: Load]>([:])
        /// Event hooks run here, in order, off the reading thread.
        private let events = DispatchQueue(label: "porter.worker.events")
        /// `connect_service` calls waiting for the host's answer, by request number.
        private let serviceWaiters = Locked<[UInt64: ServiceWaiter]>([:])
        private let serviceRequests = Locked<UInt64>(0)
        /// How long a plugin's thread waits for the host's answer to a service request.
        static let serviceTimeout: TimeInterval = 60
        /// What each load's configuration starts from, made once: making one reads the
        /// whole environment (for proxies), which cost more than all the rest of a load's
        /// start in the worker. The worker installs no stores, so copies share nothing.
        private let baseConfiguration = SessionConfiguration.ephemeral

        init(channel: Channel, factory: PluginHandlerFactory) {
            self.channel = channel
            self.factory = factory
        }

        /// A send that fails means the host is gone: so is the worker.
        func send(_ m: FromWorker) {
            guard let bytes = WorkerCodec.encoded(m) else { return }
            do { try channel.sendRaw(bytes) } catch { _exit(0) }
        }

        /// Body bytes of `load`, in data frames of at most a chunk, sent from where they are.
        func sendData(load: UInt64, _ bytes: UnsafeRawBufferPointer) {
            var offset = 0
            while offset < bytes.count {
                let n = min(WorkerWire.chunk, bytes.count - offset)
                do { try channel.sendData(tag: load, body: UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + n)])) } catch { _exit(0) }
                offset += n
            }
        }

        func run() -> Never {
            while true {
                let incoming: Channel.Incoming
                do { incoming = try channel.receiveIncoming() } catch { _exit(0) }
                switch incoming {
                case .data(let id, let body):
                    loads.withLock { $0[id] }?.body?.append(body)
                case .frame(let frame):
                    guard let m = try? WorkerCodec.decode(ToWorker.self, from: frame) else { _exit(66) }
                    handle(m)
                }
            }
        }

        private func handle(_ m: ToWorker) {
            switch m {
            case .start(let id, let wire):
                start(id, wire)
            case .stop(let id):
                guard let load = loads.withLock({ $0[id] }) else {
                    send(.destroyed(load: id))
                    return
                }
                load.queue.async { load.pluginLoad.stop() }
            // The plugin's code never runs on this thread: a plugin that blocks in a
            // callback holds its own load's queue, not the reading of the host's messages.
            case .pause(let id):
                if let load = loads.withLock({ $0[id] }) { load.queue.async { load.pluginLoad.pause(true) } }
            case .resume(let id):
                if let load = loads.withLock({ $0[id] }) { load.queue.async { load.pluginLoad.pause(false) } }
            case .reply(let id, let challenge, let answer):
                if let load = loads.withLock({ $0[id] }) { load.queue.async { load.client.answer(challenge, answer) } }
            case .bodyEnd(let id, let failure):
                loads.withLock { $0[id] }?.body?.finish(failure)
            case .event(let e):
                if let event = e.event { events.async { TaskEventCenter.shared.post(event) } }
            case .service(_, let request, let code, let message):
                // The descriptor came with this frame's first byte: it is here now.
                let fd = code == 0 ? channel.takeDescriptor() ?? -1 : -1
                let result: Result<Int32, PorterError> = fd >= 0 ? .success(fd)
                    : .failure(PorterError(PorterError.Code(rawValue: code) ?? .unknown,
                                           code == 0 ? "the host's answer came without a descriptor" : message))
                let waiter = serviceWaiters.withLock { $0.removeValue(forKey: request) }
                if waiter?.deliver(result) != true, fd >= 0 { close(fd) }
            }
        }

        /// A plugin's `connect_service` in this worker: the host decides and connects; this
        /// side only asks and waits (its own answer would mean nothing: the plugin's code
        /// runs here).
        func connectService(load: UInt64, service: Int32) -> Result<Int32, PorterError> {
            let request = serviceRequests.withLock { n -> UInt64 in n += 1; return n }
            let waiter = ServiceWaiter()
            serviceWaiters.withLock { $0[request] = waiter }
            send(.connectService(load: load, request: request, service: service))
            if let result = waiter.wait(timeout: Self.serviceTimeout) { return result }
            _ = serviceWaiters.withLock { $0.removeValue(forKey: request) }
            // An answer that arrives after this is closed by the reader (or here, should it
            // have slipped in between).
            if case .success(let fd)? = waiter.abandon() { close(fd) }
            return .failure(PorterError(.timedOut, "the host did not answer a local service request"))
        }

        private func start(_ id: UInt64, _ wire: WireRequest) {
            guard let url = URL(string: wire.url) else {
                send(.fail(load: id, code: PorterError.Code.badURL.rawValue, message: "not a URL: \(wire.url)",
                           causeDomain: nil, causeCode: 0))
                send(.destroyed(load: id))
                return
            }
            var request = Request(url: url)
            request.method = wire.method
            for pair in wire.headers where pair.count == 2 {
                if let name = HTTPField.Name(pair[0]) { request.headerFields.append(HTTPField(name: name, value: pair[1])) }
            }
            for pair in wire.properties where pair.count == 2 { request.setProperty(pair[1], forKey: pair[0]) }
            if let offset = wire.resumeOffset { request.resumeRange = ResumeRange(offset: offset, validator: wire.resumeValidator) }
            request.timeoutInterval = wire.timeout
            let body = wire.hasBody ? RemoteBody(server: self, load: id) : nil
            if let body { request.body = .stream(body) }
            var configuration = baseConfiguration
            configuration.tlsVerificationDisabled = wire.insecure
            configuration.logger = Logger(label: "porter.plugin-worker") { _ in WorkerLogHandler(server: self, load: id) }
            let client = WorkerClient(server: self, load: id, configuration: configuration)
            let cached = wire.cached.map { CachedResponse(response: $0.response(fallback: url), data: Data()) }
            let pluginLoad = PluginLoad(client: client, request: request, vtable: factory.vtable, pluginName: factory.name,
                                        pluginContext: factory.pluginContext, gate: factory.gate, cached: cached,
                                        bodyLength: wire.bodyLength, checkCanHandle: true,
                                        connectService: { [weak self] service in
                                            guard let self else { return .failure(PorterError(.cancelled, "the worker is ending")) }
                                            return self.connectService(load: id, service: service)
                                        },
                                        onDestroyed: { [weak self] in
                                            guard let self else { return }
                                            _ = self.loads.withLock { $0.removeValue(forKey: id) }
                                            self.send(.destroyed(load: id))
                                        })
            let load = Load(id: id, pluginLoad: pluginLoad, client: client, body: body)
            loads.withLock { $0[id] = load }
            load.queue.async { pluginLoad.start() }
        }
    }

    /// Where the host's answer to one `connect_service` lands.
    final class ServiceWaiter: @unchecked Sendable {
        private let condition = NSCondition()
        private var result: Result<Int32, PorterError>?
        private var abandoned = false

        /// False when nobody waits any more (the caller closes the descriptor then).
        func deliver(_ r: Result<Int32, PorterError>) -> Bool {
            condition.lock(); defer { condition.unlock() }
            guard !abandoned, result == nil else { return false }
            result = r
            condition.broadcast()
            return true
        }

        func wait(timeout: TimeInterval) -> Result<Int32, PorterError>? {
            let deadline = Date().addingTimeInterval(timeout)
            condition.lock(); defer { condition.unlock() }
            while result == nil, condition.wait(until: deadline) {}
            return result
        }

        /// Gives up waiting; returns what arrived meanwhile, if anything.
        func abandon() -> Result<Int32, PorterError>? {
            condition.lock(); defer { condition.unlock() }
            abandoned = true
            defer { result = nil }
            return result
        }
    }

    /// The request body, read from the host on the plugin's thread: the chunks as they
    /// arrived (each read from the socket into its own storage), copied once more only
    /// into the plugin's buffer.
    final class RemoteBody: BodyStream, @unchecked Sendable {
        private let condition = NSCondition()
        private var chunks: [Data] = []
        /// How much of `chunks[0]` was read already.
        private var start = 0
        private var ended = false
        private var failure: String?
        private var asked = false
        private unowned let server: Server
        private let load: UInt64

        init(server: Server, load: UInt64) {
            self.server = server
            self.load = load
        }

        func append(_ bytes: Data) {
            condition.lock()
            if !bytes.isEmpty { chunks.append(bytes) }
            asked = false
            condition.broadcast()
            condition.unlock()
        }

        func finish(_ failure: String?) {
            condition.lock()
            ended = true
            self.failure = failure
            condition.broadcast()
            condition.unlock()
        }

        func read(into target: UnsafeMutableRawBufferPointer) throws -> Int {
            condition.lock()
            defer { condition.unlock() }
            while chunks.isEmpty && !ended {
                if !asked {
                    asked = true
                    condition.unlock()
                    server.send(.readBody(load: load, capacity: max(1, min(target.count, WorkerWire.chunk))))
                    condition.lock()
                    continue
                }
                condition.wait()
            }
            guard let first = chunks.first else {
                if let failure { throw PorterError(.cannotOpenFile, failure) }
                return 0
            }
            let n = min(target.count, first.count - start)
            first.withUnsafeBytes { src in
                target.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[start..<(start + n)]))
            }
            start += n
            if start == first.count {
                chunks.removeFirst()
                start = 0
            }
            return n
        }
    }

    /// The `ProtocolClient` a load's `PluginLoad` reports to: each report becomes a message.
    final class WorkerClient: ProtocolClient, LoadedBytesSink, @unchecked Sendable {
        let context: SessionContext
        private unowned let server: Server
        private let load: UInt64
        private let challenges = Locked<[UInt64: AuthenticationChallenge]>([:])

        init(server: Server, load: UInt64, configuration: SessionConfiguration) {
            self.server = server
            self.load = load
            self.context = SessionContext(configuration: configuration, sessionIdentifier: 0)
        }

        func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy) {
            server.send(.response(load: load, head: WireResponse(response)))
        }

        func didLoad(_ data: Data) {
            data.withUnsafeBytes { server.sendData(load: load, $0) }
        }

        /// The plugin's bytes go to the host from the plugin's own buffer.
        func didLoad(bytes: UnsafeRawBufferPointer) {
            server.sendData(load: load, bytes)
        }

        func wasRedirected(to request: Request, redirectResponse: Response) {
            server.send(.redirect(load: load, url: request.url.absoluteString, head: WireResponse(redirectResponse)))
        }

        func didFinishLoading() { server.send(.finish(load: load)) }

        func didFail(with error: PorterError) {
            server.send(.fail(load: load, code: error.code.rawValue, message: String(error.message.prefix(16_384)),
                              causeDomain: error.cause?.domain, causeCode: error.cause?.code ?? 0))
        }

        func didReceive(_ challenge: AuthenticationChallenge) {
            challenges.withLock { $0[challenge.identifier] = challenge }
            server.send(.challenge(load: load, challenge: WireChallenge(challenge)))
        }

        func didCancel(_ challenge: AuthenticationChallenge) {
            _ = challenges.withLock { $0.removeValue(forKey: challenge.identifier) }
            server.send(.cancelChallenge(load: load, challenge: challenge.identifier))
        }

        func answer(_ id: UInt64, _ answer: WireDisposition) {
            guard let challenge = challenges.withLock({ $0.removeValue(forKey: id) }) else { return }
            challenge.reply(answer.disposition(for: challenge))
        }

        func cachedResponseIsValid() { server.send(.cachedValid(load: load, revalidated: false)) }

        func cachedResponseIsValid(serving response: Response, revalidated: Bool) {
            server.send(.cachedValid(load: load, revalidated: revalidated))
        }

        func didSendBodyData(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
            server.send(.sent(load: load, bytes: bytesSent, total: totalBytesSent, expected: totalBytesExpectedToSend))
        }

        func didCollect(_ metrics: TransactionMetrics) {}

        func needNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void) { completion(nil) }
    }

    /// Log lines of the plugin and of the adapter, sent to the host's logger.
    struct WorkerLogHandler: LogHandler {
        unowned let server: Server
        let load: UInt64
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        init(server: Server, load: UInt64) {
            self.server = server
            self.load = load
        }

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let rank: Int
            switch event.level {
            case .trace: rank = 0
            case .debug: rank = 1
            case .info, .notice: rank = 2
            case .warning: rank = 3
            default: rank = 4
            }
            server.send(.log(load: load, level: rank, text: String(event.message.description.prefix(16_384))))
        }
    }
}

extension Optional where Wrapped == String {
    func withOptionalCString<R>(_ body: (UnsafePointer<CChar>?) -> R) -> R {
        switch self {
        case .none: return body(nil)
        case .some(let s): return s.withCString { body($0) }
        }
    }
}
