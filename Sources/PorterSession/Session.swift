import Foundation
import PorterCore
import HTTPTypes

/// A set of tasks sharing a configuration and a delegate: Porter's URLSession.
///
/// Delegate methods and completion handlers run on `delegateQueue`, a serial queue
/// of the session's own, so the calls for one task arrive in order and never at the
/// same time.
public final class Session: @unchecked Sendable {
    /// A session with the default configuration and no delegate.
    public static let shared = Session(configuration: .default)

    public let configuration: SessionConfiguration
    public let delegateQueue: DispatchQueue
    /// Unique per session in this process (`SessionContext.sessionIdentifier`).
    public let identifier: UInt64 = Session.identifiers.next()
    private static let identifiers = AtomicCounter()
    public var sessionDescription: String? {
        get { state.withLock { $0.description } }
        set { state.withLock { $0.description = newValue } }
    }

    /// A background session's own tasks (those porterd never sees: refused kinds, stream
    /// and WebSocket tasks) count from here: porterd numbers its tasks from 1 in its
    /// journal, and one session's identifiers must never name two tasks (a completion
    /// porterd delivers again to the next session was taken for a refused task's).
    static let firstLocalBackgroundIdentifier = 1 << 52

    private struct State {
        var tasks: [Int: SessionTask] = [:]
        var nextIdentifier = 1
        var invalidated = false
        var invalidationReported = false
        var delegate: (any SessionDelegate)?
        var description: String?
    }
    private let state: Locked<State>
    private let isShared: Bool
    /// One timer for the idle and total timeouts of all running tasks.
    let timeouts = TimeoutWatch(queue: DispatchQueue.global(qos: .utility))
    /// Where the life cycle of tasks runs whose handler names no executor of its own.
    let workExecutor: any TaskExecutor = QueueExecutor(label: "porter.session.tasks")

    /// Application callbacks run on the task's executor (`init(configuration:delegateOnLoadingThread:)`).
    package let deliversInline: Bool
    /// A background session's connection to porterd (set once, in init).
    private(set) var background: (any BackgroundClient)?

    /// Runs an application callback (on a task's executor): on the delegate queue after
    /// those given before it, or at once for a session that delivers inline.
    package func deliver(_ work: @escaping @Sendable () -> Void) {
        if deliversInline { work() } else { delegateQueue.async(execute: work) }
    }

    public convenience init(configuration: SessionConfiguration, delegate: (any SessionDelegate)? = nil,
                            delegateQueue: DispatchQueue? = nil) {
        self.init(configuration: configuration, delegate: delegate, queue: delegateQueue, inline: false)
    }

    /// A session whose delegate is called on the thread that runs each task (its
    /// executor: libcurl's loop thread for http and ftp) instead of a delegate queue: no
    /// thread hop per callback, which is what a program moving many small responses
    /// wants. The callbacks of one task come in order, but those of different tasks may
    /// run at the same time on different threads, and a callback that blocks holds up
    /// every transfer on its thread: the delegate must be thread-safe and quick.
    /// `delegateQueue` is then used only for what has no task (invalidation).
    public convenience init(configuration: SessionConfiguration, delegateOnLoadingThread delegate: any SessionDelegate) {
        self.init(configuration: configuration, delegate: delegate, queue: nil, inline: true)
    }

    private init(configuration: SessionConfiguration, delegate: (any SessionDelegate)?, queue: DispatchQueue?, inline: Bool) {
        self.configuration = configuration
        self.delegateQueue = queue ?? DispatchQueue(label: "porter.session.delegate")
        self.deliversInline = inline
        var s = State()
        s.delegate = delegate
        if case .background = configuration.kind { s.nextIdentifier = Session.firstLocalBackgroundIdentifier }
        self.state = Locked(s)
        self.roles = Locked(Roles(delegate))
        self.isShared = false
        if case .background(let id) = configuration.kind {
            let launchCommand = configuration.sessionSendsLaunchEvents ? configuration.launchCommand ?? [] : []
            background = Session.backgroundClientProvider?.client(for: self, identifier: id, launchCommand: launchCommand)
                ?? MissingBackgroundClient()
        }
    }

    private init(configuration: SessionConfiguration) {
        self.configuration = configuration
        self.deliversInline = false
        self.delegateQueue = DispatchQueue(label: "porter.session.shared")
        self.state = Locked(State())
        self.roles = Locked(Roles(nil))
        self.isShared = true
    }

    /// A background session let go without being invalidated lets go of porterd too
    /// (else the daemon would see the session held and never idle).
    deinit { background?.close() }

    public var delegate: (any SessionDelegate)? { state.withLock { $0.delegate } }
    /// The delegate as each role, cast once (a conformance check per callback costs more
    /// than the callback); nil once the session reported its invalidation.
    package var taskDelegate: (any TaskDelegate)? { roles.withLock { $0.task } }
    var dataDelegate: (any DataDelegate)? { roles.withLock { $0.data } }
    package var downloadDelegate: (any DownloadDelegate)? { roles.withLock { $0.download } }
    /// The delegate in each role for `task`: its own (`SessionTask.delegate`) when it has
    /// one that plays the role, else the session's (URLSession's order).
    func taskDelegate(for task: SessionTask?) -> (any TaskDelegate)? { task?.delegateRoles?.task ?? taskDelegate }
    func dataDelegate(for task: SessionTask?) -> (any DataDelegate)? { task?.delegateRoles?.data ?? dataDelegate }
    func downloadDelegate(for task: SessionTask?) -> (any DownloadDelegate)? { task?.delegateRoles?.download ?? downloadDelegate }

    struct Roles {
        var task: (any TaskDelegate)?
        var data: (any DataDelegate)?
        var download: (any DownloadDelegate)?
        init(_ d: (any SessionDelegate)?) {
            task = d as? any TaskDelegate
            data = d as? any DataDelegate
            download = d as? any DownloadDelegate
        }
    }
    private let roles: Locked<Roles>

    /// Tasks not yet completed, of every kind (stream and WebSocket tasks too, as
    /// URLSession's), in the order they were made.
    public var allTasks: [any AnySessionTask] {
        let transfers: [SessionTask] = background?.allTasks ?? state.withLock { Array($0.tasks.values) }
        let connections = connectionTasks.withLock { $0.values.compactMap(\.task) }
        return (transfers.map { $0 as any AnySessionTask } + connections.map { $0 as any AnySessionTask })
            .sorted { $0.taskIdentifier < $1.taskIdentifier }
    }

    /// The session's tasks, as `allTasks` (URLSession's spelling). For a background
    /// session: every task porterd holds for it, made by this process or an earlier one.
    public func getAllTasks(completionHandler: @escaping @Sendable ([any AnySessionTask]) -> Void) {
        let tasks = allTasks
        delegateQueue.async { completionHandler(tasks) }
    }

    /// A task porterd runs for this background session; a task that fails at once (with
    /// the reason) when the daemon cannot take it.
    private func backgroundTask<T: SessionTask>(_ transfer: BackgroundTransfer, _ client: any BackgroundClient, local: (Int) -> T) -> T {
        // The same request check as every in-process load's, before porterd is asked.
        var checked = Request(url: transfer.url, method: transfer.method)
        checked.body = nil
        if let invalid = checked.validationError {
            return register(local, configure: { $0.driver.abortBeforeStart(invalid) })
        }
        switch client.enqueue(transfer) {
        case .success(let made):
            if let task = made as? T {
                if let delegate = self.delegate { deliver { delegate.session(self, didCreateTask: task) } }
                return task
            }
            return register(local, configure: { $0.driver.abortBeforeStart(PorterError(.unknown, "porterd made a task of another kind")) })
        case .failure(let error):
            return register(local, configure: { $0.driver.abortBeforeStart(error) })
        }
    }

    /// The bytes-per-second cap of a background session's transfers: its own, lowered to
    /// the discretionary cap when the session is discretionary.
    static func backgroundCap(_ c: SessionConfiguration) -> Int64? {
        guard c.isDiscretionary else { return c.maximumBytesPerSecond }
        return min(c.maximumBytesPerSecond ?? .max, max(1, c.discretionaryBytesPerSecond))
    }

    private func refusedInBackground<T: SessionTask>(_ local: (Int) -> T, _ why: String) -> T {
        register(local, configure: { $0.driver.abortBeforeStart(PorterError(.unsupportedConfiguration, why)) })
    }

    // MARK: - making tasks

    /// A task identifier for a task outside the session's table (stream, WebSocket), and
    /// whether the session was invalidated (such a task then fails when resumed).
    package func reserveTaskIdentifier() -> (Int, invalidated: Bool) {
        state.withLock { s in
            let id = s.nextIdentifier
            s.nextIdentifier += 1
            return (id, s.invalidated)
        }
    }

    /// Stream and WebSocket tasks from their making to their end, held weakly (a task let
    /// go closes its connection), for `allTasks` and `invalidateAndCancel`.
    struct WeakConnectionTask {
        weak var task: (any ConnectionTask)?
    }
    let connectionTasks = Locked([Int: WeakConnectionTask]())

    package func track(_ task: any ConnectionTask, identifier: Int) {
        connectionTasks.withLock { tasks in
            tasks = tasks.filter { $0.value.task != nil }
            tasks[identifier] = WeakConnectionTask(task: task)
        }
    }

    /// A stream or WebSocket task ended: it leaves `allTasks`.
    package func untrack(identifier: Int) {
        connectionTasks.withLock { _ = $0.removeValue(forKey: identifier) }
    }

    /// Makes a task; `configure` finishes it before anyone else can see it (the session's
    /// table, `didCreateTask`), so nothing the driver reads at start is written later.
    private func register<T: SessionTask>(_ make: (Int) -> T, configure: (T) -> Void = { _ in }) -> T {
        let (id, invalid) = state.withLock { s -> (Int, Bool) in
            let id = s.nextIdentifier
            s.nextIdentifier += 1
            return (id, s.invalidated)
        }
        let task = make(id)
        configure(task)
        if invalid {
            task.driver.abortBeforeStart(PorterError(.sessionInvalidated, "the session was invalidated",
                                                     url: task.originalRequest.url))
            return task
        }
        state.withLock { $0.tasks[id] = task }
        if let delegate = self.delegate { deliver { delegate.session(self, didCreateTask: task) } }
        return task
    }

    public func dataTask(with request: Request) -> DataTask {
        register { DataTask(session: self, identifier: $0, request: request, sink: .delegate) }
    }
    public func dataTask(with url: URL) -> DataTask { dataTask(with: Request(url: url)) }
    /// A data task with a delegate of its own (`task.delegate`), consulted before the
    /// session's; a `DataDelegate` one is asked about the response too.
    public func dataTask(with request: Request, delegate: any TaskDelegate) -> DataTask {
        register { DataTask(session: self, identifier: $0, request: request, sink: .delegate, delegate: delegate) }
    }
    public func dataTask(with request: Request,
                         completionHandler: @escaping @Sendable (Data?, Response?, PorterError?) -> Void) -> DataTask {
        register { DataTask(session: self, identifier: $0, request: request, sink: .completion(completionHandler, inline: false)) }
    }
    public func dataTask(with url: URL,
                         completionHandler: @escaping @Sendable (Data?, Response?, PorterError?) -> Void) -> DataTask {
        dataTask(with: Request(url: url), completionHandler: completionHandler)
    }

    /// A data (or upload) task whose completion is Porter's own async wrapper: called on
    /// the task's executor, without a hop to the delegate queue.
    func inlineDataTask(with request: Request, upload body: RequestBody?,
                        completion: @escaping @Sendable (Data?, Response?, PorterError?) -> Void) -> DataTask {
        guard let body else {
            return register { DataTask(session: self, identifier: $0, request: request, sink: .completion(completion, inline: true)) }
        }
        let r = Session.uploadRequest(request, body: body)
        return register { UploadTask(session: self, identifier: $0, request: r, sink: .completion(completion, inline: true)) }
    }

    /// A download task whose completion is Porter's own async wrapper (on the executor).
    func inlineDownloadTask(with request: Request, resumeData: Data?,
                            completion: @escaping @Sendable (URL?, Response?, PorterError?) -> Void) -> DownloadTask {
        if let resumeData { return makeResumedTask(resumeData, sink: .completion(completion, inline: true)) }
        return register { DownloadTask(session: self, identifier: $0, request: request, resume: nil, sink: .completion(completion, inline: true)) }
    }

    func streamTask(with request: Request, buffer: ByteStreamBuffer) -> DataTask {
        register { DataTask(session: self, identifier: $0, request: request, sink: .stream(buffer)) }
    }

    private static func uploadRequest(_ request: Request, body: RequestBody?) -> Request {
        var r = request
        if let body { r.body = body }
        if r.method == "GET" { r.method = "PUT" }
        return r
    }

    /// Uploads `data`. A request whose method is GET is sent as PUT.
    public func uploadTask(with request: Request, from data: Data) -> UploadTask {
        let r = Session.uploadRequest(request, body: .data(data))
        return register { UploadTask(session: self, identifier: $0, request: r, sink: .delegate) }
    }
    public func uploadTask(with request: Request, from data: Data,
                           completionHandler: @escaping @Sendable (Data?, Response?, PorterError?) -> Void) -> UploadTask {
        let r = Session.uploadRequest(request, body: .data(data))
        return register { UploadTask(session: self, identifier: $0, request: r, sink: .completion(completionHandler, inline: false)) }
    }
    public func uploadTask(with request: Request, fromFile file: URL) -> UploadTask {
        let r = Session.uploadRequest(request, body: .file(file))
        if let background {
            let transfer = BackgroundTransfer(kind: .upload, url: r.url, method: r.method,
                                              headers: ResumeData.shareableHeaders(r.headerFields), uploadFile: file.path,
                                              maximumBytesPerSecond: Session.backgroundCap(configuration),
                                              isDiscretionary: configuration.isDiscretionary ? true : nil,
                                              properties: r.properties.compactMapValues { $0 as? String })
            return backgroundTask(transfer, background) { UploadTask(session: self, identifier: $0, request: r, sink: .delegate) }
        }
        return register { UploadTask(session: self, identifier: $0, request: r, sink: .delegate) }
    }
    public func uploadTask(with request: Request, fromFile file: URL,
                           completionHandler: @escaping @Sendable (Data?, Response?, PorterError?) -> Void) -> UploadTask {
        let r = Session.uploadRequest(request, body: .file(file))
        return register { UploadTask(session: self, identifier: $0, request: r, sink: .completion(completionHandler, inline: false)) }
    }
    /// Uploads from the request's `.stream` body, or, when it has none, from a stream the
    /// task delegate gives in `task(_:needNewBodyStream:)`.
    public func uploadTask(withStreamedRequest request: Request) -> UploadTask {
        let r = Session.uploadRequest(request, body: nil)
        return register({ UploadTask(session: self, identifier: $0, request: r, sink: .delegate) }, configure: { task in
            if r.body == nil { task.driver.needsBodyStreamBeforeStart = true }
        })
    }

    public func downloadTask(with request: Request) -> DownloadTask {
        if let background {
            let transfer = BackgroundTransfer(kind: .download, url: request.url, method: request.method,
                                              headers: ResumeData.shareableHeaders(request.headerFields),
                                              maximumBytesPerSecond: Session.backgroundCap(configuration),
                                              isDiscretionary: configuration.isDiscretionary ? true : nil,
                                              properties: request.properties.compactMapValues { $0 as? String })
            return backgroundTask(transfer, background) { DownloadTask(session: self, identifier: $0, request: request, resume: nil, sink: .delegate) }
        }
        return register { DownloadTask(session: self, identifier: $0, request: request, resume: nil, sink: .delegate) }
    }
    public func downloadTask(with url: URL) -> DownloadTask { downloadTask(with: Request(url: url)) }
    public func downloadTask(with request: Request,
                             completionHandler: @escaping @Sendable (URL?, Response?, PorterError?) -> Void) -> DownloadTask {
        let make = { DownloadTask(session: self, identifier: $0, request: request, resume: nil, sink: .completion(completionHandler, inline: false)) }
        if background != nil {
            return refusedInBackground(make, "a background session reports through its delegate; completion handlers are not supported (as in URLSession)")
        }
        return register(make)
    }

    /// Continues a download from `cancel(byProducingResumeData:)` or a failed task's
    /// `PorterError.resumeData`. Invalid resume data fails the task with `.resumeFailed`.
    public func downloadTask(withResumeData data: Data) -> DownloadTask {
        if let background, let resume = try? ResumeData(data: data) {
            let transfer = BackgroundTransfer(kind: .download, url: resume.url, method: resume.method, headers: resume.headers,
                                              resumeData: data, properties: resume.properties)
            return backgroundTask(transfer, background) { DownloadTask(session: self, identifier: $0, request: Request(url: resume.url), resume: nil, sink: .delegate) }
        }
        return makeResumedTask(data, sink: .delegate)
    }
    public func downloadTask(withResumeData data: Data,
                             completionHandler: @escaping @Sendable (URL?, Response?, PorterError?) -> Void) -> DownloadTask {
        makeResumedTask(data, sink: .completion(completionHandler, inline: false))
    }

    private func makeResumedTask(_ data: Data, sink: DownloadTask.Sink) -> DownloadTask {
        do {
            let resume = try ResumeData(data: data)
            let request = Self.request(resuming: resume)
            return register { DownloadTask(session: self, identifier: $0, request: request, resume: resume, sink: sink) }
        } catch {
            let bad = Request(url: URL(string: "about:resume-data")!)
            let failure = (error as? PorterError) ?? PorterError(.resumeFailed, "\(error)")
            return register({ DownloadTask(session: self, identifier: $0, request: bad, resume: nil, sink: sink) },
                            configure: { $0.driver.abortBeforeStart(failure) })
        }
    }

    /// The request a download resumes with. Resume data is input like any other: names
    /// that are not tokens are skipped, and so are fields past the first 10,000 (more
    /// than HTTPFields holds would trap).
    static func request(resuming resume: ResumeData) -> Request {
        var request = Request(url: resume.url, method: resume.method)
        for pair in resume.headers where pair.count == 2 && request.headerFields.count < 10_000 {
            if let name = HTTPField.Name(pair[0]) { request.headerFields.append(HTTPField(name: name, value: pair[1])) }
        }
        for (key, value) in resume.properties ?? [:] { request.setProperty(value, forKey: key) }
        return request
    }

    // MARK: - invalidation

    /// New tasks fail; running ones finish; then the delegate hears
    /// `didBecomeInvalidWithError(nil)` and is released. No effect on `shared`.
    public func finishTasksAndInvalidate() {
        guard !isShared else { return }
        // A background session's tasks go on in porterd: this process lets go of them.
        background?.close()
        state.withLock { $0.invalidated = true }
        reportInvalidIfDone()
    }

    /// Like `finishTasksAndInvalidate`, and cancels every running task (stream and
    /// WebSocket tasks too).
    public func invalidateAndCancel() {
        guard !isShared else { return }
        let tasks = state.withLock { s -> [SessionTask] in
            s.invalidated = true
            return Array(s.tasks.values)
        }
        tasks.forEach { $0.cancel() }
        for connection in connectionTasks.withLock({ $0.values.compactMap(\.task) }) { connection.cancel() }
        if let background {
            background.allTasks.forEach { $0.cancel() }
            background.close()
        }
        reportInvalidIfDone()
    }

    public var isInvalidated: Bool { state.withLock { $0.invalidated } }

    func taskDidComplete(_ task: SessionTask) {
        state.withLock { s in
            if s.tasks[task.taskIdentifier] === task { s.tasks[task.taskIdentifier] = nil }
        }
        reportInvalidIfDone()
    }

    func adopt(_ task: SessionTask, replacing old: SessionTask) {
        state.withLock { $0.tasks[task.taskIdentifier] = task }
    }

    private func reportInvalidIfDone() {
        let delegate = state.withLock { s -> (any SessionDelegate)?? in
            guard s.invalidated, s.tasks.isEmpty, !s.invalidationReported else { return nil }
            s.invalidationReported = true
            let d = s.delegate
            return .some(d)
        }
        guard let delegate else { return }
        state.withLock { $0.delegate = nil }
        roles.withLock { $0 = Roles(nil) }
        delegateQueue.async {
            delegate?.session(self, didBecomeInvalidWithError: nil)
        }
    }

    static let temporaryDirectory: String = {
        let env = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
        return env.hasSuffix("/") && env.count > 1 ? String(env.dropLast()) : env
    }()
}

/// Checks the timeouts of a session's running tasks from one repeating timer on the
/// delivery queue. The timer exists while some task is running and stops at its first
/// tick with none: tasks that start and end between two ticks (cache hits, a stream of
/// small loads) reuse it instead of each making, starting and cancelling one, a trip
/// through libdispatch's manager thread every time.
final class TimeoutWatch: @unchecked Sendable {
    private let queue: DispatchQueue
    private let lock = NSLock()
    private var drivers: [ObjectIdentifier: TaskDriver] = [:]
    private var timer: DispatchSourceTimer?
    private var tick: TimeInterval = 1

    init(queue: DispatchQueue) { self.queue = queue }

    deinit { timer?.cancel() }

    func watch(_ driver: TaskDriver, tick wanted: TimeInterval) {
        lock.lock()
        defer { lock.unlock() }
        drivers[ObjectIdentifier(driver)] = driver
        if timer == nil || wanted < tick - 0.001 {
            timer?.cancel()
            tick = wanted
            let t = DispatchSource.makeTimerSource(queue: queue)
            t.schedule(deadline: .now() + wanted, repeating: wanted, leeway: .milliseconds(5))
            t.setEventHandler { [weak self] in self?.fire() }
            timer = t
            t.resume()
        }
    }

    func unwatch(_ driver: TaskDriver) {
        lock.withLock { drivers[ObjectIdentifier(driver)] = nil }
    }

    /// Whether the timer runs (for tests).
    var isTicking: Bool { lock.withLock { timer != nil } }

    private func fire() {
        let all = lock.withLock { () -> [TaskDriver] in
            if drivers.isEmpty {
                timer?.cancel()
                timer = nil
                tick = 1
            }
            return Array(drivers.values)
        }
        for d in all { d.checkTimeouts() }
    }
}
