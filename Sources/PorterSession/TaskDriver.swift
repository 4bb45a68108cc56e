import Foundation
import Logging
import PorterCore
import PorterEngine
import Synchronization

/// Performs what `TaskStateMachine` decides for one task. Every piece of its mutable
/// state is confined to `executor` (the thread of the handler's I/O, or a serial queue
/// of the session's); other threads reach it by `send`, and read only the atomic
/// mirrors (`state`, `bufferedByteCount`). Application callbacks are never made here:
/// they go to the session's delegate queue (`Session.deliver`), in order.
///
/// The shell is split by job: this file runs events and performs actions;
/// `TaskDriver+Inbox` takes handler reports, `TaskDriver+Load` prepares and starts
/// loads (cookie and cache steps), `TaskDriver+Challenges` answers challenges,
/// `TaskDriver+Flow` counts what consumers hold and watches the clock.
final class TaskDriver: @unchecked Sendable {
    let session: Session
    let executor: any TaskExecutor
    /// Unique in the process, for `TaskEventCenter`.
    let eventID = TaskEventCenter.taskIDs.next()
    /// The session's `TaskObserver` for this task (tracing, metrics), made here on the
    /// creating thread so it sees the creator's task-local context. Called on the executor.
    let observation: (any TaskObservation)?

    // Read from any thread.
    private let lifecycleMirror = Atomic<Int>(TaskState.suspended.rawValue)
    /// resume/suspend/cancel calls whose event the executor has not run yet, and the
    /// state the last of them asked for: `state` reads as URLSessionTask's does, changed
    /// when the call returns (the machine still decides; the mirror then agrees).
    private let controlsInFlight = Atomic<Int>(0)
    private let requestedState = Atomic<Int>(TaskState.suspended.rawValue)
    /// Received bytes handed to a consumer and not yet taken by it.
    let outstanding = Atomic<Int>(0)
    /// The machine's `flowPaused`, for consumers deciding whether to report `drained`.
    let flowPausedMirror = Atomic<Bool>(false)
    /// Inbox items not yet run (`TaskDriver+Inbox`).
    let inboxCount = Atomic<Int>(0)

    // Executor only.
    // `machine`, `running` and `pending` are read and changed dozens of times per load:
    // they skip the runtime's exclusivity check. Each access ends before anything else
    // runs — the machine is a pure value whose methods call nothing back, and the others
    // are read or assigned whole — so no two accesses can overlap.
    @exclusivity(unchecked) var machine: TaskStateMachine
    /// The current handler, and the client it reports to. The client holds the driver
    /// and the handler strongly (a weak reference gives its object a side table, and every
    /// retain and release of it then takes the runtime's slow path: ~5,000 instructions a
    /// load in W2's profile); the cycle is broken here, whenever the driver lets go of a
    /// handler (`detach`).
    var handler: (any ProtocolHandler)? {
        didSet { if handler == nil { handlerClient?.detach(); handlerClient = nil } }
    }
    var handlerClient: HandlerClient?
    private(set) var owner: SessionTask?
    /// The request being loaded, as prepared (headers, cookies); the cache key's source.
    var currentRequest: Request
    private(set) var response: Response?
    private(set) var storagePolicy: CacheStoragePolicy = .notAllowed
    var transactionMetrics: [TransactionMetrics] = []
    var startDate = Date()
    var startTime = DispatchTime.now()
    var lastActivity = DispatchTime.now()
    /// Failures per protection space and the password credential last answered per
    /// space (`TaskDriver+Challenges`).
    var failureCounts: [ProtectionSpace: Int] = [:]
    var usedCredentials: [ProtectionSpace: Credential] = [:]
    /// Set by the task's completing action: the cancel asked for resume data.
    var producesResumeData = false
    /// `cancel(byProducingResumeData:)`'s answer while its event runs, for a task that had ended.
    var resumeDataUnavailable: (@Sendable () -> Void)?
    /// The factory `prepare` chose for the current request.
    var plannedFactory: (any ProtocolHandlerFactory)?
    /// The handler's canonical form of the current request: the cache key.
    var cacheKeyRequest: Request?
    /// The application set its own Cookie header: the store stays out of this task.
    lazy var cookiesAutomatic: Bool = currentRequest.headerFields[.cookie] == nil
    var idleLimit: TimeInterval = 60
    var totalLimit: TimeInterval = 7 * 24 * 3600
    let inbox = Inbox()
    /// Inside `run` (executor only).
    @exclusivity(unchecked) private(set) var running = false
    @exclusivity(unchecked) private var pending: [Work] = []

    /// Set before the task is handed out, read on the executor at start.
    private var startError: PorterError?
    var needsBodyStreamBeforeStart = false

    enum Work {
        case event(TaskStateMachine.Event)
        case item(UInt64, InboxItem)
    }

    /// The task will fail with `error` as soon as it is resumed (before it is handed out).
    func abortBeforeStart(_ error: PorterError) { startError = error }

    var logger: Logger { session.configuration.logger }

    init(session: Session, request: Request, owner: SessionTask, asksResponseDisposition: Bool) {
        self.session = session
        self.currentRequest = request
        self.owner = owner
        let config = session.configuration
        let context = SessionContext(configuration: config, sessionIdentifier: session.identifier)
        self.executor = TaskDriver.factory(for: request, in: config)?.executor(for: request, context: context)
            ?? session.workExecutor
        let policy = RedirectPolicy(maximumRedirects: config.maximumRedirects, allowedSchemes: config.allowedRedirectSchemes) { target in
            // A handler that never wants to be a redirect target (a plugin without the
            // flag) is not reached even when the application allows the scheme.
            TaskDriver.factory(for: target, in: config)?.mayBeRedirectTarget(scheme: target.scheme) ?? true
        }
        let waits: Bool
        if case .background = config.kind { waits = false } else { waits = config.waitsForConnectivity }
        self.machine = TaskStateMachine(request: request, redirectPolicy: policy, asksResponseDisposition: asksResponseDisposition,
                                        waitsForConnectivity: waits)
        self.observation = config.taskObserver?.observeTask(request)
        TaskEventCenter.shared.post(.created(taskID: eventID, url: request.url))
    }

    static func factory(for request: Request, in config: SessionConfiguration) -> (any ProtocolHandlerFactory)? {
        config.handlers.first(where: { $0.schemes.contains(request.scheme) && $0.canHandle(request) })
            ?? config.registry.factory(for: request)
    }

    // MARK: - seen from any thread

    var state: TaskState {
        let decided = TaskState(rawValue: lifecycleMirror.load(ordering: .acquiring)) ?? .completed
        guard decided != .completed, decided != .canceling, controlsInFlight.load(ordering: .acquiring) > 0 else { return decided }
        return TaskState(rawValue: requestedState.load(ordering: .acquiring)) ?? decided
    }

    /// A resume, suspend or cancel from the application (any thread).
    func control(_ event: TaskStateMachine.Event, expecting: TaskState) {
        if executor.isCurrent, running {
            run(.event(event))
            return
        }
        // Queued, never run nested (see `send`): a resume from a completion must not grow
        // the stack by one task's whole life.
        requestedState.store(expecting.rawValue, ordering: .releasing)
        controlsInFlight.add(1, ordering: .acquiringAndReleasing)
        executor.execute {
            self.run(.event(event))
            self.controlsInFlight.subtract(1, ordering: .acquiringAndReleasing)
        }
    }
    var bufferedByteCount: Int { max(0, outstanding.load(ordering: .relaxed)) }

    /// Runs `event` on the executor. Called from inside this task's own run (a callback
    /// on the loading thread cancelling its task) it waits its turn there; from anywhere
    /// else it is queued, so one task's life never runs nested inside another task's
    /// callback (a `resume()` from a completion, repeated over a list of tasks answered
    /// at once from the cache, recursed until the stack ended), and events keep the
    /// order they were sent in.
    func send(_ event: TaskStateMachine.Event) {
        if executor.isCurrent, running {
            run(.event(event))
        } else {
            executor.execute { self.run(.event(event)) }
        }
    }

    /// Runs `event` at once when on the executor (flow events from the handler's own
    /// callbacks: the pause must take effect before the handler's next chunk), else
    /// queues it there.
    func sendNow(_ event: TaskStateMachine.Event) {
        if executor.isCurrent {
            run(.event(event))
        } else {
            executor.execute { self.run(.event(event)) }
        }
    }

    /// `cancel(byProducingResumeData:)`: `alreadyOver` runs when the task had ended.
    func cancelProducingResumeData(alreadyOver: @escaping @Sendable () -> Void) {
        executor.execute {
            self.resumeDataUnavailable = alreadyOver
            self.run(.event(.cancel(producingResumeData: true)))
            self.resumeDataUnavailable = nil
        }
    }

    // MARK: - running (executor)

    /// Runs one piece of work and everything it leads to, in order. Work that arrives
    /// while an action is being performed (a handler reporting from inside
    /// `startLoading`, a sink failing) waits its turn here instead of re-entering.
    func run(_ work: Work) {
        assert(executor.isCurrent, "a task's life cycle ran off its executor")
        if running {
            pending.append(work)
            return
        }
        running = true
        var next: Work? = work
        while let w = next {
            perform(w)
            while let action = machine.nextDeferredAction() { perform(action) }
            next = pending.isEmpty ? nil : pending.removeFirst()
        }
        running = false
        publish()
    }

    private func perform(_ work: Work) {
        // Anything that happens to the task is activity, except the clock looking at it.
        if case .event(.clock) = work {} else { lastActivity = .now() }
        switch work {
        case .event(let event):
            perform(machine.handle(event))
        case .item(let gen, let item):
            take(gen, item)
        }
    }

    /// Makes the machine's state visible to other threads.
    private func publish() {
        lifecycleMirror.store(machine.lifecycle.rawValue, ordering: .releasing)
        let paused = machine.flowPaused
        flowPausedMirror.store(paused, ordering: .sequentiallyConsistent)
        // A consumer that drained while the pause was being decided saw no pause to end.
        if paused, outstanding.load(ordering: .sequentiallyConsistent) <= lowWater, !machine.isFinal {
            run(.event(.drained))
        }
    }

    // MARK: - actions

    func perform(_ action: TaskStateMachine.Action) {
        switch action {
        case .none:
            break
        case .start(let request):
            startDate = Date()
            startTime = .now()
            armTimer()
            if let startError {
                run(.event(.startFailed(startError)))
            } else {
                begin(request, needsStream: needsBodyStreamBeforeStart, afterRedirect: false)
            }
        case .load(let request, let cached, let paused, let generation):
            load(request, cachedResponse: cached, paused: paused, generation: generation)
        case .serveCached(let hit, let served, let revalidated, let generation):
            serveCached(hit, serving: served, revalidated: revalidated, generation: generation)
        case .pauseHandler:
            handler?.pauseDelivery()
        case .resumeHandler:
            handler?.resumeDelivery()
        case .deliverResponse(let r, let policy):
            noteResponse(r, policy)
            owner?.sinkResponse(r, driver: self)
        case .askResponseDisposition(let r, let policy):
            noteResponse(r, policy)
            guard let task = owner as? DataTask, let delegate = session.dataDelegate(for: owner) else {
                run(.event(.responseDecision(.allow)))
                return
            }
            logger.debug("task \(task.taskIdentifier): response \(r)")
            session.deliver {
                delegate.dataTask(task, didReceive: r) { disposition in self.send(.responseDecision(disposition)) }
            }
        case .continueAfterDecision(let r):
            owner?.sinkResponse(r, driver: self)
        case .becomeDownload(let r):
            guard let dataTask = owner as? DataTask else { return }
            let download = DownloadTask(session: session, adopting: self, from: dataTask)
            owner = download
            dataTask.detach()
            session.adopt(download, replacing: dataTask)
            if let delegate = session.dataDelegate(for: owner) {
                session.deliver { delegate.dataTask(dataTask, didBecome: download) }
            }
            download.sinkResponse(r, driver: self)
        case .deliverData(let data):
            // Counted as held when it was handed over (`hold`); the consumer says when it
            // is done with it (`consumed`).
            owner?.sinkData(data, driver: self)
        case .discardData(let count):
            consumed(count)
        case .recordResponse(let r, let then):
            storeCookies(from: r)
            invalidateCache(after: r)
            perform(then)
        case .restartIdleClock:
            lastActivity = .now()
        case .resumeDataUnavailable:
            resumeDataUnavailable?()
            resumeDataUnavailable = nil        case .askRedirect(let newRequest, let redirectResponse):
            logger.debug("redirect \(currentRequest.url.maskingPassword) -> \(newRequest.url.maskingPassword)")
            TaskEventCenter.shared.post(.redirected(taskID: eventID, from: currentRequest.url, to: newRequest.url))
            observation?.didReceive(redirectResponse)
            guard let delegate = session.taskDelegate(for: owner), let task = owner else {
                run(.event(.redirectDecision(newRequest)))
                return
            }
            session.deliver {
                delegate.task(task, willPerformRedirection: redirectResponse, newRequest: newRequest) { chosen in
                    self.send(.redirectDecision(chosen))
                }
            }
        case .followRedirect(let next):
            stopHandler()
            response = nil
            begin(next, needsStream: next.body.map { if case .stream = $0 { return true } else { return false } } ?? false,
                  afterRedirect: true)
        case .completeWithRedirectResponse(let r, let ending):
            stopHandler()
            response = r
            owner?.sinkResponse(r, driver: self)
            finish(nil, ending)
        case .askChallenge(let id, let challenge):
            askChallenge(challenge, id: id)
        case .replyChallenge(let challenge, let disposition):
            // The answer's effect on the stores, then the handler hears it.
            if case .useCredential(let credential) = disposition, credential.user != nil {
                let space = challenge.protectionSpace
                usedCredentials[space] = credential
                if credential.persistence != .none { session.configuration.credentialStore?.set(credential, for: space) }
            }
            challenge.reply(disposition)
        case .ignoreViolation(let why):
            logger.warning("handler for \(currentRequest.url.maskingPassword): \(why)")
        case .complete(let outcome, let ending):
            finish(error(for: outcome), ending)
        case .stopAndComplete(let outcome, let ending):
            stopHandler()
            finish(error(for: outcome), ending)
        case .checkConnectivity(let request):
            stopHandler()
            let configuration = session.configuration
            DispatchQueue.global().async {
                let reachable = configuration.routeOverride?.hasRoute(to: request.url)
                    ?? Connectivity.hasRoute(for: request.url, configuration: configuration)
                self.send(.connectivityChecked(reachable: reachable))
            }
        case .waitForConnectivity(let notify):
            logger.debug("no route for \(currentRequest.url.maskingPassword): waiting for the network")
            if notify, let delegate = session.taskDelegate(for: owner), let task = owner {
                session.deliver { delegate.taskIsWaitingForConnectivity(task) }
            }
            // Watch first, then look again: a route that appeared in between is not missed.
            NetworkWatch.shared.notifyOnce { [weak self] in self?.send(.networkChanged) }
            let request = currentRequest, configuration = session.configuration
            configuration.routeOverride?.notifyOnChange { [weak self] in self?.send(.networkChanged) }
            DispatchQueue.global().async {
                if configuration.routeOverride?.hasRoute(to: request.url)
                    ?? Connectivity.hasRoute(for: request.url, configuration: configuration) { self.send(.networkChanged) }
            }
        case .retryLoad(let request):
            logger.debug("the network changed: loading \(request.url.maskingPassword) again")
            response = nil
            begin(request, needsStream: request.body.map { if case .stream = $0 { return true } else { return false } } ?? false,
                  afterRedirect: false)
        }
    }

    private func noteResponse(_ r: Response, _ policy: CacheStoragePolicy) {
        response = r
        storagePolicy = policy
        observation?.didReceive(r)
        TaskEventCenter.shared.post(.response(taskID: eventID, url: r.url, statusCode: r.statusCode,
                                              expectedContentLength: r.expectedContentLength))
    }

    /// The one place a task's error gets its URL: always the task's own current hop
    /// (`currentRequest`, after redirects), whatever the report carried. A handler, a
    /// plugin or a sink may have named another URL (one it served earlier, the stored
    /// response's, none): the application must never see an error that names a request
    /// other than its own.
    private func error(for outcome: TaskStateMachine.Outcome) -> PorterError? {
        let url = currentRequest.url
        switch outcome {
        case .finished: return nil
        case .cancelled: return PorterError(.cancelled, "the task was cancelled", url: url)
        case .failed(var e):
            e.url = url
            return e
        case .error(let code, let message): return PorterError(code, message, url: url)
        }
    }

    func stopHandler() {
        let h = handler
        handler = nil
        h?.stopLoading()
    }

    // MARK: - completion

    private func finish(_ error: PorterError?, _ ending: TaskStateMachine.Ending) {
        producesResumeData = ending.producesResumeData
        session.timeouts.unwatch(self)
        guard let task = owner else { return }
        TaskEventCenter.shared.post(.completed(taskID: eventID, url: currentRequest.url,
                                               bytesReceived: task.countOfBytesReceived,
                                               bytesSent: task.countOfBytesSent, error: error))
        observation?.didComplete(error: error, bytesSent: task.countOfBytesSent, bytesReceived: task.countOfBytesReceived)
        if let error { logger.debug("task \(task.taskIdentifier) failed: \(error)") } else {
            logger.debug("task \(task.taskIdentifier) finished")
        }
        let metrics = TaskMetrics(transactionMetrics: transactionMetrics.isEmpty
                                    ? [TransactionMetrics(request: currentRequest)] : transactionMetrics,
                                  taskStartDate: startDate, taskEndDate: Date(), redirectCount: ending.redirectCount)
        // The state reads .completed in (and after) the completion callback, as with
        // URLSessionTask; metrics come first, then the completion.
        _ = machine.handle(.completionDelivered)
        publish()
        if let delegate = session.taskDelegate(for: owner) {
            session.deliver { delegate.task(task, didFinishCollecting: metrics) }
        }
        task.sinkComplete(error, driver: self)
        owner = nil
        handler = nil
        let session = self.session
        session.deliver { session.taskDidComplete(task) }
    }

    /// For sinks: something went wrong on our side of the delivery (a full disk). The
    /// failure ends the task now, ahead of any report still waiting (a `finish` behind it
    /// would otherwise complete the task as a success).
    func abort(_ error: PorterError) {
        perform(machine.handle(.sinkFailed(error)))
    }

    var cacheCandidateStoragePolicy: CacheStoragePolicy { storagePolicy }
    /// The completing action said `cancel(byProducingResumeData:)` ended the task.
    var wantsResumeData: Bool { producesResumeData }
}
