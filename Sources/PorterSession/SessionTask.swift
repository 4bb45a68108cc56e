import Foundation
import PorterCore
import PorterEngine
import Synchronization

/// Progress of a task's transfer, as a value.
public struct TaskProgress: Sendable, Equatable {
    public var completedUnitCount: Int64
    /// -1 when unknown.
    public var totalUnitCount: Int64
    public var fractionCompleted: Double {
        totalUnitCount > 0 ? min(1, Double(completedUnitCount) / Double(totalUnitCount)) : 0
    }
}

/// A task of a session: created suspended, started by `resume()`.
public class SessionTask: @unchecked Sendable, CustomStringConvertible {
    public let session: Session
    public let taskIdentifier: Int
    public let originalRequest: Request
    /// Set in every initialiser (phase two, as it needs `self`) of a task that runs in
    /// this process; never changes after. Nil for a background session's task.
    private(set) var driver: TaskDriver!
    /// A background session's task runs in porterd: controls go there.
    let remote: (any BackgroundClient)?
    private let info = Locked(Info())
    private struct Info {
        var description: String?
        var priority: Float = 0.5
        var received: Int64 = 0
        var expectedToReceive: Int64 = -1
        var sent: Int64 = 0
        var expectedToSend: Int64 = -1
        var response: Response?
        var error: PorterError?
        var detachedState: TaskState?
        var currentRequest: Request?
        var earliestBegin: Date?
        /// A background task's life cycle as this process sees it (nil for a task that
        /// runs here): what of porterd's reports reaches the application.
        var mirror: BackgroundMirrorMachine?
    }

    init(session: Session, identifier: Int, request: Request, asksResponseDisposition: Bool) {
        self.session = session
        self.taskIdentifier = identifier
        self.originalRequest = request
        self.remote = nil
        self.driver = TaskDriver(session: session, request: request, owner: self,
                                 asksResponseDisposition: asksResponseDisposition)
        info.withLock { $0.expectedToSend = request.body?.knownLength ?? -1 }
    }

    /// Makes a task that takes over a running load (a data task that became a download).
    init(session: Session, adopting driver: TaskDriver, from other: SessionTask) {
        self.session = session
        self.taskIdentifier = other.taskIdentifier
        self.originalRequest = other.originalRequest
        self.remote = nil
        self.driver = driver
        let snapshot = other.info.current
        info.withLock {
            $0.received = snapshot.received
            $0.expectedToReceive = snapshot.expectedToReceive
            $0.response = snapshot.response
            $0.description = snapshot.description
        }
    }

    /// A task of a background session, as porterd reports it.
    package init(session: Session, remote client: any BackgroundClient, status: BackgroundTaskStatus) {
        self.session = session
        self.taskIdentifier = status.id
        self.originalRequest = Request(url: status.url)
        self.remote = client
        self.driver = nil
        info.withLock {
            $0.mirror = BackgroundMirrorMachine(state: status.state)
            $0.detachedState = status.state
        }
        apply(status)
    }

    /// Takes porterd's view of the task (background sessions). Once the completion was
    /// delivered the machine drops it: a snapshot still on its way changes nothing.
    package func apply(_ status: BackgroundTaskStatus) {
        info.withLock {
            guard case .setState(let state)? = $0.mirror?.handle(.snapshot(status.state)) else { return }
            $0.detachedState = state
            $0.received = status.received
            $0.expectedToReceive = status.expected
            $0.sent = status.sent
            $0.description = status.taskDescription
            if let e = status.error { $0.error = e }
        }
    }

    /// porterd says the task ended: true when the delegate is to hear it (the machine
    /// answers yes once).
    package func completeRemotely(_ error: PorterError?, statusCode: Int?) -> Bool {
        info.withLock {
            guard $0.mirror?.handle(.completed) == .deliverCompletion else { return false }
            $0.error = error
            $0.detachedState = .completed
            if $0.response == nil, let statusCode {
                $0.response = Response(url: originalRequest.url, mimeType: nil, expectedContentLength: $0.expectedToReceive,
                                       textEncodingName: nil, statusCode: statusCode)
            }
            return true
        }
    }

    /// porterd says the download's file is ready: true when the delegate is to get it
    /// (never after the completion).
    package func takesFinishedFile() -> Bool {
        info.withLock { $0.mirror?.handle(.finishedDownloading) == .deliverFile }
    }

    /// Whether a control of the application goes to porterd (not for a completed task).
    private func sendsControl() -> Bool {
        info.withLock { $0.mirror?.handle(.control) == .sendControl }
    }

    // MARK: public state

    public var taskDescription: String? {
        get { info.withLock { $0.description } }
        set {
            info.withLock { $0.description = newValue }
            remote?.describe(taskIdentifier, newValue)
        }
    }
    /// 0 (low) to 1 (high), 0.5 by default; read when the task's handler starts (handlers
    /// see it as `Request.priority`). The http and ftp handlers start the loads waiting
    /// for a connection to a host (`httpMaximumConnectionsPerHost`) in order of it, and
    /// make it the HTTP/2 stream weight. In a background session porterd starts waiting
    /// tasks of higher priority first.
    public var priority: Float {
        get { info.withLock { $0.priority } }
        set {
            let p = min(1, max(0, newValue))
            info.withLock { $0.priority = p }
            if let remote, sendsControl() { remote.schedule(taskIdentifier, priority: p, earliestBegin: earliestBeginDate) }
        }
    }
    /// Background sessions: porterd does not start the task before this date.
    public var earliestBeginDate: Date? {
        get { info.withLock { $0.earliestBegin } }
        set {
            info.withLock { $0.earliestBegin = newValue }
            if let remote, sendsControl() { remote.schedule(taskIdentifier, priority: priority, earliestBegin: newValue) }
        }
    }
    public var state: TaskState { info.withLock { $0.detachedState } ?? driver.state }
    /// The request being loaded now (after redirects).
    public var currentRequest: Request? { info.withLock { $0.currentRequest } ?? originalRequest }
    public var response: Response? { info.withLock { $0.response } }
    public var error: PorterError? { info.withLock { $0.error } }
    public var countOfBytesReceived: Int64 { info.withLock { $0.received } }
    public var countOfBytesExpectedToReceive: Int64 { info.withLock { $0.expectedToReceive } }
    public var countOfBytesSent: Int64 { info.withLock { $0.sent } }
    public var countOfBytesExpectedToSend: Int64 { info.withLock { $0.expectedToSend } }
    public var progress: TaskProgress {
        info.withLock { i in
            if i.expectedToSend > 0 && i.received == 0 && i.sent < i.expectedToSend {
                return TaskProgress(completedUnitCount: i.sent, totalUnitCount: i.expectedToSend)
            }
            let total = i.expectedToReceive
            let done = i.detachedState == .completed || (driver.map { $0.state == .completed } ?? false)
            return TaskProgress(completedUnitCount: i.received, totalUnitCount: done ? max(total, i.received) : total)
        }
    }
    /// Received bytes not yet taken by the consumer (back-pressure diagnostics).
    public var bufferedByteCount: Int { driver?.bufferedByteCount ?? 0 }

    public var description: String {
        "\(type(of: self))(\(taskIdentifier) \(originalRequest.url.absoluteString) \(state))"
    }

    /// A delegate for this task alone, consulted before the session's for every role it
    /// plays (task, data, download), as URLSession's `task.delegate`. Set it before
    /// `resume()`; a data task asks it about its response only when it was given at
    /// creation (`dataTask(with:delegate:)`).
    public var delegate: (any TaskDelegate)? {
        get { ownDelegate.withLock { $0.delegate } }
        set { ownDelegate.withLock { $0 = OwnDelegate(newValue) } }
    }
    var delegateRoles: Session.Roles? { ownDelegate.withLock { $0.delegate == nil ? nil : $0.roles } }
    struct OwnDelegate {
        var delegate: (any TaskDelegate)?
        var roles: Session.Roles
        init(_ d: (any TaskDelegate)?) {
            delegate = d
            roles = Session.Roles(d)
        }
    }
    let ownDelegate = Locked(OwnDelegate(nil))

    public func resume() {
        if let remote { return sendsControl() ? remote.control(taskIdentifier, .resume) : () }
        driver.control(.resume, expecting: .running)
    }
    public func suspend() {
        if let remote { return sendsControl() ? remote.control(taskIdentifier, .suspend) : () }
        driver.control(.suspend, expecting: .suspended)
    }
    public func cancel() {
        cancelRequested.store(true, ordering: .releasing)
        if let remote { return sendsControl() ? remote.control(taskIdentifier, .cancel) : () }
        driver.control(.cancel(producingResumeData: false), expecting: .canceling)
    }

    /// Set by `cancel()` before it returns: progress and data callbacks already queued
    /// for the delegate are not made after it (the completion still is).
    let cancelRequested = Atomic<Bool>(false)
    var isCancelRequested: Bool { cancelRequested.load(ordering: .acquiring) }
    /// The cancel asked for resume data (a download's `cancel(byProducingResumeData:)`);
    /// known before `cancelRequested` is set.
    var cancelWantsResumeData: Bool { false }

    // MARK: - delivery from the driver (on its executor); subclasses extend. Application
    // callbacks go through `session.deliver`.

    func sinkResponse(_ response: Response, driver: TaskDriver) {
        info.withLock {
            $0.response = response
            $0.currentRequest = driver.currentRequest
            $0.expectedToReceive = response.expectedContentLength >= 0
                ? Response.total(response.expectedContentLength, plus: response.resumeOffset ?? 0) : -1
            if let offset = response.resumeOffset, offset >= 0 { $0.received = offset } else { $0.received = 0 }
        }
    }

    func sinkData(_ data: Data, driver: TaskDriver) {
        // Saturating: a handler's resume offset near Int64.max must not trap the program.
        info.withLock { $0.received = Response.total($0.received, plus: Int64(data.count)) < 0 ? Int64.max : $0.received + Int64(data.count) }
    }

    func sinkComplete(_ error: PorterError?, driver: TaskDriver) {
        info.withLock { $0.error = error }
    }

    func noteSent(total: Int64, expected: Int64) {
        info.withLock {
            $0.sent = total
            if expected >= 0 { $0.expectedToSend = expected }
        }
    }

    func detach() { info.withLock { $0.detachedState = .completed } }
}

