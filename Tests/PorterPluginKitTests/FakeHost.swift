import CPorterPlugin
import Foundation
@testable import PorterPluginKit

/// A `porter_host` table made of plain C functions that record what a plugin asked of
/// the host, one line per call: PluginKit's C-facing side tested in process, no sockets.
/// The functions cannot capture (C function pointers), so what they record and what the
/// fake answers live in `FakeHost.state`.
enum FakeHost {
    final class State: @unchecked Sendable {
        private let lock = NSLock()
        private var lines: [String] = []
        /// What `read_body` copies out, `connect_service` returns, `challenge` does.
        var body: [UInt8] = []
        var serviceResult: (fd: Int32, code: Int32, reason: String) = (-1, 0, "")
        var challengeAnswer: ChallengeAnswer = .refuse
        func record(_ line: String) { lock.withLock { lines.append(line) } }
        func take() -> [String] { lock.withLock { defer { lines = [] }; return lines } }
        func reset() {
            _ = take()
            lock.withLock { body = []; serviceResult = (-1, 0, ""); challengeAnswer = .refuse }
        }
        func read<T>(_ body: () -> T) -> T { lock.withLock(body) }
    }
    enum ChallengeAnswer { case refuse, password(String, String), never }
    static let state = State()

    static func string(_ p: UnsafePointer<CChar>?) -> String { p.map { String(cString: $0) } ?? "nil" }

    /// A host table for `abi_major`, as big as `size` says (a host older than 1.1 ends
    /// before `cached_response_is_valid`). Lives for the process, as a real one does.
    static func table(major: UInt16 = UInt16(PORTER_PLUGIN_ABI_MAJOR), size: Int = MemoryLayout<porter_host>.size)
        -> UnsafePointer<porter_host> {
        var h = porter_host()
        h.struct_size = UInt32(size)
        h.abi_major = major
        h.abi_minor = UInt16(PORTER_PLUGIN_ABI_MINOR)
        h.did_receive_response = { client, r in
            guard let r = r?.pointee else { FakeHost.state.record("response NULL"); return }
            var fields: [String] = []
            for i in 0..<r.header_count { fields.append("\(FakeHost.string(r.headers[i].name))=\(FakeHost.string(r.headers[i].value))") }
            FakeHost.state.record("response \(Int(bitPattern: client)) "
                + "\(FakeHost.string(r.mime_type)) \(FakeHost.string(r.text_encoding)) \(r.expected_length) \(r.status_code) "
                + "\(fields.joined(separator: ",")) \(r.resume_offset) \(FakeHost.string(r.validator)) size=\(r.struct_size)")
        }
        h.did_load_data = { _, bytes, length in
            let data = bytes.map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
            FakeHost.state.record("data \(data)")
        }
        h.was_redirected = { _, url, response in
            FakeHost.state.record("redirect \(FakeHost.string(url)) \(response == nil ? "no-head" : "head")")
        }
        h.did_finish = { _ in FakeHost.state.record("finish") }
        h.did_fail = { _, code, message, domain, cause in
            FakeHost.state.record("fail \(code) \(FakeHost.string(message)) \(FakeHost.string(domain)) \(cause)")
        }
        h.did_send_body_data = { _, sent, total, expected in FakeHost.state.record("sent \(sent) \(total) \(expected)") }
        h.challenge = { client, c, reply, context in
            guard let c = c?.pointee else { return 0 }
            var identity: [[UInt8]] = []
            for i in 0..<c.identity_count {
                identity.append(Array(UnsafeBufferPointer(start: c.identity[i], count: c.identity_lengths[i])))
            }
            FakeHost.state.record("challenge \(c.method) \(FakeHost.string(c.method_name)) \(FakeHost.string(c.host)):\(c.port) "
                + "\(FakeHost.string(c.realm)) \(c.previous_failure_count) \(FakeHost.string(c.proposed_user)) "
                + "\(identity) \(FakeHost.string(c.failure_reason))")
            switch FakeHost.state.read({ FakeHost.state.challengeAnswer }) {
            case .refuse:
                return 0
            case .never:
                return 77
            case .password(let user, let password):
                user.withCString { u in
                    password.withCString { p in
                        var r = porter_challenge_reply()
                        r.struct_size = UInt32(MemoryLayout<porter_challenge_reply>.size)
                        r.disposition = Int32(PORTER_DISPOSITION_USE_CREDENTIAL)
                        r.user = u
                        r.password = p
                        reply?(context, &r)
                    }
                }
                return 78
            }
        }
        h.cancel_challenge = { _, id in FakeHost.state.record("cancel \(id)") }
        h.read_body = { _, buffer, capacity in
            let body = FakeHost.state.read { FakeHost.state.body }
            let n = min(capacity, body.count)
            if let buffer { body.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress!, byteCount: n) } }
            FakeHost.state.record("read \(capacity)")
            return Int64(n)
        }
        h.log = { _, level, message in FakeHost.state.record("log \(level) \(FakeHost.string(message))") }
        h.cached_response_is_valid = { _, revalidated in FakeHost.state.record("cached \(revalidated)") }
        h.connect_service = { _, service, code, error, capacity in
            let (fd, c, reason) = FakeHost.state.read { FakeHost.state.serviceResult }
            FakeHost.state.record("connect \(service)")
            if fd < 0 {
                code?.pointee = c
                CErrorBuffer.write(reason, to: error, capacity: capacity)
            }
            return fd
        }
        let t = UnsafeMutablePointer<porter_host>.allocate(capacity: 1)
        t.initialize(to: h)
        return UnsafePointer(t)
    }

    /// The `porter_client *` the tests hand to PluginKit: a token, never dereferenced.
    static var client: OpaquePointer? { OpaquePointer(bitPattern: 7) }
}
