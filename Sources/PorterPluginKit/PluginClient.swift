@_exported import CPorterPlugin
import Foundation

/// One load's link to the host. All methods may be called from any thread.
public final class PluginClient: @unchecked Sendable {
    let host: UnsafePointer<porter_host>
    let client: OpaquePointer?

    init(host: UnsafePointer<porter_host>, client: OpaquePointer?) {
        self.host = host
        self.client = client
    }

    public func receive(_ response: PluginResponse) {
        let strings = CStrings()
        defer { withExtendedLifetime(strings) {} }
        let dup = strings.dup
        let fields = UnsafeMutablePointer<porter_field>.allocate(capacity: max(1, response.headers.count))
        defer { fields.deallocate() }
        for (i, h) in response.headers.enumerated() { fields[i] = porter_field(name: dup(h.name), value: dup(h.value)) }
        var r = porter_response()
        r.struct_size = UInt32(MemoryLayout<porter_response>.size)
        r.mime_type = dup(response.mimeType)
        r.text_encoding = dup(response.textEncoding)
        r.expected_length = response.expectedLength ?? -1
        r.status_code = response.statusCode ?? -1
        r.headers = UnsafePointer(fields)
        r.header_count = response.headers.count
        r.resume_offset = response.resumeOffset ?? -1
        r.validator = dup(response.validator)
        withUnsafePointer(to: &r) { host.pointee.did_receive_response?(client, $0) }
    }

    public func load(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        host.pointee.did_load_data?(client, base, bytes.count)
    }

    public func load(_ bytes: [UInt8]) { bytes.withUnsafeBytes { load($0) } }

    public func redirect(to url: String) {
        host.pointee.was_redirected?(client, url, nil)
    }

    public func finish() { host.pointee.did_finish?(client) }

    /// ABI 1.1: the request's cached response is still good; the host serves it and the
    /// load is over. Returns false when the host is older than 1.1 (load as usual then).
    @discardableResult
    public func cachedResponseIsValid(revalidated: Bool) -> Bool {
        let offset = MemoryLayout<porter_host>.offset(of: \.cached_response_is_valid) ?? Int.max
        guard Int(host.pointee.struct_size) >= offset + MemoryLayout<UnsafeRawPointer>.size,
              let call = host.pointee.cached_response_is_valid else { return false }
        call(client, revalidated ? 1 : 0)
        return true
    }

    public func fail(_ error: PluginError) {
        host.pointee.did_fail?(client, error.code, error.message, error.causeDomain, error.causeCode)
    }

    public func sent(_ bytes: Int64, total: Int64, expected: Int64?) {
        host.pointee.did_send_body_data?(client, bytes, total, expected ?? -1)
    }

    /// Reads request body bytes: the count, 0 at the end, -1 on error. May block.
    public func readBody(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return -1 }
        return Int(host.pointee.read_body?(client, base, buffer.count) ?? -1)
    }

    public func log(_ level: Int32, _ message: String) { host.pointee.log?(client, level, message) }

    /// ABI 1.3: a connection to a local service the plugin declared in
    /// `PluginDefinition.needs` (e.g. the user's ssh agent), made by the host: a connected
    /// descriptor the caller owns and closes. Throws when the host is older than 1.3, the
    /// need was not declared, or the service is not there. May block briefly: call it on
    /// the plugin's own thread.
    public func connect(to service: PluginService) throws(PluginError) -> Int32 {
        let offset = MemoryLayout<porter_host>.offset(of: \.connect_service) ?? Int.max
        guard Int(host.pointee.struct_size) >= offset + MemoryLayout<UnsafeRawPointer>.size,
              let call = host.pointee.connect_service else {
            throw PluginError(Int32(PORTER_ERR_UNSUPPORTED_CONFIGURATION), "this host hands over no local services (ABI before 1.3)")
        }
        var code: Int32 = 0
        var reason = [CChar](repeating: 0, count: 512)
        let capacity = reason.count
        let fd = call(client, service.rawValue, &code, &reason, capacity)
        guard fd >= 0 else {
            let text = CErrorBuffer.read(reason)
            throw PluginError(code != 0 ? code : Int32(PORTER_ERR_UNKNOWN), text.isEmpty ? "no \(service) connection" : text)
        }
        return fd
    }

    /// Raises a challenge and blocks the calling (plugin-owned) thread until it is
    /// answered or `isCancelled` turns true (checked every 50 ms); nil when cancelled or
    /// the challenge could not be raised.
    public func challengeAndWait(_ challenge: PluginChallenge, isCancelled: () -> Bool) -> PluginReply? {
        let box = ReplyBox()
        let strings = CStrings()
        defer { withExtendedLifetime(strings) {} }
        let dup = strings.dup
        var c = porter_challenge()
        c.struct_size = UInt32(MemoryLayout<porter_challenge>.size)
        switch challenge.method {
        case .password: c.method = Int32(PORTER_AUTH_PASSWORD)
        case .clientCertificate: c.method = Int32(PORTER_AUTH_CLIENT_CERTIFICATE)
        case .serverTrust: c.method = Int32(PORTER_AUTH_SERVER_TRUST)
        case .custom(let name): c.method = Int32(PORTER_AUTH_CUSTOM); c.method_name = dup(name)
        }
        c.host = dup(challenge.host)
        c.port = challenge.port
        c.realm = dup(challenge.realm)
        c.previous_failure_count = challenge.previousFailureCount
        c.proposed_user = dup(challenge.proposedUser)
        c.failure_reason = dup(challenge.failureReason)
        let blobs = challenge.identity.map { bytes -> UnsafeMutablePointer<UInt8> in
            let p = UnsafeMutablePointer<UInt8>.allocate(capacity: max(1, bytes.count))
            p.initialize(from: bytes, count: bytes.count)
            return p
        }
        defer { blobs.forEach { $0.deallocate() } }
        let pointers = UnsafeMutablePointer<UnsafePointer<UInt8>?>.allocate(capacity: max(1, blobs.count))
        let lengths = UnsafeMutablePointer<Int>.allocate(capacity: max(1, blobs.count))
        defer { pointers.deallocate(); lengths.deallocate() }
        for (i, b) in blobs.enumerated() {
            pointers[i] = UnsafePointer(b)
            lengths[i] = challenge.identity[i].count
        }
        c.identity = UnsafePointer(pointers)
        c.identity_lengths = UnsafePointer(lengths)
        c.identity_count = blobs.count
        let context = Unmanaged.passRetained(box)
        let id = withUnsafePointer(to: &c) { cp in
            host.pointee.challenge?(client, cp, { ctx, reply in
                guard let ctx, let reply else { return }
                let box = Unmanaged<ReplyBox>.fromOpaque(ctx)
                box.takeUnretainedValue().set(PluginReply(reply.pointee))
                if box.takeUnretainedValue().leave() { box.release() }
            }, context.toOpaque()) ?? 0
        }
        if id == 0 { context.release(); return nil }
        // The box has two users, this thread and the reply; the second to leave frees
        // it. A withdrawn challenge whose reply never comes leaves one small box behind
        // rather than risk a reply racing the withdrawal into freed memory.
        while true {
            if let reply = box.wait(timeout: 0.05) {
                if box.leave() { context.release() }
                return reply
            }
            if isCancelled() {
                host.pointee.cancel_challenge?(client, id)
                if box.leave() { context.release() }
                return nil
            }
        }
    }
}

/// Where a challenge's reply lands.
final class ReplyBox: @unchecked Sendable {
    private let condition = NSCondition()
    private var reply: PluginReply?
    private var users = 2
    func set(_ r: PluginReply) {
        condition.lock()
        reply = r
        condition.broadcast()
        condition.unlock()
    }
    func wait(timeout: Double) -> PluginReply? {
        condition.lock(); defer { condition.unlock() }
        if reply == nil { _ = condition.wait(until: Date().addingTimeInterval(timeout)) }
        return reply
    }
    /// True for the last of the two users to leave.
    func leave() -> Bool {
        condition.lock(); defer { condition.unlock() }
        users -= 1
        return users == 0
    }
}
