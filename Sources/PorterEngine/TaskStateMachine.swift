import Foundation
import PorterCore
import HTTPTypes

/// What a handler said, with what it said it with. Kept by the state machine until
/// the machine lets it through.
package enum HandlerReport: @unchecked Sendable {
    // Request and Response are one reference each (copy-on-write boxes): payloads no
    // larger than `data`'s are stored inline, with no box allocated per report.
    case response(Response, CacheStoragePolicy)
    case data(Data)
    case redirect(Request, Response)
    case finish
    indirect case fail(PorterError)
    indirect case challenge(AuthenticationChallenge)
    indirect case challengeWithdrawn(AuthenticationChallenge)
    /// `cachedResponseIsValid()`, or its variant with the head to serve.
    case cachedResponseValid(serving: Response?, revalidated: Bool)
}

/// The whole life cycle of one task as a value: an event goes in, one action with
/// everything needed to perform it comes out; no I/O, no callbacks, no clocks.
/// `TaskDriver` performs the actions and feeds back what happened.
///
/// Guarantees, by construction:
/// - exactly one `complete` / `stopAndComplete` action per task, whatever arrives;
/// - nothing after it (every event in `.completed` or `.canceling` yields `.none`);
/// - reports of an earlier handler (before a redirect) are dropped by generation;
/// - reports that arrive while a delegate decision is pending or while the task is
///   suspended are kept here, with their payloads, and let through in order by
///   `nextDeferredAction()` (only a withdrawn challenge jumps the line, as it ends a wait);
/// - the handler is paused exactly while the task is suspended or its consumer holds
///   more than the flow limit (`flowPaused`), and resumed when neither holds;
/// - a redirect is followed only within `RedirectPolicy` (count, schemes), with the
///   credentials stripped when it leaves the origin.
package struct TaskStateMachine: Sendable {
    package enum Outcome: Sendable {
        case finished
        case failed(PorterError)
        case cancelled
        /// A failure the machine itself decided.
        case error(PorterError.Code, String)
    }

    /// What a completing action tells the shell about the task as it ends (filled in by
    /// the machine at the end, whatever path ended it).
    package struct Ending: Sendable, Equatable {
        package var redirectCount: Int
        /// `cancel(byProducingResumeData:)` asked for resume data.
        package var producesResumeData: Bool
        package static let unset = Ending(redirectCount: 0, producesResumeData: false)
    }

    package enum Wait: Equatable, Sendable {
        case none
        /// `start` was performed; the driver reports `loadPlanned`.
        case plan
        case responseDisposition
        case redirectDecision
        case challengeDecision(UInt64)
        /// A load failed for want of a connection: is there a route to the host?
        case connectivityCheck
        /// No route: waiting for the network to change.
        case connectivity
    }

    package enum Event: Sendable {
        case resume
        case suspend
        case cancel(producingResumeData: Bool)
        /// The driver prepared the request and looked it up in the cache (`CacheStep`).
        indirect case loadPlanned(Request, CacheStep.Lookup)
        /// The driver could not prepare the load (no handler, no body stream, ...).
        indirect case startFailed(PorterError)
        /// The consumer could not take what was delivered (a full disk): the task ends
        /// now, ahead of any kept report.
        indirect case sinkFailed(PorterError)
        case handler(generation: UInt64, HandlerReport)
        case responseDecision(ResponseDisposition)
        /// The delegate's choice: the request to load next, or nil to stop here.
        case redirectDecision(Request?)
        indirect case challengeDecision(UInt64, ChallengeDisposition)
        /// The consumer holds more received bytes than the flow limit.
        case backlog
        /// The consumer is back under the flow limit's low-water mark.
        case drained
        case timeout
        /// The session's clock looked at this task: `idleFor` seconds since its last
        /// activity, `elapsed` since it started, against its limits. The machine decides
        /// whether the time counts (not while suspended, paused by the consumer or
        /// waiting for the delegate) and whether it is a timeout.
        case clock(idleFor: Double, elapsed: Double, idleLimit: Double, totalLimit: Double)
        case completionDelivered
        /// The answer to `checkConnectivity`: whether a route to the host exists now.
        case connectivityChecked(reachable: Bool)
        /// The kernel announced a change of links, addresses or routes.
        case networkChanged
    }

    package enum Action: Sendable {
        case none
        /// Prepare `request` (headers, cookies, a body stream) and look it up in the cache,
        /// then report `loadPlanned`.
        // A payload of a Request or a Response or two (one reference each) is stored
        // inline, as `deliverData`'s is: a box per action was an allocation per step.
        case start(Request)
        /// Make a handler for `request` (generation is current) and start it; pause it at
        /// once when `paused`.
        indirect case load(Request, cachedResponse: CachedResponse?, paused: Bool, generation: UInt64)
        /// Deliver the stored response as a handler's reports (`serving`: the head to
        /// deliver instead of the stored one; `revalidated`: store it back).
        indirect case serveCached(CachedResponse, serving: Response?, revalidated: Bool, generation: UInt64)
        case pauseHandler
        case resumeHandler
        /// Hand the response to the task without asking.
        case deliverResponse(Response, CacheStoragePolicy)
        case askResponseDisposition(Response, CacheStoragePolicy)
        /// The delegate allowed the response: hand it to the task.
        case continueAfterDecision(Response)
        case becomeDownload(Response)
        case deliverData(Data)
        /// Bytes the consumer will never see (a replaced handler's, or reported after the
        /// end, or kept and then dropped): give their flow credit back.
        case discardData(Int)
        /// What a response does to the session's stores before anyone sees it — cookies
        /// set, cache entries it invalidates (RFC 9111 §4.4) — then `then`.
        indirect case recordResponse(Response, then: Action)
        /// The time since the last activity does not count (the task waits for someone
        /// other than the peer): start the idle clock again.
        case restartIdleClock
        /// Ask the delegate about `request` (already stripped of credentials when it
        /// leaves the origin).
        case askRedirect(Request, Response)
        /// Stop the handler; start loading `request` (generation already bumped).
        case followRedirect(Request)
        /// Stop the handler; `response` (a redirect) is the task's final response.
        indirect case completeWithRedirectResponse(Response, Ending = .unset)
        indirect case askChallenge(UInt64, AuthenticationChallenge)
        indirect case replyChallenge(AuthenticationChallenge, ChallengeDisposition)
        /// A handler broke the contract in a harmless way; log it and carry on.
        case ignoreViolation(String)
        indirect case complete(Outcome, Ending = .unset)
        indirect case stopAndComplete(Outcome, Ending = .unset)
        /// `cancel(byProducingResumeData:)` on a task that had already ended.
        case resumeDataUnavailable
        /// Stop the handler (it failed for want of a connection) and find out whether
        /// there is a route to `request`'s host; report `connectivityChecked`.
        case checkConnectivity(Request)
        /// Watch the network and report `networkChanged`; tell the delegate the task is
        /// waiting when `notify` (the first wait of the task).
        case waitForConnectivity(notify: Bool)
        /// Load `request` again from the start (the network came back).
        case retryLoad(Request)
    }

    package private(set) var lifecycle: TaskState = .suspended
    package private(set) var started = false
    package private(set) var wait: Wait = .none
    package private(set) var responseReceived = false
    package private(set) var redirectCount = 0
    package private(set) var generation: UInt64 = 0
    /// The request of the current hop, as the delegate chose it.
    package private(set) var request: Request
    /// The consumer holds more than the flow limit.
    package private(set) var flowPaused = false
    /// `cancel(byProducingResumeData:)` asked for resume data.
    package private(set) var wantsResumeData = false
    /// The stored response the current load may answer with (the cache step's).
    @OutOfLine package private(set) var cachedResponse: CachedResponse?
    package let redirectPolicy: RedirectPolicy
    /// True when the data delegate is asked about the response.
    package let asksResponseDisposition: Bool
    /// `SessionConfiguration.waitsForConnectivity`.
    package let waitsForConnectivity: Bool
    /// The delegate heard `taskIsWaitingForConnectivity` (once per task).
    package private(set) var reportedWaiting = false
    /// The request of the current hop before the driver prepared it (a retry starts over).
    package private(set) var hopRequest: Request
    /// The failure a connectivity check may turn out to be final.
    @OutOfLine private var pendingFailure: PorterError?

    private var deferred: [(UInt64, HandlerReport)] = []
    private var deferredHead = 0
    /// Bytes of kept data reports that were dropped, not yet given back.
    private var discardedBytes = 0
    @OutOfLine private var pendingResponse: (Response, CacheStoragePolicy)?
    @OutOfLine private var pendingRedirect: Response?
    @OutOfLine private var pendingChallenge: AuthenticationChallenge?

    package init(request: Request, redirectPolicy: RedirectPolicy, asksResponseDisposition: Bool, waitsForConnectivity: Bool = false) {
        self.request = request
        self.hopRequest = request
        self.redirectPolicy = redirectPolicy
        self.asksResponseDisposition = asksResponseDisposition
        self.waitsForConnectivity = waitsForConnectivity
    }

    /// Failures that may mean "no network" rather than "no server": only those before a
    /// connection was made, so nothing of the request can have been sent (a lost
    /// connection may have delivered a POST: it is not retried).
    package static let connectivityFailures: Set<PorterError.Code> = [.cannotConnectToHost, .cannotFindHost]

    package var isFinal: Bool { lifecycle == .completed || lifecycle == .canceling }
    package var canProcessHandlerEvents: Bool { lifecycle == .running && wait == .none }
    /// The handler should not deliver now.
    package var handlerPaused: Bool { lifecycle == .suspended || flowPaused }
    package var deferredCount: Int { deferred.count - deferredHead }
    /// Bytes of data reports kept for later (for tests: flow credit is conserved).
    package var keptDataBytes: Int {
        deferred[deferredHead...].reduce(discardedBytes) { sum, kept in
            if case .data(let d) = kept.1 { return sum + d.count } else { return sum }
        }
    }

    package mutating func handle(_ event: Event) -> Action {
        switch event {
        case .resume:
            switch lifecycle {
            case .suspended where !started:
                lifecycle = .running
                started = true
                wait = .plan
                return .start(request)
            case .suspended:
                lifecycle = .running
                return flowPaused ? .none : toHandler(.resumeHandler)
            default: return .none
            }
        case .suspend:
            guard lifecycle == .running else { return .none }
            lifecycle = .suspended
            return flowPaused ? .none : toHandler(.pauseHandler)
        case .cancel(let producingResumeData):
            guard lifecycle == .running || lifecycle == .suspended else { return producingResumeData ? .resumeDataUnavailable : .none }
            if producingResumeData { wantsResumeData = true }
            lifecycle = .canceling
            return finish(.stopAndComplete(.cancelled))
        case .completionDelivered:
            if lifecycle == .canceling { lifecycle = .completed }
            return .none
        case .timeout:
            guard !isFinal, started else { return .none }
            if wait == .connectivity || wait == .connectivityCheck {
                return end(.stopAndComplete(.error(.timedOut,
                    "no route to the host appeared within timeoutIntervalForResource (the task waited for connectivity)")))
            }
            return end(.stopAndComplete(.error(.timedOut, "the request timed out")))
        case .clock(let idleFor, let elapsed, let idleLimit, let totalLimit):
            guard !isFinal, started else { return .none }
            // Time spent suspended, paused by a slow consumer or waiting for the delegate
            // is not the peer's; waiting for a route is bounded by the total alone.
            let quiet = lifecycle != .running || wait != .none || flowPaused
            if (!quiet && idleFor > idleLimit) || elapsed > totalLimit { return handle(.timeout) }
            return quiet ? .restartIdleClock : .none
        case .connectivityChecked(let reachable):
            guard !isFinal, wait == .connectivityCheck else { return .none }
            if reachable {
                let failure = pendingFailure ?? PorterError(.cannotConnectToHost, "the connection failed")
                pendingFailure = nil
                return end(.stopAndComplete(.failed(failure)))
            }
            wait = .connectivity
            let notify = !reportedWaiting
            reportedWaiting = true
            return .waitForConnectivity(notify: notify)
        case .networkChanged:
            guard !isFinal, wait == .connectivity else { return .none }
            pendingFailure = nil
            wait = .plan
            return .retryLoad(hopRequest)
        case .backlog:
            guard !isFinal, !flowPaused else { return .none }
            flowPaused = true
            return lifecycle == .running ? toHandler(.pauseHandler) : .none
        case .drained:
            guard !isFinal, flowPaused else { return .none }
            flowPaused = false
            return lifecycle == .running ? toHandler(.resumeHandler) : .none
        case .loadPlanned(let prepared, let lookup):
            guard !isFinal, wait == .plan else { return .none }
            wait = .none
            request = prepared
            switch CacheStep.decide(lookup) {
            case .serve(let hit, let served):
                cachedResponse = hit
                return .serveCached(hit, serving: served, revalidated: false, generation: generation)
            case .load(let candidate):
                cachedResponse = candidate
                return .load(prepared, cachedResponse: candidate, paused: handlerPaused, generation: generation)
            case .fail(let code, let message):
                return end(.stopAndComplete(.error(code, message)))
            }
        case .sinkFailed(let error):
            guard !isFinal, started else { return .none }
            return end(.stopAndComplete(.failed(error)))
        case .startFailed(let error):
            guard !isFinal, wait == .plan else { return .none }
            wait = .none
            return end(.stopAndComplete(.failed(error)))
        case .responseDecision(let disposition):
            guard !isFinal, wait == .responseDisposition, let (response, _) = pendingResponse else { return .none }
            wait = .none
            pendingResponse = nil
            switch disposition {
            case .allow: return .continueAfterDecision(response)
            case .cancel: return end(.stopAndComplete(.cancelled))
            case .becomeDownload: return .becomeDownload(response)
            }
        case .redirectDecision(let chosen):
            guard !isFinal, wait == .redirectDecision, let redirectResponse = pendingRedirect else { return .none }
            wait = .none
            pendingRedirect = nil
            guard let chosen else {
                responseReceived = true
                return end(.completeWithRedirectResponse(redirectResponse))
            }
            redirectCount += 1
            generation += 1
            responseReceived = false
            flowPaused = false
            cachedResponse = nil
            clearDeferred()
            request = chosen
            hopRequest = chosen
            wait = .plan
            return .followRedirect(chosen)
        case .challengeDecision(let id, let disposition):
            guard !isFinal, wait == .challengeDecision(id), let challenge = pendingChallenge else { return .none }
            wait = .none
            pendingChallenge = nil
            if disposition == .cancelAuthenticationChallenge {
                return end(.stopAndComplete(.error(.userCancelledAuthentication, "authentication was cancelled")))
            }
            return .replyChallenge(challenge, disposition)
        case .handler(let gen, let report):
            guard !isFinal, gen == generation else {
                if case .data(let d) = report { return .discardData(d.count) }
                return .none
            }
            if case .challengeWithdrawn(let challenge) = report {
                // Ends the wait for that challenge at once, even behind kept reports.
                if wait == .challengeDecision(challenge.identifier) {
                    wait = .none
                    pendingChallenge = nil
                }
                return .none
            }
            // Everything else, a failure included, keeps its place in line: the delegate
            // sees the response and the data that came before a failure, then the failure.
            let action: Action
            if canProcessHandlerEvents, deferredCount == 0 {
                action = process(report)
            } else {
                deferred.append((gen, report))
                action = .none
            }
            // The stores hear of a response when it arrives, kept or not, before the
            // delegate or a redirect's next hop sees anything.
            switch report {
            case .response(let r, _), .redirect(_, let r): return .recordResponse(r, then: action)
            default: return action
            }
        }
    }

    /// The next kept report's action, when the machine lets it through now; nil when
    /// none is kept or the task waits (suspended, or for the delegate).
    package mutating func nextDeferredAction() -> Action? {
        if discardedBytes > 0 {
            defer { discardedBytes = 0 }
            return .discardData(discardedBytes)
        }
        while canProcessHandlerEvents, deferredHead < deferred.count {
            let (gen, report) = deferred[deferredHead]
            deferredHead += 1
            if deferredHead == deferred.count { clearDeferred() }
            guard gen == generation else {
                if case .data(let d) = report { return .discardData(d.count) }
                continue
            }
            return process(report)
        }
        return nil
    }

    /// Drops the kept reports; the flow credit of their data comes back through
    /// `nextDeferredAction` (`discardData`).
    private mutating func clearDeferred() {
        for (_, report) in deferred[deferredHead...] {
            if case .data(let d) = report { discardedBytes += d.count }
        }
        deferred.removeAll(keepingCapacity: true)
        deferredHead = 0
    }

    /// A pause or resume for the handler, when there is one: between `start` (or a
    /// followed redirect) and `load` there is none, and `load` carries the state.
    private func toHandler(_ action: Action) -> Action {
        started && wait != .plan ? action : .none
    }

    private mutating func end(_ action: Action) -> Action {
        if lifecycle != .canceling { lifecycle = .completed }
        return finish(action)
    }

    private mutating func finish(_ action: Action) -> Action {
        clearDeferred()
        pendingResponse = nil
        pendingRedirect = nil
        pendingChallenge = nil
        let ending = Ending(redirectCount: redirectCount, producesResumeData: wantsResumeData)
        switch action {
        case .complete(let o, _): return .complete(o, ending)
        case .stopAndComplete(let o, _): return .stopAndComplete(o, ending)
        case .completeWithRedirectResponse(let r, _): return .completeWithRedirectResponse(r, ending)
        default: return action
        }
    }

    private mutating func process(_ report: HandlerReport) -> Action {
        switch report {
        case .fail(let error):
            if waitsForConnectivity, !responseReceived, TaskStateMachine.connectivityFailures.contains(error.code) {
                // Maybe no network: the driver looks for a route; reports of this handler
                // are dropped from here on (a retry is a new generation).
                generation += 1
                clearDeferred()
                cachedResponse = nil
                pendingFailure = error
                wait = .connectivityCheck
                return .checkConnectivity(hopRequest)
            }
            return end(.stopAndComplete(.failed(error)))
        case .response(let response, let policy):
            if responseReceived { return .ignoreViolation("a second response was dropped") }
            responseReceived = true
            if asksResponseDisposition {
                wait = .responseDisposition
                pendingResponse = (response, policy)
                return .askResponseDisposition(response, policy)
            }
            return .deliverResponse(response, policy)
        case .data(let data):
            guard responseReceived else {
                discardedBytes += data.count
                return end(.stopAndComplete(.error(.protocolViolation, "the handler delivered data before a response")))
            }
            return .deliverData(data)
        case .redirect(let proposed, let redirectResponse):
            guard !responseReceived else {
                return end(.stopAndComplete(.error(.protocolViolation, "the handler redirected after a response")))
            }
            guard redirectPolicy.allows(from: request, to: proposed) else {
                return end(.stopAndComplete(.error(.redirectNotAllowed, "redirect to a scheme this session does not allow")))
            }
            // An internal redirect (an HSTS upgrade) is no server's hop: not counted, and the
            // request keeps its fields (same host, now over TLS).
            guard redirectResponse.isInternalRedirect || redirectCount < redirectPolicy.maximumRedirects else {
                return end(.stopAndComplete(.error(.tooManyRedirects, "more than \(redirectPolicy.maximumRedirects) redirects")))
            }
            wait = .redirectDecision
            pendingRedirect = redirectResponse
            return .askRedirect(redirectResponse.isInternalRedirect ? proposed : RedirectPolicy.prepare(proposed, from: request),
                                redirectResponse)
        case .finish:
            guard responseReceived else {
                return end(.stopAndComplete(.error(.protocolViolation, "the handler finished without a response")))
            }
            return end(.complete(.finished))
        case .challenge(let challenge):
            wait = .challengeDecision(challenge.identifier)
            pendingChallenge = challenge
            return .askChallenge(challenge.identifier, challenge)
        case .cachedResponseValid(let served, let revalidated):
            if responseReceived { return .ignoreViolation("cachedResponseIsValid after a response was dropped") }
            guard let hit = cachedResponse else {
                return end(.stopAndComplete(.error(.protocolViolation, "cachedResponseIsValid without a cached response")))
            }
            // The stored response is served through this machine as a handler's reports.
            cachedResponse = nil
            return .serveCached(hit, serving: served, revalidated: revalidated, generation: generation)
        case .challengeWithdrawn:
            return .none  // handled in `handle`
        }
    }
}
