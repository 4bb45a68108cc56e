import PorterCore

/// The public life-cycle state of a task.
public enum TaskState: Int, Sendable, CustomStringConvertible {
    case running, suspended, canceling, completed
    public var description: String {
        switch self {
        case .running: return "running"
        case .suspended: return "suspended"
        case .canceling: return "canceling"
        case .completed: return "completed"
        }
    }
}

/// The whole life cycle of one task as a value: an event goes in, one action comes
/// out; no I/O, no callbacks, no clocks. `TaskDriver` performs the actions.
///
/// Guarantees, by construction:
/// - exactly one `complete` / `stopAndComplete` action per task, whatever arrives;
/// - nothing after it (every event in `.completed` or `.canceling` yields `.none`);
/// - handler events of an earlier handler (before a redirect) are dropped by generation;
/// - handler events that arrive while a delegate decision is pending, or while the task
///   is suspended, are deferred and replayed in order (`canProcessHandlerEvents`);
///   only a withdrawn challenge goes straight through, as it ends the wait.
struct TaskStateMachine: Sendable {
    enum Outcome: Equatable, Sendable {
        case finished
        /// The handler failed; the driver holds its error.
        case failed
        case cancelled
        /// A failure the machine itself decided.
        case error(PorterError.Code, String)
    }

    enum Wait: Equatable, Sendable {
        case none
        case responseDisposition
        case redirectDecision
        case challengeDecision(UInt64)
    }

    enum HandlerEvent: Equatable, Sendable {
        case response
        case data
        /// `allowed` is the session's scheme policy for the new URL.
        case redirect(allowed: Bool)
        case finish
        case fail
        case challenge(UInt64)
        case challengeWithdrawn(UInt64)
        case cachedResponseValid
    }

    enum Event: Equatable, Sendable {
        case resume
        case suspend
        case cancel
        case handler(generation: UInt64, HandlerEvent)
        case responseDecision(ResponseDisposition)
        case redirectDecision(follow: Bool)
        case challengeDecision(UInt64, cancel: Bool)
        case timeout
        case completionDelivered
    }

    enum Action: Equatable, Sendable {
        case none
        /// Make a handler for the current request and start it (generation is current).
        case start
        case pauseDelivery
        /// Resume delivery and replay deferred events.
        case resumeDelivery
        /// Keep the event; replay it when `canProcessHandlerEvents`.
        case deferEvent
        /// Deliver the response to the sink without asking.
        case deliverResponse
        case askResponseDisposition
        /// The delegate allowed the response: replay deferred events.
        case continueAfterDecision
        case becomeDownload
        case deliverData
        case askRedirect
        /// Stop the old handler, start one for the new request (generation already bumped).
        case followRedirect
        /// Stop the handler; the redirect response is the task's final response.
        case completeWithRedirectResponse
        case askChallenge(UInt64)
        /// Pass the delegate's disposition to the handler, then replay deferred events.
        case replyChallenge(UInt64)
        /// The handler withdrew the pending challenge: forget it, replay deferred events.
        case forgetChallenge(UInt64)
        case deliverCachedResponse
        /// A handler broke the contract in a harmless way; log it and carry on.
        case ignoreViolation(String)
        case complete(Outcome)
        case stopAndComplete(Outcome)
    }

    private(set) var lifecycle: TaskState = .suspended
    private(set) var started = false
    private(set) var wait: Wait = .none
    private(set) var responseReceived = false
    private(set) var redirectCount = 0
    private(set) var generation: UInt64 = 0
    let maximumRedirects: Int
    /// True when the data delegate is asked about the response.
    let asksResponseDisposition: Bool

    init(maximumRedirects: Int, asksResponseDisposition: Bool) {
        self.maximumRedirects = maximumRedirects
        self.asksResponseDisposition = asksResponseDisposition
    }

    var isFinal: Bool { lifecycle == .completed || lifecycle == .canceling }
    var canProcessHandlerEvents: Bool { lifecycle == .running && wait == .none }

    mutating func handle(_ event: Event) -> Action {
        switch event {
        case .resume:
            switch lifecycle {
            case .suspended where !started:
                lifecycle = .running
                started = true
                return .start
            case .suspended:
                lifecycle = .running
                return .resumeDelivery
            default: return .none
            }
        case .suspend:
            guard lifecycle == .running else { return .none }
            lifecycle = .suspended
            return .pauseDelivery
        case .cancel:
            guard lifecycle == .running || lifecycle == .suspended else { return .none }
            lifecycle = .canceling
            return .stopAndComplete(.cancelled)
        case .completionDelivered:
            if lifecycle == .canceling { lifecycle = .completed }
            return .none
        case .timeout:
            guard !isFinal, started else { return .none }
            return end(.stopAndComplete(.error(.timedOut, "the request timed out")))
        case .responseDecision(let disposition):
            guard !isFinal, wait == .responseDisposition else { return .none }
            wait = .none
            switch disposition {
            case .allow: return .continueAfterDecision
            case .cancel: return end(.stopAndComplete(.cancelled))
            case .becomeDownload: return .becomeDownload
            }
        case .redirectDecision(let follow):
            guard !isFinal, wait == .redirectDecision else { return .none }
            wait = .none
            if follow {
                redirectCount += 1
                generation += 1
                responseReceived = false
                return .followRedirect
            }
            responseReceived = true
            return end(.completeWithRedirectResponse)
        case .challengeDecision(let id, let cancel):
            guard !isFinal, wait == .challengeDecision(id) else { return .none }
            wait = .none
            if cancel { return end(.stopAndComplete(.error(.userCancelledAuthentication, "authentication was cancelled"))) }
            return .replyChallenge(id)
        case .handler(let gen, let hev):
            guard !isFinal, gen == generation else { return .none }
            return handle(hev)
        }
    }

    private mutating func end(_ action: Action) -> Action {
        if lifecycle != .canceling { lifecycle = .completed }
        return action
    }

    private mutating func handle(_ event: HandlerEvent) -> Action {
        if case .challengeWithdrawn(let id) = event {
            if wait == .challengeDecision(id) {
                wait = .none
                return .forgetChallenge(id)
            }
            return .none
        }
        // Everything else, a failure included, keeps its place in line: the delegate sees
        // the response and the data that came before a failure, then the failure.
        guard canProcessHandlerEvents else { return .deferEvent }
        switch event {
        case .fail:
            return end(.stopAndComplete(.failed))
        case .response:
            if responseReceived { return .ignoreViolation("a second response was dropped") }
            responseReceived = true
            if asksResponseDisposition {
                wait = .responseDisposition
                return .askResponseDisposition
            }
            return .deliverResponse
        case .data:
            guard responseReceived else {
                return end(.stopAndComplete(.error(.protocolViolation, "the handler delivered data before a response")))
            }
            return .deliverData
        case .redirect(let allowed):
            guard !responseReceived else {
                return end(.stopAndComplete(.error(.protocolViolation, "the handler redirected after a response")))
            }
            guard allowed else {
                return end(.stopAndComplete(.error(.redirectNotAllowed, "redirect to a scheme this session does not allow")))
            }
            guard redirectCount < maximumRedirects else {
                return end(.stopAndComplete(.error(.tooManyRedirects, "more than \(maximumRedirects) redirects")))
            }
            wait = .redirectDecision
            return .askRedirect
        case .finish:
            guard responseReceived else {
                return end(.stopAndComplete(.error(.protocolViolation, "the handler finished without a response")))
            }
            return end(.complete(.finished))
        case .challenge(let id):
            wait = .challengeDecision(id)
            return .askChallenge(id)
        case .cachedResponseValid:
            if responseReceived { return .ignoreViolation("cachedResponseIsValid after a response was dropped") }
            return .deliverCachedResponse
        case .challengeWithdrawn:
            return .none  // handled above
        }
    }
}
