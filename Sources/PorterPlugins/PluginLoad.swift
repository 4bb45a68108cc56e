import CPorterPlugin
import PorterPluginKit
import Foundation
import HTTPTypes
import Logging
import PorterCore

/// One load of a plugin handler: what the plugin's `porter_client *` points at. It owns
/// the C copy of the request (valid until `destroy`), forwards the plugin's reports to
/// the task's `ProtocolClient`, and makes sure `stop` and `destroy` are called as the
/// header promises: `stop` at most once and never after `destroy`, `destroy` exactly
/// once after a successful `start`, once the load ended or was stopped.
///
/// The plugin's handler functions run on `queue`, a serial queue of this load's own (in
/// process and in a worker alike): a plugin stuck in one holds its own load, no other.
/// `destroy` runs there too, as soon as the load ended, and until it returned the load
/// counts in `gate` (`PluginLoadGate`): finished loads awaiting destroy stay bounded
/// however fast the host starts new ones.
final class PluginLoad: @unchecked Sendable {
    let client: any ProtocolClient
    let request: Request
    let vtable: porter_handler_vtable
    let pluginName: String
    let cRequest: CRequest
    /// Where the plugin's `start`, `stop`, `pause`, `resume` and `destroy` are called.
    let queue = DispatchQueue(label: "porter.plugin.load")
    /// The plugin's bound on loads awaiting destroy (one per plugin in a process).
    let gate: PluginLoadGate

    private struct State {
        /// `start` returned 0; `loadContext` is the plugin's.
        var started = false
        var loadContext: UnsafeMutableRawPointer?
        /// The host stopped listening (stop, or the plugin reported its end).
        var silenced = false
        /// The plugin reported finish or fail.
        var ended = false
        var stopRequested = false
        var stopCalled = false
        var destroyed = false
        /// Waiting for `gate` to open (the plugin has not seen the load).
        var waitingForSlot = false
        var pendingPause: Bool?
        var challenges: [UInt64: AuthenticationChallenge] = [:]
        var body: (any BodyStream)?
        var bodyOpened = false
        /// A `connect_service` call is under way; how many were made.
        var serviceBusy = false
        var servicesAsked = 0
    }
    private let state = Locked(State())

    /// The session cache's response for this request, if any (ABI 1.1).
    let cached: CachedResponse?

    /// Called once the plugin is done with the load: after `destroy` returned, or when
    /// `start` refused it (the worker tells the host so).
    let onDestroyed: (@Sendable () -> Void)?
    /// Ask the plugin's `can_handle` first (a worker does, as the host cannot ask across
    /// the process boundary before it routes the request).
    let checkCanHandle: Bool
    /// Fail at start with this instead of calling the plugin (e.g. an upload to a scheme
    /// that cannot take one).
    let refusal: PorterError?
    /// How this load reaches a local service (`connect_service`): in process,
    /// `LocalService.connect` with what the plugin declared; in a worker, a round trip to
    /// the host, which decides. nil: none is ever handed over.
    let connectService: (@Sendable (Int32) -> Result<Int32, PorterError>)?

    init(client: any ProtocolClient, request: Request, vtable: porter_handler_vtable, pluginName: String,
         pluginContext: UnsafeMutableRawPointer?, gate: PluginLoadGate, cached: CachedResponse? = nil, bodyLength: Int64? = nil,
         checkCanHandle: Bool = false, refusal: PorterError? = nil,
         connectService: (@Sendable (Int32) -> Result<Int32, PorterError>)? = nil,
         onDestroyed: (@Sendable () -> Void)? = nil) {
        self.refusal = refusal
        self.gate = gate
        self.connectService = connectService
        self.client = client
        self.request = request
        self.vtable = vtable
        self.pluginName = pluginName
        self.pluginContext = UnsafeSendable(pluginContext)
        self.cached = cached
        self.onDestroyed = onDestroyed
        self.checkCanHandle = checkCanHandle
        self.byteSink = client as? any LoadedBytesSink
        self.cRequest = CRequest(request, insecure: client.context.configuration.tlsVerificationDisabled,
                                 cached: cached?.response, bodyLength: bodyLength)
    }

    private let pluginContext: UnsafeSendable<UnsafeMutableRawPointer?>
    /// `client`, when it takes loaded bytes without a copy (looked up once, not per chunk).
    private let byteSink: (any LoadedBytesSink)?

    var logger: Logger { client.context.configuration.logger }

    /// The `porter_client *` handed to the plugin is not this object's address but a
    /// token: a number never used twice in the process, looked up in `live` on every call.
    /// A client dies when `start` fails or once `destroy` has run; a plugin that keeps
    /// calling with it afterwards finds no entry and is ignored (the call returns as for a
    /// stopped load) instead of touching freed memory.
    private static let live = Locked<[UInt: PluginLoad]>([:])
    private static let tokens = Locked<UInt>(0)
    private let token = PluginLoad.tokens.withLock { t -> UInt in t += 1; return t }

    var clientPointer: OpaquePointer { OpaquePointer(bitPattern: token)! }

    static func from(_ pointer: OpaquePointer?) -> PluginLoad? {
        guard let pointer else { return nil }
        let token = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(pointer)))
        return live.withLock { $0[token] }
    }

    private func goLive() { Self.live.withLock { $0[token] = self } }
    private func die() { _ = Self.live.withLock { $0.removeValue(forKey: token) } }

    // MARK: - host side (on `queue`)

    /// The host stops listening: no report reaches the client from now on (the plugin's
    /// `stop` follows on the load's queue).
    func silence() { state.withLock { $0.silenced = true } }

    func start() {
        guard vtable.start != nil else {
            client.didFail(with: PorterError(.unsupportedURL, "plugin \(pluginName) has no start function", url: request.url))
            return
        }
        // Stopped before its start ran: the plugin never sees the load.
        let stoppedFirst = state.withLock { s -> Bool in
            guard s.silenced, !s.started, !s.destroyed else { return false }
            s.destroyed = true
            return true
        }
        if stoppedFirst {
            onDestroyed?()
            return
        }
        if let refusal {
            state.withLock { $0.silenced = true; $0.destroyed = true }
            client.didFail(with: refusal)
            onDestroyed?()
            return
        }
        if checkCanHandle, let check = vtable.can_handle, check(pluginContext.value, cRequest.pointer) == 0 {
            state.withLock { $0.silenced = true; $0.destroyed = true }
            client.didFail(with: PorterError(.unsupportedURL, "plugin \(pluginName) does not handle \(request.url.maskingPassword)",
                                             url: request.url))
            onDestroyed?()
            return
        }
        // The plugin sees the load once the gate lets it; until then a stop takes it out
        // of the line (`stop`).
        state.withLock { $0.waitingForSlot = true }
        let admitted = gate.enter(token) { [self] in queue.async { self.startAdmitted() } }
        if admitted { startAdmitted() }
    }

    /// `start`, the gate having let the load through.
    private func startAdmitted() {
        guard let startFunction = vtable.start else { return }
        let stoppedMeanwhile = state.withLock { s -> Bool in
            s.waitingForSlot = false
            guard s.silenced, !s.started, !s.destroyed else { return false }
            s.destroyed = true
            return true
        }
        if stoppedMeanwhile {
            onDestroyed?()
            return
        }
        goLive()
        var context: UnsafeMutableRawPointer?
        var error = [CChar](repeating: 0, count: 512)
        let capacity = error.count
        let rc = startFunction(pluginContext.value, cRequest.pointer, clientPointer, &context, &error, capacity)
        if rc != 0 {
            state.withLock { $0.silenced = true; $0.destroyed = true }
            die()
            let message = CErrorBuffer.read(error)
            let code = PorterError.Code(rawValue: Int(rc)) ?? .unknown
            client.didFail(with: PorterError(code, message.isEmpty ? "plugin \(pluginName) refused the request" : message,
                                             url: request.url))
            onDestroyed?()
            return
        }
        enum Next { case none, stop, destroy }
        let (next, pause) = state.withLock { s -> (Next, Bool?) in
            s.started = true
            s.loadContext = context
            if s.stopRequested { s.stopCalled = true; return (.stop, nil) }
            return (s.ended ? .destroy : .none, s.pendingPause)
        }
        switch next {
        case .stop:
            vtable.stop?(context)
            destroyOnce()
        case .destroy:
            destroyOnce()
        case .none:
            if let pause { pause ? vtable.pause?(context) : vtable.resume?(context) }
        }
    }

    func stop() {
        // Stopped while waiting at the gate: the plugin never sees the load.
        let waiting = state.withLock { s -> Bool in
            guard s.waitingForSlot, !s.destroyed else { return false }
            s.silenced = true
            return true
        }
        if waiting, gate.withdraw(token) {
            state.withLock { $0.waitingForSlot = false; $0.destroyed = true }
            onDestroyed?()
            return
        }
        let context = state.withLock { s -> UnsafeMutableRawPointer?? in
            s.silenced = true
            guard !s.destroyed, !s.stopCalled, !s.ended else { return nil }
            guard s.started else { s.stopRequested = true; return nil }
            s.stopCalled = true
            return .some(s.loadContext)
        }
        guard let context else { return }
        vtable.stop?(context)
        destroyOnce()
    }

    func pause(_ paused: Bool) {
        let context = state.withLock { s -> UnsafeMutableRawPointer?? in
            guard !s.silenced, !s.destroyed else { return nil }
            guard s.started else { s.pendingPause = paused; return nil }
            return .some(s.loadContext)
        }
        guard let context else { return }
        if paused { vtable.pause?(context) } else { vtable.resume?(context) }
    }

    var supportsPause: Bool { vtable.pause != nil && vtable.resume != nil }

    private func destroyOnce() {
        let context = state.withLock { s -> UnsafeMutableRawPointer?? in
            guard s.started, !s.destroyed else { return nil }
            s.destroyed = true
            s.challenges.removeAll()
            return .some(s.loadContext)
        }
        guard let context else { return }
        gate.destroyQueued()
        let destroy = vtable.destroy
        let box = UnsafeSendable(context)
        // On the load's queue: never on the plugin's own thread (it may join that thread
        // in destroy), never behind other loads' work (a destroy that hangs holds its own
        // load only), and at once — not when a thread of a shared pool is free, which let
        // finished loads pile up while new ones started on fresh threads.
        queue.async {
            destroy?(box.value)
            self.die()
            self.gate.destroyReturned()
            self.onDestroyed?()
        }
    }

    // MARK: - plugin side (any thread)

    /// Runs `body` with the client unless the load is silenced; `end` also silences it.
    private func report(end: Bool = false, _ body: (any ProtocolClient) -> Void) {
        let live = state.withLock { s -> Bool in
            guard !s.silenced, !s.destroyed else { return false }
            if end { s.silenced = true; s.ended = true }
            return true
        }
        guard live else {
            logger.debug("plugin \(pluginName): report after the end of \(request.url.absoluteString) ignored")
            return
        }
        // The end's destroy is queued (and counted in `gate`) before the client hears of
        // the end, so a load started after this one completed sees it counted.
        if end { destroyOnce() }
        body(client)
    }

    func didReceiveResponse(_ response: Response) { report { $0.didReceive(response, cacheStoragePolicy: .allowed) } }
    func didLoad(_ data: Data) { report { $0.didLoad(data) } }

    /// The plugin's bytes, valid for this call: handed on as they are to a client that
    /// takes them so (a worker sends them to its host from here), else copied once.
    func didLoad(bytes: UnsafeRawBufferPointer) {
        if let byteSink {
            report { _ in byteSink.didLoad(bytes: bytes) }
        } else {
            report { $0.didLoad(Data(bytes)) }
        }
    }
    func wasRedirected(to request: Request, response: Response) {
        report { $0.wasRedirected(to: request, redirectResponse: response) }
    }
    func didFinish() { report(end: true) { $0.didFinishLoading() } }

    /// The plugin says the cached response is still good (ABI 1.1).
    func cachedResponseIsValid(revalidated: Bool) {
        guard let cached else {
            logger.warning("plugin \(pluginName): cached_response_is_valid without a cached response, ignored")
            return
        }
        let serving = HTTPCacheRules.serving(cached, now: Date())
        report(end: true) { $0.cachedResponseIsValid(serving: serving, revalidated: revalidated) }
    }
    func didFail(_ error: PorterError) { report(end: true) { $0.didFail(with: error) } }
    func didSend(_ sent: Int64, _ total: Int64, _ expected: Int64) {
        report { $0.didSendBodyData(bytesSent: sent, totalBytesSent: total, totalBytesExpectedToSend: expected) }
    }

    /// Raises a challenge; the reply reaches the plugin once, unless it was withdrawn or
    /// the load was destroyed first.
    func challenge(_ make: (@escaping @Sendable (ChallengeDisposition) -> Void) -> AuthenticationChallenge,
                   reply: @escaping @Sendable (ChallengeDisposition) -> Void) -> UInt64 {
        let idBox = Locked<UInt64>(0)
        let challenge = make { [weak self] disposition in
            guard let self else { return }
            let id = idBox.current
            let pending = self.state.withLock { $0.challenges.removeValue(forKey: id) != nil }
            if pending { reply(disposition) }
        }
        idBox.withLock { $0 = challenge.identifier }
        let live = state.withLock { s -> Bool in
            guard !s.silenced, !s.destroyed else { return false }
            s.challenges[challenge.identifier] = challenge
            return true
        }
        guard live else { return 0 }
        client.didReceive(challenge)
        return challenge.identifier
    }

    func cancelChallenge(_ id: UInt64) {
        let challenge = state.withLock { $0.challenges.removeValue(forKey: id) }
        if let challenge { client.didCancel(challenge) }
    }

    /// `connect_service` (ABI 1.3), on the plugin's thread: a connected descriptor the
    /// plugin owns, or why not. One call of a load at a time, `LocalService.perLoadLimit`
    /// in its life, none once the load ended or was stopped.
    func service(_ number: Int32) -> Result<Int32, PorterError> {
        let admitted = state.withLock { s -> PorterError? in
            guard !s.silenced, !s.destroyed else {
                return PorterError(.cancelled, "the load of \(request.url.maskingPassword) is over")
            }
            guard !s.serviceBusy else {
                return PorterError(.resourceUnavailable, "plugin \(pluginName): one local service connection at a time per load")
            }
            guard s.servicesAsked < LocalService.perLoadLimit else {
                return PorterError(.resourceUnavailable,
                                   "plugin \(pluginName): a load may ask for \(LocalService.perLoadLimit) local service connections at most")
            }
            s.serviceBusy = true
            s.servicesAsked += 1
            return nil
        }
        if let admitted { return .failure(admitted) }
        defer { state.withLock { $0.serviceBusy = false } }
        guard let connectService else {
            return .failure(PorterError(.unsupportedConfiguration, "plugin \(pluginName): no local services here"))
        }
        let result = connectService(number)
        if case .failure(let e) = result { logger.debug("plugin \(pluginName): connect_service(\(number)): \(e.message)") }
        return result
    }

    /// The request body, read on the plugin's thread.
    func readBody(into buffer: UnsafeMutableRawBufferPointer) -> Int64 {
        let stream: (any BodyStream)? = state.withLock { s in
            if !s.bodyOpened {
                s.bodyOpened = true
                s.body = Self.openBody(request.body)
            }
            return s.body
        }
        guard let stream else { return request.body == nil ? 0 : -1 }
        do {
            return Int64(try stream.read(into: buffer))
        } catch {
            logger.error("plugin \(pluginName): reading the request body failed: \(error)")
            return -1
        }
    }

    static func openBody(_ body: RequestBody?) -> (any BodyStream)? {
        switch body {
        case nil: return nil
        case .data(let d): return DataBodyStream(d)
        case .stream(let s): return s
        case .file(let url): return FileBodyStream(url: url)
        }
    }
}

/// A `ProtocolClient` that takes a load's bytes where they lie, for the length of the
/// call, instead of as `Data` (which would copy them first).
protocol LoadedBytesSink: AnyObject {
    func didLoad(bytes: UnsafeRawBufferPointer)
}

/// Reads a file body in order.
final class FileBodyStream: BodyStream, @unchecked Sendable {
    private let handle: FileHandle?
    private let url: URL
    init(url: URL) {
        self.url = url
        self.handle = try? FileHandle(forReadingFrom: url)
    }
    deinit { try? handle?.close() }
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let handle else { throw PorterError(.cannotOpenFile, "cannot open \(url.path)", url: url) }
        guard let data = try handle.read(upToCount: buffer.count), !data.isEmpty else { return 0 }
        data.copyBytes(to: buffer.bindMemory(to: UInt8.self), count: data.count)
        return data.count
    }
}

/// A value the compiler cannot prove Sendable, moved across threads on purpose.
struct UnsafeSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

/// The C form of a `Request`, with every string it points at, alive as long as this
/// object is (the header promises: until `destroy`).
final class CRequest: @unchecked Sendable {
    private let strings: CStrings
    private let headers: UnsafeMutablePointer<porter_field>
    private let properties: UnsafeMutablePointer<porter_field>
    private var cachedFields: UnsafeMutablePointer<porter_field>?
    private var cachedHead: UnsafeMutablePointer<porter_response>?
    /// Stable for the life of this object.
    let pointer: UnsafeMutablePointer<porter_request>

    init(_ request: Request, insecure: Bool, cached: Response? = nil, bodyLength: Int64? = nil) {
        let strings = CStrings()
        let dup = strings.dup
        let fields = Array(request.headerFields)
        headers = .allocate(capacity: max(1, fields.count))
        for (i, f) in fields.enumerated() {
            headers[i] = porter_field(name: dup(f.name.rawName), value: dup(f.value))
        }
        let props = request.properties.compactMap { key, value in (value as? String).map { (key, $0) } }
            .sorted { $0.0 < $1.0 }
        properties = .allocate(capacity: max(1, props.count))
        for (i, p) in props.enumerated() {
            properties[i] = porter_field(name: dup(p.0), value: dup(p.1))
        }
        var v = porter_request()
        v.struct_size = UInt32(MemoryLayout<porter_request>.size)
        v.url = dup(request.url.absoluteString)
        v.method = dup(request.method)
        v.headers = UnsafePointer(headers)
        v.header_count = fields.count
        v.properties = UnsafePointer(properties)
        v.property_count = props.count
        v.resume_offset = request.resumeRange?.offset ?? -1
        v.resume_validator = dup(request.resumeRange?.validator)
        v.has_body = request.body == nil ? 0 : 1
        v.body_length = bodyLength ?? request.body?.knownLength ?? -1
        v.timeout_interval = request.timeoutInterval
        v.insecure = insecure ? 1 : 0
        if let cached {
            let fields = Array(cached.headerFields)
            let list = UnsafeMutablePointer<porter_field>.allocate(capacity: max(1, fields.count))
            for (i, f) in fields.enumerated() { list[i] = porter_field(name: dup(f.name.rawName), value: dup(f.value)) }
            var head = porter_response()
            head.struct_size = UInt32(MemoryLayout<porter_response>.size)
            head.url = dup(cached.url.absoluteString)
            head.mime_type = dup(cached.mimeType)
            head.text_encoding = dup(cached.textEncodingName)
            head.expected_length = cached.expectedContentLength
            head.status_code = Int32(clamping: cached.statusCode ?? -1)
            head.headers = UnsafePointer(list)
            head.header_count = fields.count
            head.resume_offset = -1
            head.validator = dup(cached.validator)
            let h = UnsafeMutablePointer<porter_response>.allocate(capacity: 1)
            h.initialize(to: head)
            cachedFields = list
            cachedHead = h
            v.cached_response = UnsafePointer(h)
        }
        self.pointer = .allocate(capacity: 1)
        self.pointer.initialize(to: v)
        self.strings = strings
    }

    deinit {
        headers.deallocate()
        properties.deallocate()
        cachedFields?.deallocate()
        cachedHead?.deallocate()
        pointer.deallocate()
    }
}
