import Foundation
import PorterCore

/// What a background session asks of its connection to porterd. PorterSession does no
/// IPC: PorterBackground's `BackgroundLink` implements this, speaking porterd's protocol,
/// and makes the session's task objects from what the daemon reports.
package protocol BackgroundClient: AnyObject, Sendable {
    /// The daemon's tasks of this session, as task objects, by identifier.
    var allTasks: [SessionTask] { get }
    /// Hands `transfer` to the daemon and waits for its task; the reason when the daemon
    /// cannot be reached or refuses.
    func enqueue(_ transfer: BackgroundTransfer) -> Result<SessionTask, PorterError>
    func control(_ task: Int, _ control: BackgroundTaskControl)
    func schedule(_ task: Int, priority: Float, earliestBegin: Date?)
    func describe(_ task: Int, _ description: String?)
    func cancelProducingResumeData(_ task: Int, _ completion: @escaping @Sendable (Data?) -> Void)
    /// Lets go of the daemon (its transfers go on there).
    func close()
}

/// Makes the client of a background session: PorterBackground's `BackgroundLinkProvider`.
package protocol BackgroundClientProvider: Sendable {
    static func client(for session: Session, identifier: String, launchCommand: [String]) -> any BackgroundClient
}

/// A control of the application for a task porterd runs.
package enum BackgroundTaskControl: Sendable {
    case resume, suspend, cancel
}

/// A transfer a background session hands to porterd: what the session knows of it; the
/// client turns it into the daemon's message.
package struct BackgroundTransfer: Sendable {
    package enum Kind: Sendable { case download, upload }
    package var kind: Kind
    package var url: URL
    package var method: String
    /// Name/value pairs, without the secret fields (`ResumeData.shareableHeaders`).
    package var headers: [[String]]
    /// Upload tasks: the file the daemon reads the body from.
    package var uploadFile: String?
    package var resumeData: Data?
    package var maximumBytesPerSecond: Int64?
    package var isDiscretionary: Bool?
    /// The request's string-valued properties (handler options).
    package var properties: [String: String]?

    package init(kind: Kind, url: URL, method: String, headers: [[String]], uploadFile: String? = nil, resumeData: Data? = nil,
                 maximumBytesPerSecond: Int64? = nil, isDiscretionary: Bool? = nil, properties: [String: String]? = nil) {
        self.kind = kind
        self.url = url
        self.method = method
        self.headers = headers
        self.uploadFile = uploadFile
        self.resumeData = resumeData
        self.maximumBytesPerSecond = maximumBytesPerSecond
        self.isDiscretionary = isDiscretionary
        self.properties = properties
    }
}

/// porterd's view of one of a background session's tasks, as its task object takes it.
package struct BackgroundTaskStatus: Sendable {
    package var id: Int
    package var url: URL
    package var state: TaskState
    package var received: Int64
    package var expected: Int64
    package var sent: Int64
    package var taskDescription: String?
    /// The error the daemon reports (nil: none yet, or none).
    package var error: PorterError?

    package init(id: Int, url: URL, state: TaskState, received: Int64, expected: Int64, sent: Int64,
                 taskDescription: String?, error: PorterError?) {
        self.id = id
        self.url = url
        self.state = state
        self.received = received
        self.expected = expected
        self.sent = sent
        self.taskDescription = taskDescription
        self.error = error
    }
}

extension Session {
    /// The client of background sessions, found the first time a background session is
    /// made: PorterBackground's provider, looked up by its (mangled) type name in the
    /// running program, so PorterSession need not depend on the IPC modules and no app
    /// or test makes a call to install it. `import Porter` links PorterBackground; a
    /// program that links PorterSession without it gets background tasks that fail
    /// with the reason.
    static let backgroundClientProvider: (any BackgroundClientProvider.Type)? =
        _typeByName("16PorterBackground22BackgroundLinkProviderO") as? any BackgroundClientProvider.Type
}

/// The client of a background session in a program without PorterBackground: every task
/// fails at once with the reason (rather than running in process as if not background).
final class MissingBackgroundClient: BackgroundClient {
    var allTasks: [SessionTask] { [] }
    func enqueue(_ transfer: BackgroundTransfer) -> Result<SessionTask, PorterError> {
        .failure(PorterError(.unsupportedConfiguration,
                             "background sessions need PorterBackground linked into the program (import Porter)", url: transfer.url))
    }
    func control(_ task: Int, _ control: BackgroundTaskControl) {}
    func schedule(_ task: Int, priority: Float, earliestBegin: Date?) {}
    func describe(_ task: Int, _ description: String?) {}
    func cancelProducingResumeData(_ task: Int, _ completion: @escaping @Sendable (Data?) -> Void) { completion(nil) }
    func close() {}
}
