import Foundation
import PorterCore
import Logging

/// A handler's report, kept with its payload until the state machine lets it through.
enum HandlerReport: @unchecked Sendable {
    case response(Response, CacheStoragePolicy)
    case data(Data)
    case redirect(Request, Response)
    case finish
    case fail(PorterError)
    case challenge(AuthenticationChallenge)
    case challengeWithdrawn(AuthenticationChallenge)
    case cachedResponseValid
    case cachedResponseServed(Response, revalidated: Bool)

    func event(redirectAllowed: Bool) -> TaskStateMachine.HandlerEvent {
        switch self {
        case .response: return .response
        case .data: return .data
        case .redirect: return .redirect(allowed: redirectAllowed)
        case .finish: return .finish
        case .fail: return .fail
        case .challenge(let c): return .challenge(c.identifier)
        case .challengeWithdrawn(let c): return .challengeWithdrawn(c.identifier)
        case .cachedResponseValid, .cachedResponseServed: return .cachedResponseValid
        }
    }
}

/// What a handler's client queues for the delivery queue, in the order it was said:
/// life-cycle reports go through the state machine; metrics and upload progress do not,
/// but keep their place in line.
enum InboxItem: @unchecked Sendable {
    case report(HandlerReport)
    case metrics(TransactionMetrics)
    case sent(Int64, Int64, Int64)
}

/// The client Porter hands to one handler instance. Every call hops to the session's
/// delegate queue; calls from a handler that was replaced (after a redirect) or
/// whose task ended are dropped there by the state machine.
final class HandlerClient: ProtocolClient, @unchecked Sendable {
    private weak var driver: TaskDriver?
    private let generation: UInt64
    let context: SessionContext

    init(driver: TaskDriver, generation: UInt64) {
        self.driver = driver
        self.generation = generation
        self.context = SessionContext(configuration: driver.session.configuration,
                                      sessionIdentifier: driver.session.identifier)
    }

    private func post(_ report: HandlerReport) {
        driver?.enqueue(generation, .report(report))
    }

    func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy) { post(.response(response, cacheStoragePolicy)) }
    func didLoad(_ data: Data) {
        guard let driver, !data.isEmpty else { return }
        driver.noteBuffered(data.count, generation: generation)
        post(.data(data))
    }
    func wasRedirected(to request: Request, redirectResponse: Response) { post(.redirect(request, redirectResponse)) }
    func didFinishLoading() { post(.finish) }
    func didFail(with error: PorterError) { post(.fail(error)) }
    func didReceive(_ challenge: AuthenticationChallenge) { post(.challenge(challenge)) }
    func didCancel(_ challenge: AuthenticationChallenge) { post(.challengeWithdrawn(challenge)) }
    func cachedResponseIsValid() { post(.cachedResponseValid) }
    func cachedResponseIsValid(serving response: Response, revalidated: Bool) {
        post(.cachedResponseServed(response, revalidated: revalidated))
    }
    func didSendBodyData(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        driver?.enqueue(generation, .sent(bytesSent, totalBytesSent, totalBytesExpectedToSend))
    }
    func didCollect(_ metrics: TransactionMetrics) { driver?.enqueue(generation, .metrics(metrics)) }
    func needNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
        guard let driver else { completion(nil); return }
        driver.queue.async { driver.askNewBodyStream(completion) }
    }
}

/// Performs what `TaskStateMachine` decides for one task: owns the handler, the
/// timers and the back-pressure accounting, and hands deliveries to the task that
/// currently owns the load (a data task can become a download task midway).
final class TaskDriver: @unchecked Sendable {
    let session: Session
    let queue: DispatchQueue
    private let lock = NSLock()

    // Guarded by `lock`.
    private var machine: TaskStateMachine
    private var handler: (any ProtocolHandler)?
    private var deferred: [(UInt64, HandlerReport)] = []
    private var buffered = 0
    private var pausedForFlow = false
    private var challenges: [UInt64: (AuthenticationChallenge, ChallengeDisposition)] = [:]
    private var pendingRedirect: Request?
    private var lastActivity = DispatchTime.now()
    private(set) var owner: SessionTask?
    /// Unique in the process, for `TaskEventCenter`.
    let eventID = TaskEventCenter.taskIDs.next()

    // Touched only on `queue`.
    var currentRequest: Request
    private(set) var response: Response?
    private(set) var storagePolicy: CacheStoragePolicy = .notAllowed
    private var finalError: PorterError?
    private var transactionMetrics: [TransactionMetrics] = []
    private var startDate = Date()
    private var startTime = DispatchTime.now()
    private var failureCounts: [ProtectionSpace: Int] = [:]
    /// The password credential last answered per space (queue only).
    private var usedCredentials: [ProtectionSpace: Credential] = [:]
    var wantsResumeData = false
    /// Set before the task is handed out; read on the queue at start.
    private var startError: PorterError?
    var needsBodyStreamBeforeStart = false

    /// The task will fail with `error` as soon as it is resumed.
    func abortBeforeStart(_ error: PorterError) { startError = error }

    var logger: Logger { session.configuration.logger }

    init(session: Session, request: Request, owner: SessionTask, asksResponseDisposition: Bool) {
        self.session = session
        self.queue = session.delegateQueue
        self.currentRequest = request
        self.owner = owner
        self.machine = TaskStateMachine(maximumRedirects: session.configuration.maximumRedirects,
                                        asksResponseDisposition: asksResponseDisposition)
        TaskEventCenter.shared.post(.created(taskID: eventID, url: request.url))
    }

    private func postResponseEvent(_ r: Response) {
        TaskEventCenter.shared.post(.response(taskID: eventID, url: r.url, statusCode: r.statusCode,
                                              expectedContentLength: r.expectedContentLength))
    }

    // MARK: - state seen from any thread

    var state: TaskState { lock.withLock { machine.lifecycle } }
    var redirectCount: Int { lock.withLock { machine.redirectCount } }

    /// Runs an event that does not come from the handler (API calls, decisions,
    /// timers) and performs the action on the queue.
    func decide(_ event: TaskStateMachine.Event) {
        let (action, handler) = lock.withLock { () -> (TaskStateMachine.Action, (any ProtocolHandler)?) in
            let a = machine.handle(event)
            lastActivity = .now()
            if a == .pauseDelivery, !pausedForFlow { return (a, self.handler) }
            return (a, nil)
        }
        if action == .pauseDelivery {
            // Suspension: the handler may pause at once (any thread is fine).
            handler?.pauseDelivery()
            return
        }
        if action == .none { return }
        queue.async { self.perform(action, report: nil) }
    }

    // MARK: - handler reports

    private let inboxLock = NSLock()
    private var inbox: [(UInt64, InboxItem)] = []
    private var inboxScheduled = false

    /// From any thread: queue a report and make sure one drain is scheduled on the
    /// delivery queue. Reports that arrive together (response, data, finish) cost one
    /// hop and one wake-up instead of one each; their order is kept.
    func enqueue(_ generation: UInt64, _ item: InboxItem) {
        inboxLock.lock()
        inbox.append((generation, item))
        let schedule = !inboxScheduled
        inboxScheduled = true
        inboxLock.unlock()
        if schedule { queue.async { self.drainInbox() } }
    }

    private func drainInbox() {
        while true {
            inboxLock.lock()
            let batch = inbox
            inbox.removeAll(keepingCapacity: true)
            if batch.isEmpty { inboxScheduled = false }
            inboxLock.unlock()
            if batch.isEmpty { return }
            for (gen, item) in batch {
                switch item {
                case .report(let report): process(gen, report)
                case .metrics(let m): collect(gen, m)
                case .sent(let n, let total, let expected): sentBodyData(gen, n, total, expected)
                }
            }
        }
    }

    func process(_ generation: UInt64, _ report: HandlerReport) {
        switch report {
        case .response(let r, _), .redirect(_, let r):
            storeCookies(from: r)
            invalidateCache(after: r)
        default: break
        }
        let action: TaskStateMachine.Action = lock.withLock {
            lastActivity = .now()
            // A withdrawn challenge must reach the machine even behind deferred reports.
            let jumpsQueue: Bool
            if case .challengeWithdrawn = report { jumpsQueue = true } else { jumpsQueue = false }
            if !deferred.isEmpty && !jumpsQueue && generation == machine.generation && !machine.isFinal {
                deferred.append((generation, report))
                return .deferEvent
            }
            var allowed = true
            if case .redirect(let newRequest, _) = report {
                allowed = redirectAllowed(from: currentRequest, to: newRequest)
            }
            let a = machine.handle(.handler(generation: generation, report.event(redirectAllowed: allowed)))
            if a == .deferEvent { deferred.append((generation, report)) }
            // Dropped data no longer waits for a consumer. Data of a replaced handler was
            // never counted (noteBuffered checks the generation), so it is not uncounted.
            if case .data(let d) = report, generation == machine.generation, a != .deliverData, a != .deferEvent {
                buffered -= d.count
            }
            return a
        }
        if action == .deferEvent { return }
        perform(action, report: report)
    }

    /// Replays deferred reports while the machine lets them through.
    private func drain() {
        while true {
            let next: (TaskStateMachine.Action, HandlerReport)? = lock.withLock {
                guard machine.canProcessHandlerEvents, !deferred.isEmpty else { return nil }
                let (gen, report) = deferred.removeFirst()
                var allowed = true
                if case .redirect(let newRequest, _) = report { allowed = redirectAllowed(from: currentRequest, to: newRequest) }
                let a = machine.handle(.handler(generation: gen, report.event(redirectAllowed: allowed)))
                if a == .deferEvent { deferred.insert((gen, report), at: 0); return nil }
                if case .data(let d) = report, gen == machine.generation, a != .deliverData { buffered -= d.count }
                return (a, report)
            }
            guard let (action, report) = next else { return }
            perform(action, report: report)
        }
    }

    private func redirectAllowed(from old: Request, to new: Request) -> Bool {
        let newScheme = new.scheme
        if newScheme == old.scheme { return true }
        let config = session.configuration
        guard config.allowedRedirectSchemes.contains(newScheme) else { return false }
        // A handler that never wants to be a redirect target (a plugin without the
        // flag) is not reached even when the application allows the scheme.
        let factory = config.handlers.first(where: { $0.schemes.contains(newScheme) && $0.canHandle(new) })
            ?? config.registry.factory(for: new)
        return factory?.mayBeRedirectTarget ?? true
    }

    // MARK: - actions (on the queue)

    private func perform(_ action: TaskStateMachine.Action, report: HandlerReport?) {
        switch action {
        case .none, .deferEvent, .pauseDelivery:
            break
        case .start:
            startDate = Date()
            startTime = .now()
            armTimer()
            if let startError {
                abort(startError)
            } else if needsBodyStreamBeforeStart {
                let gen = lock.withLock { machine.generation }
                askNewBodyStream { [self] stream in
                    queue.async {
                        guard let stream else {
                            self.process(gen, .fail(PorterError(.requestBodyStreamExhausted,
                                "a streamed upload needs a body stream and the delegate gave none", url: self.currentRequest.url)))
                            return
                        }
                        self.currentRequest.body = .stream(stream)
                        self.startLoad(cached: true)
                    }
                }
            } else {
                startLoad(cached: true)
            }
        case .resumeDelivery:
            let h: (any ProtocolHandler)? = lock.withLock { pausedForFlow ? nil : handler }
            h?.resumeDelivery()
            drain()
        case .deliverResponse:
            guard case .response(let r, let policy)? = report else { return }
            response = r
            storagePolicy = policy
            postResponseEvent(r)
            owner?.sinkResponse(r, driver: self)
        case .askResponseDisposition:
            guard case .response(let r, let policy)? = report, let task = owner as? DataTask else { return }
            response = r
            storagePolicy = policy
            postResponseEvent(r)
            logger.debug("task \(task.taskIdentifier): response \(r)")
            if let delegate = session.dataDelegate {
                delegate.dataTask(task, didReceive: r) { [self] disposition in
                    queue.async { self.decide(.responseDecision(disposition)) }
                }
            } else {
                decide(.responseDecision(.allow))
            }
        case .continueAfterDecision:
            if let response { owner?.sinkResponse(response, driver: self) }
            drain()
        case .becomeDownload:
            guard let dataTask = owner as? DataTask else { return }
            let download = DownloadTask(session: session, adopting: self, from: dataTask)
            lock.withLock { owner = download }
            dataTask.detach()
            session.adopt(download, replacing: dataTask)
            session.dataDelegate?.dataTask(dataTask, didBecome: download)
            if let response { download.sinkResponse(response, driver: self) }
            drain()
        case .deliverData:
            guard case .data(let d)? = report else { return }
            owner?.sinkData(d, driver: self)
        case .askRedirect:
            guard case .redirect(var newRequest, let redirectResponse)? = report else { return }
            newRequest = prepareRedirect(newRequest)
            lock.withLock { pendingRedirect = newRequest }
            logger.debug("redirect \(currentRequest.url.maskingPassword) -> \(newRequest.url.maskingPassword)")
            TaskEventCenter.shared.post(.redirected(taskID: eventID, from: currentRequest.url, to: newRequest.url))
            if let delegate = session.taskDelegate, let task = owner {
                delegate.task(task, willPerformRedirection: redirectResponse, newRequest: newRequest) { [self] chosen in
                    queue.async {
                        self.lock.withLock { self.pendingRedirect = chosen }
                        if chosen == nil { self.response = redirectResponse }
                        self.decide(.redirectDecision(follow: chosen != nil))
                    }
                }
            } else {
                decide(.redirectDecision(follow: true))
            }
        case .followRedirect:
            let old = lock.withLock { () -> (any ProtocolHandler)? in
                let h = handler
                handler = nil
                buffered = 0
                pausedForFlow = false
                deferred.removeAll()
                return h
            }
            old?.stopLoading()
            guard let next = lock.withLock({ pendingRedirect }) else { return }
            currentRequest = next
            response = nil
            if case .stream = next.body {
                let gen = lock.withLock { machine.generation }
                askNewBodyStream { [self] stream in
                    queue.async {
                        guard let stream else {
                            self.process(gen, .fail(PorterError(.requestBodyStreamExhausted,
                                "the redirect needs the body again and the delegate gave no new stream", url: next.url)))
                            return
                        }
                        self.currentRequest.body = .stream(stream)
                        self.startLoad(cached: true)
                    }
                }
            } else {
                startLoad(cached: true)
            }
        case .completeWithRedirectResponse:
            stopHandler()
            if let response { owner?.sinkResponse(response, driver: self) }
            finish(nil)
        case .askChallenge(let id):
            guard case .challenge(let challenge)? = report else { return }
            askChallenge(challenge, id: id)
        case .replyChallenge(let id):
            let entry = lock.withLock { challenges.removeValue(forKey: id) }
            if let (challenge, disposition) = entry { challenge.reply(disposition) }
            drain()
        case .forgetChallenge(let id):
            _ = lock.withLock { challenges.removeValue(forKey: id) }
            drain()
        case .deliverCachedResponse:
            deliverCached(report)
        case .ignoreViolation(let why):
            logger.warning("handler for \(currentRequest.url.maskingPassword): \(why)")
        case .complete(let outcome):
            finish(error(for: outcome, report: report))
        case .stopAndComplete(let outcome):
            stopHandler()
            finish(error(for: outcome, report: report))
        }
    }

    private func error(for outcome: TaskStateMachine.Outcome, report: HandlerReport?) -> PorterError? {
        let url = currentRequest.url
        switch outcome {
        case .finished: return nil
        case .cancelled: return PorterError(.cancelled, "the task was cancelled", url: url)
        case .failed:
            if case .fail(var e)? = report {
                if e.url == nil { e.url = url }
                return e
            }
            return PorterError(.unknown, "the handler failed", url: url)
        case .error(let code, let message): return PorterError(code, message, url: url)
        }
    }

    /// Drops `Authorization`, `Cookie` and `Proxy-Authorization` when a redirect leaves
    /// the origin, so credentials never travel to another host.
    private func prepareRedirect(_ proposed: Request) -> Request {
        var next = proposed
        let old = currentRequest.url
        let sameOrigin = old.scheme?.lowercased() == next.url.scheme?.lowercased()
            && old.host?.lowercased() == next.url.host?.lowercased() && old.port == next.url.port
        if !sameOrigin {
            next.headerFields[.authorization] = nil
            next.headerFields[.cookie] = nil
            next.headerFields[.proxyAuthorization] = nil
        }
        if next.mainDocumentURL == nil { next.mainDocumentURL = currentRequest.mainDocumentURL }
        return next
    }

    // MARK: - cache invalidation (RFC 9111 §4.4)

    /// A non-error response to an unsafe method invalidates the target URI and the
    /// same-origin Location / Content-Location.
    private func invalidateCache(after response: Response) {
        guard let cache = session.configuration.responseCache, let status = response.statusCode, (200..<400).contains(status),
              !["GET", "HEAD", "OPTIONS", "TRACE"].contains(currentRequest.method.uppercased()) else { return }
        cache.removeCachedResponse(for: Request(url: currentRequest.url))
        for name in ["Location", "Content-Location"] {
            guard let value = response.value(forHeader: name),
                  let target = URL(string: value, relativeTo: currentRequest.url)?.absoluteURL,
                  target.scheme == currentRequest.url.scheme, target.host == currentRequest.url.host,
                  target.port == currentRequest.url.port else { continue }
            cache.removeCachedResponse(for: Request(url: target))
        }
    }

    // MARK: - cookies

    /// The application set its own Cookie header: the store stays out of this task.
    private lazy var cookiesAutomatic: Bool = currentRequest.value(forHeader: "Cookie") == nil

    private var cookieStore: (any CookieStore)? {
        let config = session.configuration
        return config.httpShouldSetCookies ? config.cookieStore : nil
    }

    private static func carriesCookies(_ url: URL) -> Bool {
        let scheme = url.scheme?.lowercased()
        return scheme == "http" || scheme == "https"
    }

    /// Each hop (the first request, every redirect) gets the cookies for its own URL.
    private func applyCookies(to request: inout Request) {
        guard cookiesAutomatic, let store = cookieStore, Self.carriesCookies(request.url) else { return }
        _ = request.setValue(store.cookieHeader(for: request.url, mainDocumentURL: request.mainDocumentURL),
                             forHeader: "Cookie")
    }

    /// Set-Cookie of every response, the redirects' included (delivery queue).
    private func storeCookies(from response: Response) {
        guard let store = cookieStore, Self.carriesCookies(response.url) else { return }
        let headers = response.headerFields[values: .setCookie]
        guard !headers.isEmpty else { return }
        store.storeCookies(fromHeaders: headers, for: response.url, mainDocumentURL: currentRequest.mainDocumentURL)
    }

    private func startLoad(cached: Bool) {
        let gen = lock.withLock { machine.generation }
        var request = currentRequest
        let config = session.configuration
        if case .background = config.kind {
            process(gen, .fail(PorterError(.unsupportedConfiguration,
                "background sessions are not supported yet; use .default or .ephemeral", url: request.url)))
            return
        }
        guard let scheme = request.url.scheme, !scheme.isEmpty else {
            process(gen, .fail(PorterError(.unsupportedURL, "the URL has no scheme", url: request.url)))
            return
        }
        let factory = config.handlers.first(where: { $0.schemes.contains(request.scheme) && $0.canHandle(request) })
            ?? config.registry.factory(for: request)
        guard let factory else {
            let known = Set(config.registry.schemes + config.handlers.flatMap(\.schemes)).sorted()
            process(gen, .fail(PorterError(.unsupportedURL,
                "no handler for scheme '\(scheme)'; registered schemes: \(known.isEmpty ? "none" : known.joined(separator: ", "))",
                url: request.url)))
            return
        }
        for field in config.additionalHeaders where request.headerFields[field.name] == nil {
            request.headerFields.append(field)
        }
        if request.timeoutInterval <= 0 { request.timeoutInterval = config.timeoutIntervalForRequest }
        request.cachePartition = config.cachePartition
        applyCookies(to: &request)
        currentRequest = request

        var cachedResponse: CachedResponse?
        cacheKeyRequest = nil
        if cached, let cache = config.responseCache {
            let policy = request.cachePolicy == .useProtocolCachePolicy ? config.requestCachePolicy : request.cachePolicy
            // URLProtocol's two class methods: the handler's canonical form of the request is
            // what the cache is keyed by (for storing too), and a stored response answers only
            // a request the handler calls cache-equivalent to the one it was stored for.
            let key = factory.canonicalRequest(for: request)
            cacheKeyRequest = key
            func lookup() -> CachedResponse? {
                guard let hit = cache.cachedResponse(for: key),
                      factory.requestIsCacheEquivalent(key, Request(url: hit.response.url)) else { return nil }
                return hit
            }
            switch policy {
            case .reloadIgnoringLocalCacheData: break
            case .returnCacheDataElseLoad, .returnCacheDataDontLoad:
                if let hit = lookup() {
                    cachedHit = hit
                    process(gen, .cachedResponseValid)
                    return
                }
                if policy == .returnCacheDataDontLoad {
                    process(gen, .fail(PorterError(.resourceUnavailable,
                        "no cached response and the cache policy forbids loading", url: request.url)))
                    return
                }
            case .useProtocolCachePolicy, .reloadRevalidatingCacheData:
                cachedResponse = lookup()
            }
        }
        cachedHit = cachedResponse
        logger.debug("start \(request) with \(factory.name)")
        let client = HandlerClient(driver: self, generation: gen)
        let handler = factory.makeHandler(request: request, cachedResponse: cachedResponse, client: client)
        let proceed = lock.withLock { () -> Bool in
            guard !machine.isFinal, machine.generation == gen else { return false }
            self.handler = handler
            return true
        }
        guard proceed else { return }
        handler.startLoading()
        if lock.withLock({ machine.lifecycle == .suspended }) { handler.pauseDelivery() }
    }

    private var cachedHit: CachedResponse?
    /// The handler's canonical form of the current request: the cache key (queue only).
    private(set) var cacheKeyRequest: Request?

    /// Serves the cached response through the same path as a handler's reports.
    private func deliverCached(_ report: HandlerReport? = nil) {
        guard var hit = cachedHit else {
            let gen = lock.withLock { machine.generation }
            process(gen, .fail(PorterError(.protocolViolation, "cachedResponseIsValid without a cached response",
                                           url: currentRequest.url)))
            return
        }
        stopHandler(keepReference: true)
        var fetchType = "localCache"
        if case .cachedResponseServed(let served, let revalidated)? = report {
            hit.response = served
            if revalidated {
                fetchType = "revalidated"
                // The refreshed head (and a new storage time) replaces the stored one.
                var refreshed = hit
                refreshed.response.headerFields[.age] = nil
                refreshed.storedDate = Date()
                session.configuration.responseCache?.storeCachedResponse(refreshed, for: cacheKeyRequest ?? currentRequest)
            }
        }
        var fetch = TransactionMetrics(request: currentRequest, fetchType: fetchType)
        fetch.response = hit.response
        transactionMetrics.append(fetch)
        let gen = lock.withLock { machine.generation }
        process(gen, .response(hit.response, .notAllowed))
        if !hit.data.isEmpty, currentRequest.method.uppercased() != "HEAD" {   // HEAD answered from a stored GET
            noteBuffered(hit.data.count, generation: gen)
            process(gen, .data(hit.data))
        }
        process(gen, .finish)
    }

    private func stopHandler(keepReference: Bool = false) {
        let h = lock.withLock { () -> (any ProtocolHandler)? in
            let h = handler
            if !keepReference { handler = nil }
            return h
        }
        h?.stopLoading()
    }

    private func askChallenge(_ challenge: AuthenticationChallenge, id: UInt64) {
        var challenge = challenge
        let space = challenge.protectionSpace
        challenge.previousFailureCount = max(challenge.previousFailureCount, failureCounts[space] ?? 0)
        failureCounts[space, default: 0] += 1
        let store = session.configuration.credentialStore
        if challenge.previousFailureCount > 0, let failed = usedCredentials[space], let store,
           store.defaultCredential(for: space) == failed {
            // The stored credential was refused: drop it rather than offer it again.
            store.remove(failed, for: space)
        }
        if challenge.proposedCredential == nil, challenge.previousFailureCount == 0,
           let stored = store?.defaultCredential(for: space) {
            challenge.proposedCredential = stored
        }
        let asked = challenge
        let answer: @Sendable (ChallengeDisposition) -> Void = { [self] disposition in
            queue.async {
                let resolved = disposition == .performDefaultHandling ? self.defaultDisposition(for: asked) : disposition
                if case .useCredential(let credential) = resolved, credential.user != nil {
                    self.usedCredentials[space] = credential
                    if credential.persistence != .none { store?.set(credential, for: space) }
                }
                let known = self.lock.withLock { () -> Bool in
                    guard self.machine.lifecycle != .completed, self.machine.lifecycle != .canceling else { return false }
                    self.challenges[id] = (asked, resolved)
                    return true
                }
                guard known else { return }
                self.decide(.challengeDecision(id, cancel: resolved == .cancelAuthenticationChallenge))
            }
        }
        logger.debug("\(asked)")
        TaskEventCenter.shared.post(.challenged(taskID: eventID, host: space.host,
                                                method: space.authenticationMethod.description,
                                                previousFailureCount: asked.previousFailureCount))
        if let delegate = session.taskDelegate, let task = owner {
            // Its default passes connection-level challenges on to the session method.
            delegate.task(task, didReceive: asked, completion: answer)
        } else if let delegate = session.delegate, asked.protectionSpace.authenticationMethod.isConnectionLevel {
            delegate.session(session, didReceive: asked, completion: answer)
        } else {
            answer(.performDefaultHandling)
        }
    }

    /// Default handling: the proposed credential, the first time only; otherwise let
    /// the handler carry on without one.
    private func defaultDisposition(for challenge: AuthenticationChallenge) -> ChallengeDisposition {
        if let proposed = challenge.proposedCredential, challenge.previousFailureCount == 0 {
            return .useCredential(proposed)
        }
        return .performDefaultHandling
    }

    func askNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
        if let delegate = session.taskDelegate, let task = owner {
            delegate.task(task, needNewBodyStream: completion)
        } else {
            completion(nil)
        }
    }

    func sentBodyData(_ gen: UInt64, _ sent: Int64, _ total: Int64, _ expected: Int64) {
        let live = lock.withLock { () -> Bool in
            lastActivity = .now()
            return !machine.isFinal && machine.generation == gen
        }
        guard live, let task = owner else { return }
        task.noteSent(total: total, expected: expected)
        session.taskDelegate?.task(task, didSendBodyData: sent, totalBytesSent: total, totalBytesExpectedToSend: expected)
    }

    func collect(_ gen: UInt64, _ metrics: TransactionMetrics) {
        guard lock.withLock({ machine.generation == gen && !machine.isFinal }) else { return }
        transactionMetrics.append(metrics)
    }

    // MARK: - back-pressure

    /// Called on the handler's thread as data arrives: past the limit, pause it.
    func noteBuffered(_ count: Int, generation: UInt64) {
        lock.withLock {
            guard generation == machine.generation else { return }
            buffered += count
            if !pausedForFlow, buffered > session.configuration.receiveBufferLimit {
                pausedForFlow = true
                if machine.lifecycle != .suspended { handler?.pauseDelivery() }
            }
        }
    }

    /// Called when a consumer is done with `count` bytes.
    func consumed(_ count: Int) {
        lock.withLock {
            buffered -= count
            if pausedForFlow, buffered <= session.configuration.receiveBufferLimit / 4 {
                pausedForFlow = false
                if machine.lifecycle == .running { handler?.resumeDelivery() }
            }
        }
    }

    var bufferedByteCount: Int { lock.withLock { buffered } }

    // MARK: - timers

    private var idleLimit: TimeInterval = 60
    private var totalLimit: TimeInterval = 7 * 24 * 3600

    /// Joins the session's one timeout check (a timer per task costs a trip through
    /// libdispatch's manager thread to create, start and cancel).
    private func armTimer() {
        let config = session.configuration
        idleLimit = currentRequest.timeoutInterval > 0 ? currentRequest.timeoutInterval : config.timeoutIntervalForRequest
        totalLimit = config.timeoutIntervalForResource
        session.timeouts.watch(self, tick: max(0.02, min(0.25, min(idleLimit, totalLimit) / 4)))
    }

    /// Called by the session's timeout check on the delivery queue.
    func checkTimeouts() {
        checkTimeouts(idle: idleLimit, total: totalLimit)
    }

    private func checkTimeouts(idle: TimeInterval, total: TimeInterval) {
        let now = DispatchTime.now()
        let expired = lock.withLock { () -> Bool in
            // Time spent suspended, paused by a slow consumer or waiting for the delegate is not the peer's.
            if machine.lifecycle != .running || machine.wait != .none || pausedForFlow { lastActivity = now }
            let idleFor = Double(now.uptimeNanoseconds - lastActivity.uptimeNanoseconds) / 1e9
            return idleFor > idle
        }
        let elapsed = Double(now.uptimeNanoseconds - startTime.uptimeNanoseconds) / 1e9
        if expired || elapsed > total {
            logger.debug("timeout after \(elapsed)s for \(currentRequest.url.maskingPassword)")
            decide(.timeout)
        }
    }

    // MARK: - completion

    private func finish(_ error: PorterError?) {
        session.timeouts.unwatch(self)
        finalError = error
        lock.withLock { deferred.removeAll() }
        guard let task = owner else { return }
        TaskEventCenter.shared.post(.completed(taskID: eventID, url: currentRequest.url,
                                               bytesReceived: task.countOfBytesReceived,
                                               bytesSent: task.countOfBytesSent, error: error))
        if let error { logger.debug("task \(task.taskIdentifier) failed: \(error)") } else {
            logger.debug("task \(task.taskIdentifier) finished")
        }
        let metrics = TaskMetrics(transactionMetrics: transactionMetrics.isEmpty
                                    ? [TransactionMetrics(request: currentRequest)] : transactionMetrics,
                                  taskStartDate: startDate, taskEndDate: Date(), redirectCount: redirectCount)
        // The state reads .completed in (and after) the completion callback, as with
        // URLSessionTask; metrics come first, then the completion.
        decide(.completionDelivered)
        session.taskDelegate?.task(task, didFinishCollecting: metrics)
        task.sinkComplete(error, driver: self)
        lock.withLock { owner = nil; handler = nil; challenges.removeAll() }
        session.taskDidComplete(task)
    }

    /// For sinks: something went wrong on our side of the delivery (a full disk).
    func abort(_ error: PorterError) {
        let gen = lock.withLock { machine.generation }
        process(gen, .fail(error))
    }

    var cacheCandidateStoragePolicy: CacheStoragePolicy { storagePolicy }
}

