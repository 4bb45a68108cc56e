import Foundation
import PorterCore

// The messages of porterd's protocol (`BackgroundProtocol`) and the values they carry: JSON
// in PorterIPC message frames, decoded from a peer process (fuzzed: FuzzIPCFrames).

/// A transfer handed to the daemon.
public struct BackgroundTaskSpec: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable { case download, upload }
    public var kind: Kind
    public var url: URL
    public var method: String
    /// Header fields as name/value pairs, without Authorization, Proxy-Authorization and
    /// Cookie (the daemon asks the stores itself, as a resumed download does).
    public var headers: [[String]]
    public var taskDescription: String?
    /// Upload tasks: the file the daemon reads the body from.
    public var uploadFile: String?
    /// Where the daemon itself moves the finished file (`porter --background -o FILE`);
    /// nil: the file is handed to the session's delegate.
    public var destination: String?
    /// Resume data to continue from (a cancelled in-process or background download).
    public var resumeData: Data?
    /// 0…1; waiting tasks of higher priority start first.
    public var priority: Float?
    /// Not started before this time (seconds since 1970).
    public var earliestBegin: Double?
    /// The session's `maximumBytesPerSecond`, applied to this transfer.
    public var maximumBytesPerSecond: Int64?
    /// A discretionary task: porterd runs one at a time per session, under its cap.
    public var isDiscretionary: Bool?
    /// The request's string-valued properties (handler options such as an sftp
    /// known_hosts file), so porterd makes the load the same way.
    public var properties: [String: String]?

    public init(kind: Kind, url: URL, method: String = "GET", headers: [[String]] = [], taskDescription: String? = nil,
                uploadFile: String? = nil, destination: String? = nil, resumeData: Data? = nil) {
        self.kind = kind
        self.url = url
        self.method = method
        self.headers = headers
        self.taskDescription = taskDescription
        self.uploadFile = uploadFile
        self.destination = destination
        self.resumeData = resumeData
    }
}

/// A task as the daemon knows it.
public struct BackgroundTaskSnapshot: Codable, Sendable, Equatable {
    public var id: Int
    public var session: String
    public var kind: BackgroundTaskSpec.Kind
    public var url: URL
    public var taskDescription: String?
    /// TaskState's raw value: running, suspended, canceling, completed.
    public var state: String
    public var received: Int64
    public var expected: Int64
    public var sent: Int64
    public var retries: Int
    /// When the next attempt is due (seconds since 1970), while waiting to retry.
    public var nextAttempt: Double?
    public var statusCode: Int?
    public var errorCode: String?
    public var errorMessage: String?
    public var destination: String?

    public init(id: Int, session: String, kind: BackgroundTaskSpec.Kind, url: URL, taskDescription: String?, state: String,
                received: Int64, expected: Int64, sent: Int64, retries: Int, nextAttempt: Double?, statusCode: Int?,
                errorCode: String?, errorMessage: String?, destination: String?) {
        self.id = id
        self.session = session
        self.kind = kind
        self.url = url
        self.taskDescription = taskDescription
        self.state = state
        self.received = received
        self.expected = expected
        self.sent = sent
        self.retries = retries
        self.nextAttempt = nextAttempt
        self.statusCode = statusCode
        self.errorCode = errorCode
        self.errorMessage = errorMessage
        self.destination = destination
    }
}

/// Something that happened to a task while it ran, kept until the session's delegate took it.
public struct BackgroundEvent: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        /// The download is in `file` (the daemon's; the delegate moves it during the call).
        case finishedDownloading
        /// The task ended (`errorCode` / `errorMessage` nil: success).
        case completed
    }
    public var sequence: Int64
    public var task: Int
    public var kind: Kind
    public var file: String?
    public var statusCode: Int?
    public var errorCode: String?
    public var errorMessage: String?

    public init(sequence: Int64, task: Int, kind: Kind, file: String? = nil, statusCode: Int? = nil,
                errorCode: String? = nil, errorMessage: String? = nil) {
        self.sequence = sequence
        self.task = task
        self.kind = kind
        self.file = file
        self.statusCode = statusCode
        self.errorCode = errorCode
        self.errorMessage = errorMessage
    }
}

/// A login porterd asks an app to answer (password challenges only: server trust is
/// never handed to an app from the daemon).
public struct BackgroundChallenge: Codable, Sendable, Equatable {
    public var host: String
    public var port: Int
    public var scheme: String
    public var realm: String?
    /// `AuthenticationMethod`'s description ("basic", "digest", "ssh-password", ...).
    public var method: String
    public var isProxy: Bool
    public var previousFailureCount: Int

    public init(_ c: AuthenticationChallenge) {
        host = c.protectionSpace.host
        port = c.protectionSpace.port
        scheme = c.protectionSpace.protocol
        realm = c.protectionSpace.realm
        method = c.protectionSpace.authenticationMethod.description
        isProxy = c.protectionSpace.isProxy
        previousFailureCount = c.previousFailureCount
    }

    public var protectionSpace: ProtectionSpace {
        ProtectionSpace(host: host, port: port, protocol: scheme, realm: realm,
                        authenticationMethod: AuthenticationMethod(name: method), isProxy: isProxy)
    }
}

/// An app's answer to a `BackgroundChallenge`.
public enum BackgroundChallengeAnswer: Codable, Sendable, Equatable {
    /// A user and password; `permanent` stores them in the credential store.
    case password(user: String, password: String, permanent: Bool)
    case performDefaultHandling
    case cancel
    case rejectProtectionSpace

    public init(_ d: ChallengeDisposition) {
        switch d {
        case .useCredential(let c):
            if let u = c.user, let p = c.password { self = .password(user: u, password: p, permanent: c.persistence == .permanent) } else { self = .performDefaultHandling }
        case .performDefaultHandling: self = .performDefaultHandling
        case .cancelAuthenticationChallenge: self = .cancel
        case .rejectProtectionSpace: self = .rejectProtectionSpace
        }
    }

    public var disposition: ChallengeDisposition {
        switch self {
        case .password(let u, let p, let permanent): return .useCredential(Credential(user: u, password: p, persistence: permanent ? .permanent : .forSession))
        case .performDefaultHandling: return .performDefaultHandling
        case .cancel: return .cancelAuthenticationChallenge
        case .rejectProtectionSpace: return .rejectProtectionSpace
        }
    }
}

public enum BackgroundControl: String, Codable, Sendable {
    case resume, suspend, cancel, cancelProducingResumeData
}

public enum BackgroundClientMessage: Codable, Sendable, Equatable {
    /// This connection holds session `session` (one connection, one session); the daemon
    /// answers `attached` and then sends the session's undelivered events.
    /// `launchCommand`: the session's launch command from now on (empty: none); nil
    /// leaves it as it was (`porter --background` attaches without one). porterd records
    /// it only when its program is the attaching process's own (/proc/PID/exe) and no
    /// other program set the session's command before.
    case attach(session: String, launchCommand: [String]?)
    /// A new task; `reference` comes back in `enqueued`.
    case enqueue(reference: Int, spec: BackgroundTaskSpec)
    case control(task: Int, BackgroundControl)
    /// The task's `taskDescription` (so a later process recognises it).
    case describe(task: Int, String?)
    /// The task's priority (0…1: higher starts first among waiting tasks) and the time
    /// before which it must not start (seconds since 1970).
    case schedule(task: Int, priority: Float, earliestBegin: Double?)
    /// The delegate call for event `sequence` returned: the daemon forgets it.
    case delivered(sequence: Int64)
    /// The tasks of this connection's session (`session` nil or that session's name; any
    /// other is refused): the answer is `tasks`, or `refused`.
    case list(session: String?, reference: Int)
    /// This connection looks at session `session` without holding it (`porter jobs`): it
    /// may list and control that session's tasks, and takes no events, answers no logins
    /// and leaves the launch command as it is.
    case watch(session: String)
    /// Answered with `pong` once every message before it was handled.
    case ping(reference: Int)
    /// The app's answer to challenge `id`.
    case answer(challenge: Int, BackgroundChallengeAnswer)
}

public enum BackgroundDaemonMessage: Codable, Sendable, Equatable {
    /// Tasks go in pages (frames are bounded): any number of `taskPage`s, then `attached`
    /// (reference 0) or `tasks` (the list's reference) with the last page.
    case taskPage(reference: Int, [BackgroundTaskSnapshot])
    case attached(session: String, tasks: [BackgroundTaskSnapshot])
    case enqueued(reference: Int, task: BackgroundTaskSnapshot)
    case refused(reference: Int, message: String)
    /// Progress and state of a running task (not journaled as an event).
    case update(BackgroundTaskSnapshot)
    case event(BackgroundEvent)
    /// Every event queued for the session when it attached has been sent.
    case eventsSent
    case tasks(reference: Int, [BackgroundTaskSnapshot])
    case resumeData(task: Int, Data?)
    case pong(reference: Int)
    /// A login for task `task` that porterd cannot answer from the credential store.
    case challenge(task: Int, id: Int, BackgroundChallenge)
}
