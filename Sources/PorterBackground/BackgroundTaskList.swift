import Foundation
import PorterIPC

/// Lists of tasks (`taskPage`, `tasks`, `attached`) in a compact binary layout, sent as
/// `.compact` frames from protocol version 2 on: a list of ten thousand tasks is most of
/// what porterd ever sends at once, and JSON cost more than everything else in
/// `porter jobs` (encoding in porterd, decoding in the client). Every other message stays
/// JSON. Decoded from a peer process: every length and count is checked against the bytes
/// there are, and anything else is `.malformed`, never a trap.
///
/// Layout (`WireWriter`'s, as the worker's compact messages): one byte of message
/// (1 `taskPage`, 2 `tasks`, 3 `attached`); the reference as a number (`attached`: the
/// session as a string); the count; then each task: id, received, expected, sent,
/// retries, status (numbers), the next attempt (a Float64's bits), one byte of flags
/// (1: next attempt present, 2: status present, 4: an upload), then session, URL and
/// state as strings, and description, error code, error message and destination as
/// optional strings.
public enum BackgroundTaskList {
    private enum Message: UInt8 {
        case taskPage = 1, tasks = 2, attached = 3
    }

    /// The compact layout of `message` when it is a list of tasks; nil otherwise.
    public static func encode(_ message: BackgroundDaemonMessage) -> [UInt8]? {
        var w = WireWriter()
        let tasks: [BackgroundTaskSnapshot]
        switch message {
        case .taskPage(let reference, let list):
            w.byte(Message.taskPage.rawValue)
            w.i64(Int64(reference))
            tasks = list
        case .tasks(let reference, let list):
            w.byte(Message.tasks.rawValue)
            w.i64(Int64(reference))
            tasks = list
        case .attached(let session, let list):
            w.byte(Message.attached.rawValue)
            w.string(session)
            tasks = list
        default:
            return nil
        }
        w.bytes.reserveCapacity(16 + tasks.count * 160)
        w.count(tasks.count)
        for t in tasks {
            for n in [Int64(t.id), t.received, t.expected, t.sent, Int64(t.retries), Int64(t.statusCode ?? 0)] { w.i64(n) }
            w.u64((t.nextAttempt ?? 0).bitPattern)
            var flags: UInt8 = 0
            if t.nextAttempt != nil { flags |= 1 }
            if t.statusCode != nil { flags |= 2 }
            if t.kind == .upload { flags |= 4 }
            w.byte(flags)
            w.string(t.session)
            w.string(t.url.absoluteString)
            w.string(t.state)
            for text in [t.taskDescription, t.errorCode, t.errorMessage, t.destination] { w.optional(text) { $0.string($1) } }
        }
        return w.bytes
    }

    private static func malformed(_ why: String) -> IPCError { IPCError(.malformed, "not a valid list of tasks: \(why)") }

    /// The list message in `payload` (a `.compact` frame's).
    public static func decode(_ payload: [UInt8]) throws(IPCError) -> BackgroundDaemonMessage {
        var r = WireReader(payload)
        guard let message = Message(rawValue: try r.byte()) else { throw malformed("an unknown compact message") }
        var reference = 0
        var session = ""
        if message == .attached {
            session = try r.string()
        } else {
            reference = Int(truncatingIfNeeded: try r.i64())
        }
        let count = try r.count()
        // Each task takes at least 73 bytes: 56 of numbers, its flags, three string
        // lengths and four optionals' flags.
        guard count <= r.remaining / 73 else { throw malformed("a list of \(count) tasks in \(r.remaining) bytes") }
        var tasks: [BackgroundTaskSnapshot] = []
        tasks.reserveCapacity(count)
        for _ in 0..<count {
            let id = Int(truncatingIfNeeded: try r.i64()), received = try r.i64(), expected = try r.i64(), sent = try r.i64()
            let retries = Int(truncatingIfNeeded: try r.i64()), status = Int(truncatingIfNeeded: try r.i64())
            let next = Double(bitPattern: try r.u64())
            let flags = try r.byte()
            // A time that is not a number (or infinite) would trap whoever computes with it.
            guard flags & 1 == 0 || next.isFinite else { throw malformed("a next attempt at \(next)") }
            let taskSession = try r.string(), urlText = try r.string(), state = try r.string()
            guard let url = URL(string: urlText) else { throw malformed("a task without a URL") }
            let description = try r.optionalString(), errorCode = try r.optionalString()
            let errorMessage = try r.optionalString(), destination = try r.optionalString()
            tasks.append(BackgroundTaskSnapshot(id: id, session: taskSession, kind: flags & 4 != 0 ? .upload : .download, url: url,
                                                taskDescription: description, state: state, received: received, expected: expected,
                                                sent: sent, retries: retries, nextAttempt: flags & 1 != 0 ? next : nil,
                                                statusCode: flags & 2 != 0 ? status : nil, errorCode: errorCode,
                                                errorMessage: errorMessage, destination: destination))
        }
        guard r.remaining == 0 else { throw malformed("\(r.remaining) bytes after a list of tasks") }
        switch message {
        case .taskPage: return .taskPage(reference: reference, tasks)
        case .tasks: return .tasks(reference: reference, tasks)
        case .attached: return .attached(session: session, tasks: tasks)
        }
    }
}
