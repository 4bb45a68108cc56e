import Foundation
import PorterIPC

/// Lists of tasks (`taskPage`, `tasks`, `attached`) in a compact binary layout, sent as
/// `.compact` frames from protocol version 2 on: a list of ten thousand tasks is most of
/// what porterd ever sends at once, and JSON cost more than everything else in
/// `porter jobs` (encoding in porterd, decoding in the client). Every other message stays
/// JSON. Decoded from a peer process: every length and count is checked against the bytes
/// there are, and anything else is `.malformed`, never a trap.
///
/// Layout (integers little-endian): one byte of message (1 `taskPage`, 2 `tasks`,
/// 3 `attached`); the reference as an Int64 (`attached`: the session as a string); a
/// UInt32 count; then each task: id, received, expected, sent, retries, status (Int64
/// each), the next attempt (Float64 bits), one byte of flags (1: next attempt present,
/// 2: status present, 4: an upload), then session, URL, state, description, error code,
/// error message and destination as strings. A string is a UInt32 byte count
/// (0xFFFF_FFFF: nil) and its UTF-8 bytes.
public enum BackgroundTaskList {
    private enum Message: UInt8 {
        case taskPage = 1, tasks = 2, attached = 3
    }

    /// The compact layout of `message` when it is a list of tasks; nil otherwise.
    public static func encode(_ message: BackgroundDaemonMessage) -> [UInt8]? {
        var w = Writer()
        let tasks: [BackgroundTaskSnapshot]
        switch message {
        case .taskPage(let reference, let list):
            w.byte(Message.taskPage.rawValue)
            w.int(reference)
            tasks = list
        case .tasks(let reference, let list):
            w.byte(Message.tasks.rawValue)
            w.int(reference)
            tasks = list
        case .attached(let session, let list):
            w.byte(Message.attached.rawValue)
            w.string(session)
            tasks = list
        default:
            return nil
        }
        w.bytes.reserveCapacity(16 + tasks.count * 160)
        w.uint32(UInt32(truncatingIfNeeded: tasks.count))
        for t in tasks {
            w.int(t.id)
            w.int64(t.received)
            w.int64(t.expected)
            w.int64(t.sent)
            w.int(t.retries)
            w.int(t.statusCode ?? 0)
            w.uint64((t.nextAttempt ?? 0).bitPattern)
            var flags: UInt8 = 0
            if t.nextAttempt != nil { flags |= 1 }
            if t.statusCode != nil { flags |= 2 }
            if t.kind == .upload { flags |= 4 }
            w.byte(flags)
            w.string(t.session)
            w.string(t.url.absoluteString)
            w.string(t.state)
            w.string(t.taskDescription)
            w.string(t.errorCode)
            w.string(t.errorMessage)
            w.string(t.destination)
        }
        return w.bytes
    }

    /// The list message in `payload` (a `.compact` frame's).
    public static func decode(_ payload: [UInt8]) throws(IPCError) -> BackgroundDaemonMessage {
        var r = Reader(bytes: payload)
        guard let message = Message(rawValue: try r.byte()) else { throw Reader.malformed("an unknown compact message") }
        var reference = 0
        var session = ""
        if message == .attached {
            guard let s = try r.string() else { throw Reader.malformed("an attached list without a session") }
            session = s
        } else {
            reference = try r.int()
        }
        let count = Int(try r.uint32())
        // Each task takes at least 57 bytes of numbers and 28 of string lengths.
        guard count <= r.remaining / 85 else { throw Reader.malformed("a list of \(count) tasks in \(r.remaining) bytes") }
        var tasks: [BackgroundTaskSnapshot] = []
        tasks.reserveCapacity(count)
        for _ in 0..<count {
            let id = try r.int(), received = try r.int64(), expected = try r.int64(), sent = try r.int64()
            let retries = try r.int(), status = try r.int()
            let next = Double(bitPattern: try r.uint64())
            let flags = try r.byte()
            // A time that is not a number (or infinite) would trap whoever computes with it.
            guard flags & 1 == 0 || next.isFinite else { throw Reader.malformed("a next attempt at \(next)") }
            guard let taskSession = try r.string(), let urlText = try r.string(), let url = URL(string: urlText),
                  let state = try r.string() else { throw Reader.malformed("a task without its session, URL or state") }
            let description = try r.string(), errorCode = try r.string(), errorMessage = try r.string(), destination = try r.string()
            tasks.append(BackgroundTaskSnapshot(id: id, session: taskSession, kind: flags & 4 != 0 ? .upload : .download, url: url,
                                                taskDescription: description, state: state, received: received, expected: expected,
                                                sent: sent, retries: retries, nextAttempt: flags & 1 != 0 ? next : nil,
                                                statusCode: flags & 2 != 0 ? status : nil, errorCode: errorCode,
                                                errorMessage: errorMessage, destination: destination))
        }
        guard r.remaining == 0 else { throw Reader.malformed("\(r.remaining) bytes after a list of tasks") }
        switch message {
        case .taskPage: return .taskPage(reference: reference, tasks)
        case .tasks: return .tasks(reference: reference, tasks)
        case .attached: return .attached(session: session, tasks: tasks)
        }
    }

    private struct Writer {
        var bytes: [UInt8] = []
        mutating func byte(_ b: UInt8) { bytes.append(b) }
        mutating func uint32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }
        mutating func uint64(_ v: UInt64) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }
        mutating func int64(_ v: Int64) { uint64(UInt64(bitPattern: v)) }
        mutating func int(_ v: Int) { int64(Int64(v)) }
        mutating func string(_ text: String?) {
            guard var s = text else { return uint32(.max) }
            s.withUTF8 { utf8 in
                uint32(UInt32(truncatingIfNeeded: utf8.count))
                bytes.append(contentsOf: utf8)
            }
        }
    }

    private struct Reader {
        let bytes: [UInt8]
        var at = 0
        var remaining: Int { bytes.count - at }

        static func malformed(_ why: String) -> IPCError { IPCError(.malformed, "not a valid list of tasks: \(why)") }

        mutating func byte() throws(IPCError) -> UInt8 {
            guard remaining >= 1 else { throw Reader.malformed("it ends early") }
            at += 1
            return bytes[at - 1]
        }

        mutating func uint32() throws(IPCError) -> UInt32 {
            guard remaining >= 4 else { throw Reader.malformed("it ends early") }
            var v: UInt32 = 0
            for i in (0..<4).reversed() { v = v << 8 | UInt32(bytes[at + i]) }
            at += 4
            return v
        }

        mutating func uint64() throws(IPCError) -> UInt64 {
            guard remaining >= 8 else { throw Reader.malformed("it ends early") }
            var v: UInt64 = 0
            for i in (0..<8).reversed() { v = v << 8 | UInt64(bytes[at + i]) }
            at += 8
            return v
        }

        mutating func int64() throws(IPCError) -> Int64 { Int64(bitPattern: try uint64()) }
        mutating func int() throws(IPCError) -> Int { Int(truncatingIfNeeded: try int64()) }

        mutating func string() throws(IPCError) -> String? {
            let length = try uint32()
            if length == .max { return nil }
            guard Int(length) <= remaining else { throw Reader.malformed("a string of \(length) bytes where \(remaining) are left") }
            let s = String(decoding: bytes[at..<at + Int(length)], as: UTF8.self)
            at += Int(length)
            return s
        }
    }
}
