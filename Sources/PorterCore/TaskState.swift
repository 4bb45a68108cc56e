import Foundation

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

extension TaskState {
    /// From porterd's name for a state ("waiting" to retry counts as running).
    package init(backgroundName name: String) {
        switch name {
        case "running", "waiting": self = .running
        case "suspended": self = .suspended
        case "canceling": self = .canceling
        default: self = .completed
        }
    }
}

/// What a data task does after its response: the answer to
/// `DataDelegate.dataTask(_:didReceive:completion:)`.
public enum ResponseDisposition: Sendable, Equatable {
    case allow
    case cancel
    /// Continue as a download task (the body goes to a temporary file).
    case becomeDownload
}
