import Foundation
import Logging
import PorterCore
import PorterEngine
import PorterIPC

/// The `ProtocolHandler` of one load of an isolated plugin: it forwards the load to the
/// plugin's worker and the worker's reports to its client, and keeps the promises the
/// header makes (one end, nothing after a stop) whatever the worker does. What the load
/// may do next is decided by `WorkerLoadMachine` (PorterEngine), held under `condition`;
/// this shell performs its actions.
///
/// Flow control crosses the process boundary twice: a pause is sent to the plugin, and a
/// plugin that keeps sending anyway is read no further once `floodAllowance` bytes have
/// arrived since the pause: the thread reading the worker's socket waits, the socket
/// fills, and the plugin's own `did_load_data` blocks in its process.
final class IsolatedHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { [] }
    static let floodAllowance = 1 << 20

    let plugin: IsolatedPlugin
    let request: Request
    let cached: CachedResponse?
    let client: any ProtocolClient
    var logger: Logger { client.context.configuration.logger }

    private let condition = NSCondition()
    private var worker: WorkerProcess?
    private var load: UInt64 = 0
    /// The load's life: live, paused, silenced, destroyed (under `condition`).
    private var machine = WorkerLoadMachine()
    private var stopTimer: DispatchWorkItem?
    private var sincePause = 0
    private var challenges: [UInt64: AuthenticationChallenge] = [:]
    private var body: (any BodyStream)?
    private var bodyOpened = false
    /// A body read is queued (a worker asking again meanwhile is not queued twice).
    private var bodyReadPending = false
    static let challengeLimit = 16
    private let bodyQueue = DispatchQueue(label: "porter.plugin.body")
    /// How many local service connections the worker asked for on this load.
    private var servicesAsked = 0

    init(plugin: IsolatedPlugin, request: Request, cached: CachedResponse?, client: any ProtocolClient) {
        self.plugin = plugin
        self.request = request
        self.cached = cached
        self.client = client
    }

    /// Not reachable through the registry (the factory makes these): the load fails.
    convenience init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.init(plugin: .none, request: request, cached: cachedResponse, client: client)
    }

    // MARK: - the session's side

    func startLoading() {
        if let refusal = PluginScheme.refusal(of: request, by: plugin.name, schemes: plugin.description.schemes,
                                                abiMinor: plugin.description.abiMinor) {
            return fail(refusal)
        }
        let worker: WorkerProcess
        switch plugin.worker() {
        case .failure(var e):
            e.url = request.url
            return fail(e)
        case .success(let w): worker = w
        }
        guard let id = worker.attach(self) else {
            return fail(PorterError(.pluginCrashed, "plugin \(plugin.name): its worker ended", url: request.url))
        }
        let wire = WireRequest(request, insecure: client.context.configuration.tlsVerificationDisabled,
                               cached: cached?.response)
        guard let start = WorkerCodec.encoded(ToWorker.start(load: id, request: wire)),
              start.count <= WorkerProcess.maximumPayload + Frame.headerLength else {
            worker.detach(id)
            return fail(PorterError(.unsupportedURL, "the request is too large to hand to plugin \(plugin.name)", url: request.url))
        }
        let actions = step(.attached) {
            self.worker = worker
            self.load = id
        }
        for action in actions {
            guard case .sendStart(let paused) = action else { continue }
            worker.send(encoded: start)
            if paused { worker.send(.pause(load: id)) }
        }
    }

    /// The load could not be handed to a worker: it fails (once, as the machine allows).
    private func fail(_ error: PorterError) {
        if step(.attachFailed).contains(.deliverDeath) { client.didFail(with: error) }
    }

    /// Runs `event` through the machine under the lock (with `also`, state the shell keeps
    /// beside it); returns the actions, to perform after unlocking.
    private func step(_ event: WorkerLoadMachine.Event, also: () -> Void = {}) -> [WorkerLoadMachine.Action] {
        condition.withLock {
            also()
            let actions = machine.handle(event)
            condition.broadcast()
            return actions
        }
    }

    func stopLoading() {
        let (actions, target) = condition.withLock { () -> ([WorkerLoadMachine.Action], (WorkerProcess, UInt64)?) in
            let actions = machine.handle(.stop)
            condition.broadcast()
            return (actions, worker.map { ($0, load) })
        }
        guard actions.contains(.sendStopAndScheduleTimer), let (worker, id) = target else { return }
        let timeout = plugin.isolation.stopTimeout
        let timer = DispatchWorkItem { [self] in
            if step(.stopTimerFired).contains(.killWorker) {
                worker.kill(reason: "its worker was killed: a load did not stop within \(timeout) s of being asked")
            }
        }
        condition.withLock { stopTimer = timer }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: timer)
        worker.send(.stop(load: id))
    }

    func pauseDelivery() { setPaused(true) }
    func resumeDelivery() { setPaused(false) }

    private func setPaused(_ p: Bool) {
        let (actions, target) = condition.withLock { () -> ([WorkerLoadMachine.Action], (WorkerProcess, UInt64)?) in
            let actions = machine.handle(p ? .pause : .resume)
            if !actions.isEmpty { sincePause = 0 }
            condition.broadcast()
            return (actions, worker.map { ($0, load) })
        }
        guard let (worker, id) = target else { return }
        for action in actions {
            switch action {
            case .sendPause: worker.send(.pause(load: id))
            case .sendResume: worker.send(.resume(load: id))
            default: break
            }
        }
    }

    /// Performs the timer actions the destroy or the death of the worker led to.
    private func cancelTimer(_ actions: [WorkerLoadMachine.Action]) {
        guard actions.contains(.cancelStopTimer) else { return }
        let timer = condition.withLock { () -> DispatchWorkItem? in
            let t = stopTimer
            stopTimer = nil
            return t
        }
        timer?.cancel()
    }

    // MARK: - the worker's side (its reader thread)

    /// Runs `body` with the client when the machine lets the report through; `end: true`
    /// for the last one.
    private func report(end: Bool = false, _ body: (any ProtocolClient) -> Void) {
        let actions = step(.report(isEnd: end))
        if actions.contains(.deliver) || actions.contains(.deliverEnd) { body(client) }
    }

    private func end(_ body: (any ProtocolClient) -> Void) { report(end: true, body) }

    func deliverData(_ body: Data, from worker: WorkerProcess) {
        let count = body.count
        guard count > 0 else { return }
        condition.lock()
        // A plugin that keeps sending while paused is read no further (see the type's note).
        while machine.paused && machine.isLive && sincePause >= Self.floodAllowance && worker.isAlive {
            _ = condition.wait(until: Date().addingTimeInterval(0.25))
        }
        if machine.paused { sincePause += count }
        condition.unlock()
        report { $0.didLoad(body) }
    }

    func workerResponse(_ head: WireResponse) {
        report { $0.didReceive(head.response(fallback: request.url), cacheStoragePolicy: .allowed) }
    }

    func workerRedirect(_ url: String, _ head: WireResponse) {
        guard let target = URL(string: url), target.scheme != nil else {
            end { $0.didFail(with: PorterError(.badServerResponse, "plugin \(plugin.name) redirected to an invalid URL",
                                              url: request.url)) }
            return
        }
        var next = request
        next.url = target
        report { $0.wasRedirected(to: next, redirectResponse: head.response(fallback: request.url)) }
    }

    func workerFinish() { end { $0.didFinishLoading() } }

    func workerFail(code: Int, message: String, domain: String?, causeCode: Int) {
        // The plugin may not claim the host's own code.
        var c = PorterError.Code(rawValue: code) ?? .unknown
        if c == .pluginCrashed { c = .unknown }
        var error = PorterError(c, message, url: request.url)
        if let domain { error.cause = PorterError.Cause(domain: domain, code: causeCode, message: message) }
        end { $0.didFail(with: error) }
    }

    func workerCachedValid(_ revalidated: Bool) {
        guard let cached else {
            logger.warning("plugin \(plugin.name): cached_response_is_valid without a cached response, ignored")
            return
        }
        let serving = HTTPCacheRules.serving(cached, now: Date())
        end { $0.cachedResponseIsValid(serving: serving, revalidated: revalidated) }
    }

    func workerSent(_ bytes: Int64, _ total: Int64, _ expected: Int64) {
        report { $0.didSendBodyData(bytesSent: bytes, totalBytesSent: total, totalBytesExpectedToSend: expected) }
    }

    func workerChallenge(_ wire: WireChallenge) {
        let workerID = wire.id
        // Built from this load's URL: what the worker says about host, port or scheme is
        // not even decoded.
        let challenge = wire.request.challenge(loading: request.url, configuration: client.context.configuration) { [weak self] disposition in
            guard let self else { return }
            let target = self.condition.withLock { () -> (WorkerProcess, UInt64)? in
                guard self.challenges.removeValue(forKey: workerID) != nil, self.machine.isLive, let w = self.worker else { return nil }
                return (w, self.load)
            }
            guard let (worker, id) = target else { return }
            worker.send(.reply(load: id, challenge: workerID, answer: WireDisposition(disposition)))
        }
        let live = condition.withLock { () -> Bool in
            guard machine.isLive, challenges.count < Self.challengeLimit, challenges[workerID] == nil else { return false }
            challenges[workerID] = challenge
            return true
        }
        if live { client.didReceive(challenge) }
        else { logger.warning("plugin \(plugin.name): a challenge was ignored (the load ended, or too many are open)") }
    }

    func workerCancelChallenge(_ id: UInt64) {
        let c = condition.withLock { challenges.removeValue(forKey: id) }
        if let c { client.didCancel(c) }
    }

    /// The plugin reads the request body: read it here (off the reader thread, as a
    /// stream may block) and send what there is.
    func workerReadBody(_ capacity: Int) {
        let queued = condition.withLock { () -> Bool in
            guard !bodyReadPending, machine.isLive else { return false }
            bodyReadPending = true
            return true
        }
        guard queued else { return }
        bodyQueue.async { [self] in
            // Cleared before the answer goes out: the worker's next ask may come at once.
            let answered = { self.condition.withLock { self.bodyReadPending = false } }
            let (worker, id, stream, ended) = condition.withLock { () -> (WorkerProcess?, UInt64, (any BodyStream)?, Bool) in
                if !bodyOpened {
                    bodyOpened = true
                    body = PluginLoad.openBody(request.body)
                }
                return (self.worker, load, body, !machine.isLive)
            }
            guard let worker, !ended else { answered(); return }
            guard let stream else {
                answered()
                worker.send(.bodyEnd(load: id, failure: request.body == nil ? nil : "the request body cannot be read"))
                return
            }
            do {
                // Read straight into the frame that carries it.
                var n = 0
                let frame = try WorkerWire.encodedDataFrame(load: id, capacity: max(1, min(capacity, WorkerWire.chunk))) {
                    n = try stream.read(into: $0)
                    return n
                }
                answered()
                if n == 0 {
                    worker.send(.bodyEnd(load: id, failure: nil))
                } else {
                    worker.send(encoded: frame)
                }
            } catch {
                answered()
                logger.error("plugin \(plugin.name): reading the request body failed: \(error)")
                worker.send(.bodyEnd(load: id, failure: "reading the request body failed: \(error)"))
            }
        }
    }

    /// The worker asks for a local service for this load (`connect_service`). Decided as
    /// in process (`LocalService.admit`), from what the plugin declared when its probe
    /// described it — never from the request, which names only the service — with the
    /// place of the service taken from this process's environment. Handled whole on the
    /// worker's reader thread, in order (the connection is made without waiting), so a
    /// load has one request under way at most; `LocalService.perLoadLimit` in its life.
    /// Every request is answered: a connected descriptor passed with the answer, or a
    /// refusal.
    func workerConnectService(request: UInt64, service: Int32, worker: WorkerProcess) {
        let (id, refusal) = condition.withLock { () -> (UInt64, PorterError?) in
            guard machine.isLive, self.worker === worker else { return (load, PorterError(.cancelled, "the load is over")) }
            guard servicesAsked < LocalService.perLoadLimit else {
                return (load, PorterError(.resourceUnavailable,
                                          "a load may ask for \(LocalService.perLoadLimit) local service connections at most"))
            }
            servicesAsked += 1
            return (load, nil)
        }
        if let refusal {
            logger.debug("plugin \(plugin.name): connect_service(\(service)) refused: \(refusal.message)")
            worker.send(.service(load: id, request: request, code: refusal.code.rawValue, message: refusal.message))
            return
        }
        switch LocalService.admit(service, declared: plugin.description.needs, plugin: plugin.name).flatMap({ $0.connect() }) {
        case .success(let fd):
            worker.send(.service(load: id, request: request, code: 0, message: ""), passing: fd)
        case .failure(let e):
            if e.code == .unsupportedConfiguration { logger.warning("\(e.message)") }
            worker.send(.service(load: id, request: request, code: e.code.rawValue, message: e.message))
        }
    }

    func workerDestroyed() {
        cancelTimer(step(.destroyed))
    }

    /// The worker died with this load in flight.
    func workerDied(_ why: String) {
        let actions = step(.died)
        cancelTimer(actions)
        if actions.contains(.deliverDeath) { client.didFail(with: PorterError(.pluginCrashed, why, url: request.url)) }
    }
}
