import Foundation
import PorterCore
import PorterIPC
import PorterSession

/// A background session's connection to porterd: it starts the daemon when none runs,
/// holds the session there, turns the daemon's tasks into task objects and its events
/// into delegate calls, and tells the daemon each event was delivered only after the
/// delegate call returned (so an app that dies mid-call gets the event again: delivery
/// is at least once).
final class BackgroundLink: BackgroundClient, @unchecked Sendable {
    let identifier: String
    private weak var session: Session?
    private let launchCommand: [String]?
    /// Broadcast when `channel`, `failure`, `closed` or `connecting` change.
    private let lock = NSCondition()
    private var channel: Channel?
    private var failure: PorterError?
    private var tasks: [Int: SessionTask] = [:]
    /// The tasks porterd reports resumed and not completed (its queue for this session):
    /// the queue-depth gauge follows its count (`TaskObserver.backgroundQueueDepth`).
    private var queued: Set<Int> = []
    private var replies: [Int: (BackgroundDaemonMessage?) -> Void] = [:]
    private var resumeWaiters: [Int: @Sendable (Data?) -> Void] = [:]
    private var nextReference = 1
    private var closed = false
    /// The connection thread still tries (false once it gave up or the link closed).
    private var connecting = true
    /// Events handed to the delegate queue and not yet acknowledged: after a reconnect
    /// the daemon sends them again, and they must not reach the delegate twice.
    private var inFlight: Set<Int64> = []
    /// Tasks whose finished file the daemon named outside its folder (refused): their
    /// completion is a failure, not a success without a file.
    private var refusedFiles: [Int: String] = [:]
    /// Set when the daemon's `attached` arrives (a connection that fails before it does
    /// counts as a failed attempt).
    private var attachedNow = false
    private let attachedOnce = DispatchSemaphore(value: 0)

    init(session: Session, identifier: String, launchCommand: [String]?) {
        self.session = session
        self.identifier = identifier
        self.launchCommand = launchCommand
        let thread = Thread { [self] in self.run() }
        thread.name = "porter.background"
        thread.start()
        // The tasks the daemon holds for this session are there before the caller asks.
        _ = attachedOnce.wait(timeout: .now() + 10)
    }

    /// The daemon's tasks of this session, as task objects.
    var allTasks: [SessionTask] { lock.withLock { Array(tasks.values) }.sorted { $0.taskIdentifier < $1.taskIdentifier } }

    func close() {
        let c = lock.withLock { () -> Channel? in closed = true; lock.broadcast(); return channel }
        c?.close()
    }

    // MARK: - making tasks

    /// Hands `transfer` to the daemon and waits for its task (a round trip on a Unix
    /// socket); the reason when the daemon cannot be reached or refuses.
    func enqueue(_ transfer: BackgroundTransfer) -> Result<SessionTask, PorterError> {
        enqueue(BackgroundTaskSpec(transfer)).flatMap { snapshot in
            guard let task = task(for: snapshot) else { return .failure(PorterError(.sessionInvalidated, "the session is gone", url: snapshot.url)) }
            return .success(task)
        }
    }

    /// The round trip of `enqueue`: the daemon's task as it reports it.
    private func enqueue(_ spec: BackgroundTaskSpec) -> Result<BackgroundTaskSnapshot, PorterError> {
        let done = DispatchSemaphore(value: 0)
        let answer = Locked<BackgroundDaemonMessage?>(nil)
        let reference: Int
        let channel: Channel?
        (reference, channel) = lock.withLock {
            // The first connection may still be on its way (`init` waits only so long, and
            // porterd starts slowly on a busy machine): wait for it to be made or to fail,
            // rather than fail a task the daemon would have taken a moment later.
            while self.channel == nil, failure == nil, !closed, connecting { lock.wait() }
            let r = nextReference
            nextReference += 1
            replies[r] = { m in answer.withLock { $0 = m }; done.signal() }
            return (r, self.channel)
        }
        guard let channel else {
            _ = lock.withLock { replies.removeValue(forKey: reference) }
            return .failure(lock.withLock { failure } ?? PorterError(.unsupportedConfiguration, "porterd is not reachable"))
        }
        do {
            try channel.send(message: BackgroundClientMessage.enqueue(reference: reference, spec: spec))
        } catch {
            _ = lock.withLock { replies.removeValue(forKey: reference) }
            return .failure(PorterError(.unsupportedConfiguration, "cannot reach porterd: \(error)"))
        }
        if done.wait(timeout: .now() + 30) == .timedOut {
            _ = lock.withLock { replies.removeValue(forKey: reference) }
            return .failure(PorterError(.timedOut, "porterd did not answer"))
        }
        switch answer.current {
        case .enqueued(_, let task)?: return .success(task)
        case .refused(_, let message)?: return .failure(PorterError(.unsupportedConfiguration, message, url: spec.url))
        default: return .failure(PorterError(.unsupportedConfiguration, "porterd went away", url: spec.url))
        }
    }

    /// The task object for a daemon task (made once).
    func task(for snapshot: BackgroundTaskSnapshot) -> SessionTask? {
        guard let session else { return nil }
        let (task, depth) = lock.withLock { () -> (SessionTask, Int?) in
            let before = queued.count
            if TaskState(backgroundName: snapshot.state) == .running { queued.insert(snapshot.id) } else { queued.remove(snapshot.id) }
            let depth = queued.count != before ? queued.count : nil
            let status = snapshot.status
            if let t = tasks[snapshot.id] {
                t.apply(status)
                return (t, depth)
            }
            let t: SessionTask = snapshot.kind == .download
                ? DownloadTask(session: session, remote: self, status: status)
                : UploadTask(session: session, remote: self, status: status)
            tasks[snapshot.id] = t
            return (t, depth)
        }
        if let depth { report(depth: depth, session) }
        return task
    }

    /// The task left porterd's queue (it completed).
    private func dequeued(_ id: Int, _ session: Session) {
        let depth = lock.withLock { queued.remove(id) != nil ? queued.count : nil }
        if let depth { report(depth: depth, session) }
    }

    private func report(depth: Int, _ session: Session) {
        session.configuration.taskObserver?.backgroundQueueDepth(depth, session: identifier)
    }

    func control(_ task: Int, _ control: BackgroundTaskControl) {
        switch control {
        case .resume: send(task, .resume)
        case .suspend: send(task, .suspend)
        case .cancel: send(task, .cancel)
        }
    }

    private func send(_ task: Int, _ action: BackgroundControl) {
        try? lock.withLock { channel }?.send(message: BackgroundClientMessage.control(task: task, action))
    }

    func schedule(_ task: Int, priority: Float, earliestBegin: Date?) {
        try? lock.withLock { channel }?.send(message: BackgroundClientMessage.schedule(
            task: task, priority: priority, earliestBegin: earliestBegin?.timeIntervalSince1970))
    }

    func describe(_ task: Int, _ description: String?) {
        try? lock.withLock { channel }?.send(message: BackgroundClientMessage.describe(task: task, description))
    }

    func cancelProducingResumeData(_ task: Int, _ completion: @escaping @Sendable (Data?) -> Void) {
        let sent = lock.withLock { () -> Bool in
            guard channel != nil else { return false }
            resumeWaiters[task] = completion
            return true
        }
        guard sent else {
            // Not connected (porterd restarts): no resume data now; the cancel is lost
            // with the connection, as a control sent then would be.
            if let session { deliver(session) { completion(nil) } } else { completion(nil) }
            return
        }
        send(task, .cancelProducingResumeData)
    }

    /// Delegate calls go to the session's delegate queue; a session that delivers inline
    /// gets them on a queue of the link's own, never on the thread that reads the
    /// connection (a delegate making a task there would wait for an answer that thread
    /// must read).
    private let inlineQueue = DispatchQueue(label: "porter.background.delivery")
    private func deliver(_ session: Session, _ work: @escaping @Sendable () -> Void) {
        if session.deliversInline { inlineQueue.async(execute: work) } else { session.deliver(work) }
    }

    // MARK: - the connection (its own thread)

    private func run() {
        defer { lock.withLock { connecting = false; lock.broadcast() } }
        var attempts = 0
        while !lock.withLock({ closed }), session != nil {
            do {
                let c = try connect()
                lock.withLock { attachedNow = false }
                try c.send(message: BackgroundClientMessage.attach(session: identifier, launchCommand: launchCommand))
                lock.withLock { channel = c; failure = nil; lock.broadcast() }
                try receive(on: c)
            } catch {
                let e = PorterError(.unsupportedConfiguration, "background session '\(identifier)': porterd: \(error)")
                let waiting = lock.withLock { () -> [(BackgroundDaemonMessage?) -> Void] in
                    channel = nil
                    failure = e
                    lock.broadcast()
                    defer { replies.removeAll() }
                    return Array(replies.values)
                }
                for w in waiting { w(nil) }
                attachedOnce.signal()
                if lock.withLock({ attachedNow }) { attempts = 0 }
                attempts += 1
                if attempts > 20 || lock.withLock({ closed }) { return }
                // porterd was killed or restarts: come back (it resumes its transfers).
                usleep(UInt32(min(2_000_000, 100_000 * attempts)))
            }
        }
    }

    private func connect() throws -> Channel { try BackgroundProtocol.connectToDaemon() }

    private func receive(on c: Channel) throws {
        while true {
            let message = try BackgroundProtocol.receive(on: c)
            guard let session else { return }
            switch message {
            case .taskPage(let reference, let snapshots):
                // The session's tasks as it attaches (the link asks for no other list).
                if reference == 0 { for s in snapshots { _ = task(for: s) } }
            case .attached(_, let snapshots):
                for s in snapshots { _ = task(for: s) }
                // The depth as the session attaches (the pages before were counted too).
                report(depth: lock.withLock { queued.count }, session)
                lock.withLock { attachedNow = true }
                attachedOnce.signal()
            case .enqueued(let reference, _), .refused(let reference, _), .tasks(let reference, _):
                if case .enqueued(_, let s) = message { _ = task(for: s) }
                let reply = lock.withLock { replies.removeValue(forKey: reference) }
                reply?(message)
            case .update(let snapshot):
                let before = lock.withLock { tasks[snapshot.id]?.countOfBytesReceived } ?? 0
                guard let t = task(for: snapshot) else { continue }
                if let d = t as? DownloadTask, snapshot.received > before, let delegate = session.downloadDelegate {
                    let written = snapshot.received - before
                    deliver(session) {
                        delegate.downloadTask(d, didWriteData: written, totalBytesWritten: snapshot.received,
                                              totalBytesExpectedToWrite: snapshot.expected)
                    }
                }
            case .event(let event):
                deliver(event, session: session, channel: c)
            case .eventsSent:
                if let delegate = session.delegate {
                    deliver(session) { delegate.sessionDidFinishEvents(forBackgroundSession: session) }
                }
            case .pong:
                break
            case .challenge(let task, let id, let info):
                let t = lock.withLock { tasks[task] }
                let reply: @Sendable (ChallengeDisposition) -> Void = { [weak self] d in
                    try? self?.lock.withLock { self?.channel }?.send(message: BackgroundClientMessage.answer(challenge: id, BackgroundChallengeAnswer(d)))
                }
                let challenge = AuthenticationChallenge(protectionSpace: info.protectionSpace, proposedCredential: nil,
                                                        previousFailureCount: info.previousFailureCount, reply: reply)
                if let t, let delegate = session.taskDelegate {
                    deliver(session) { delegate.task(t, didReceive: challenge, completion: reply) }
                } else {
                    reply(.performDefaultHandling)
                }
            case .resumeData(let task, let data):
                let waiter = lock.withLock { resumeWaiters.removeValue(forKey: task) }
                if let waiter { deliver(session) { waiter(data) } }
            }
        }
    }

    private func deliver(_ event: BackgroundEvent, session: Session, channel c: Channel) {
        let (t, repeated) = lock.withLock { () -> (SessionTask?, Bool) in
            (tasks[event.task], !inFlight.insert(event.sequence).inserted)
        }
        if repeated { return }  // still on its way to the delegate from before a reconnect
        // Acknowledged on the connection that is current when the delegate returns.
        let ack: @Sendable () -> Void = { [weak self] in
            guard let self else { return }
            let now = self.lock.withLock { () -> Channel? in
                self.inFlight.remove(event.sequence)
                return self.channel
            }
            try? (now ?? c).send(message: BackgroundClientMessage.delivered(sequence: event.sequence))
        }
        guard let t else { return ack() }
        switch event.kind {
        case .finishedDownloading:
            guard let named = event.file, let d = t as? DownloadTask, t.takesFinishedFile() else { return ack() }
            // Only a file in porterd's own folder for this session: whatever is at the
            // socket (an impostor that got there first) must not make the app hand over,
            // or delete, a file of its choosing.
            guard let file = BackgroundProtocol.acceptFinishedFile(named, session: identifier, task: event.task) else {
                lock.withLock { refusedFiles[event.task] = named }
                return ack()
            }
            let delegate = session.downloadDelegate
            deliver(session) {
                delegate?.downloadTask(d, didFinishDownloadingTo: URL(fileURLWithPath: file))
                // As for an in-process download: the file is the delegate's during the call only.
                unlink(file)
                ack()
            }
        case .completed:
            let sent = BackgroundProtocol.error(code: event.errorCode, message: event.errorMessage, url: t.originalRequest.url)
            let refused = lock.withLock { refusedFiles.removeValue(forKey: event.task) }
            let error = sent ?? refused.map {
                PorterError(.cannotOpenFile, "the background daemon named \($0) as the download, which is not in porterd's own folder for this session: refused",
                            url: t.originalRequest.url)
            }
            dequeued(event.task, session)
            // Exactly once, whatever porterd sends: the task's machine decides.
            guard t.completeRemotely(error, statusCode: event.statusCode) else { return ack() }
            let delegate = session.taskDelegate
            let waiter = lock.withLock { resumeWaiters.removeValue(forKey: event.task) }
            deliver(session) {
                waiter?(nil)
                delegate?.task(t, didCompleteWithError: error)
                ack()
                self.lock.withLock { _ = self.tasks.removeValue(forKey: event.task) }
            }
        }
    }
}

/// Makes background sessions' clients. PorterSession finds it by its mangled type name
/// (`Session.backgroundClientProvider`): renaming or moving it means changing that name.
package enum BackgroundLinkProvider: BackgroundClientProvider {
    package static func client(for session: Session, identifier: String, launchCommand: [String]) -> any BackgroundClient {
        BackgroundLink(session: session, identifier: identifier, launchCommand: launchCommand)
    }
}

extension BackgroundTaskSpec {
    /// The daemon's message for a session's transfer.
    init(_ t: BackgroundTransfer) {
        self.init(kind: t.kind == .download ? .download : .upload, url: t.url, method: t.method, headers: t.headers,
                  uploadFile: t.uploadFile, resumeData: t.resumeData)
        maximumBytesPerSecond = t.maximumBytesPerSecond
        isDiscretionary = t.isDiscretionary
        properties = t.properties
    }
}

extension BackgroundTaskSnapshot {
    /// The task as its task object takes it.
    var status: BackgroundTaskStatus {
        BackgroundTaskStatus(id: id, url: url, state: TaskState(backgroundName: state), received: received, expected: expected,
                             sent: sent, taskDescription: taskDescription,
                             error: BackgroundProtocol.error(code: errorCode, message: errorMessage, url: url))
    }
}
