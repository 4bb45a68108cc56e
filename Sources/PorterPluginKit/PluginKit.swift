@_exported import CPorterPlugin
import Foundation

// PorterPluginKit: write a Porter plugin in Swift. A plugin is a class conforming to
// `PluginLoadHandler` plus one `@_cdecl("porter_plugin_entry")` function that calls
// `PluginKit.export(_:...)`. Everything here sits on porter_plugin.h only — no Porter
// module is linked into the plugin (DESIGN.md, Plugins: why the boundary is C).

/// The request a load is for (a Swift copy of `porter_request`).
public struct PluginRequest: Sendable {
    public var url: String
    public var method: String
    public var headers: [(name: String, value: String)]
    /// String-valued request properties.
    public var properties: [String: String]
    /// Load from this offset (resume), or nil.
    public var resumeOffset: Int64?
    public var resumeValidator: String?
    public var hasBody: Bool
    /// nil when unknown.
    public var bodyLength: Int64?
    /// Idle timeout in seconds (0: none).
    public var timeoutInterval: Double
    /// The session turned identity verification off (the CLI's --insecure).
    public var insecure: Bool
    /// ABI 1.1: the session's cache holds a response for this request, with this
    /// validator (nil when it has none). Call `PluginClient.cachedResponseIsValid` to
    /// have it served.
    public var hasCachedResponse: Bool
    public var cachedValidator: String?

    init(_ r: porter_request) {
        func s(_ p: UnsafePointer<CChar>?) -> String? { p.flatMap { String(validatingCString: $0) } }
        url = s(r.url) ?? ""
        method = s(r.method) ?? "GET"
        var h: [(String, String)] = []
        if let list = r.headers {
            for i in 0..<r.header_count { h.append((s(list[i].name) ?? "", s(list[i].value) ?? "")) }
        }
        headers = h
        var p: [String: String] = [:]
        if let list = r.properties {
            for i in 0..<r.property_count { if let k = s(list[i].name) { p[k] = s(list[i].value) ?? "" } }
        }
        properties = p
        resumeOffset = r.resume_offset >= 0 ? r.resume_offset : nil
        resumeValidator = s(r.resume_validator)
        hasBody = r.has_body != 0
        bodyLength = r.body_length >= 0 ? r.body_length : nil
        timeoutInterval = r.timeout_interval
        insecure = r.insecure != 0
        let offset = MemoryLayout<porter_request>.offset(of: \.cached_response) ?? Int.max
        if Int(r.struct_size) >= offset + MemoryLayout<UnsafeRawPointer>.size, let cached = r.cached_response {
            hasCachedResponse = true
            cachedValidator = s(cached.pointee.validator)
        } else {
            hasCachedResponse = false
            cachedValidator = nil
        }
    }
}

/// A response head.
public struct PluginResponse: Sendable {
    public var mimeType: String?
    public var textEncoding: String?
    public var expectedLength: Int64?
    public var statusCode: Int32?
    public var headers: [(name: String, value: String)]
    /// Where a resumed load starts, or nil (restarted or not a resume).
    public var resumeOffset: Int64?
    public var validator: String?
    public init(mimeType: String?, textEncoding: String? = nil, expectedLength: Int64?, statusCode: Int32? = nil,
                headers: [(name: String, value: String)] = [], resumeOffset: Int64? = nil, validator: String? = nil) {
        self.mimeType = mimeType
        self.textEncoding = textEncoding
        self.expectedLength = expectedLength
        self.statusCode = statusCode
        self.headers = headers
        self.resumeOffset = resumeOffset
        self.validator = validator
    }
}

/// A plugin's error: a PORTER_ERR_* code, a message, and the library's own error.
public struct PluginError: Error, Sendable {
    public var code: Int32
    public var message: String
    public var causeDomain: String?
    public var causeCode: Int64
    public init(_ code: Int32, _ message: String, causeDomain: String? = nil, causeCode: Int64 = 0) {
        self.code = code
        self.message = message
        self.causeDomain = causeDomain
        self.causeCode = causeCode
    }
}

/// What a challenge asks. The application sees it for the protection space of the URL
/// being loaded (its scheme, host and port): `host` and `port` are informative only and
/// are not read by the host (porter_plugin.h, porter_challenge); the realm and the method
/// are the plugin's to choose.
public struct PluginChallenge: Sendable {
    public enum Method: Sendable, Equatable { case password, clientCertificate, serverTrust, custom(String) }
    public var method: Method
    public var host: String
    public var port: Int32
    public var realm: String?
    public var previousFailureCount: Int32
    public var proposedUser: String?
    /// Server trust: the identity (DER certificates or an SSH host key blob) and why it
    /// is not trusted.
    public var identity: [[UInt8]]
    public var failureReason: String?
    public init(method: Method, host: String, port: Int32, realm: String? = nil, previousFailureCount: Int32 = 0,
                proposedUser: String? = nil, identity: [[UInt8]] = [], failureReason: String? = nil) {
        self.method = method
        self.host = host
        self.port = port
        self.realm = realm
        self.previousFailureCount = previousFailureCount
        self.proposedUser = proposedUser
        self.identity = identity
        self.failureReason = failureReason
    }
}

/// The answer to a challenge.
public enum PluginReply: Sendable, Equatable {
    case password(user: String, password: String)
    case key(publicKeyPath: String?, privateKeyPath: String, passphrase: String?)
    case trust
    case performDefault
    case cancel
    case rejectSpace
    /// A credential kind the challenge did not ask for (e.g. a password for server trust).
    case unusable

    init(_ r: porter_challenge_reply) {
        func s(_ p: UnsafePointer<CChar>?) -> String? { p.flatMap { String(validatingCString: $0) } }
        switch r.disposition {
        case Int32(PORTER_DISPOSITION_USE_CREDENTIAL):
            if let user = s(r.user), let password = s(r.password) {
                self = .password(user: user, password: password)
            } else if let key = s(r.key_path) {
                self = .key(publicKeyPath: s(r.certificate_path), privateKeyPath: key, passphrase: s(r.passphrase))
            } else if r.trust != 0 {
                self = .trust
            } else {
                self = .unusable
            }
        case Int32(PORTER_DISPOSITION_CANCEL): self = .cancel
        case Int32(PORTER_DISPOSITION_REJECT_SPACE): self = .rejectSpace
        default: self = .performDefault
        }
    }
}

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

/// One load of a Swift plugin. Made by the definition's factory on the host's thread;
/// `start` must return promptly (start a thread for the I/O). Porter calls `stop` at
/// most once; when the load ends (after `finish`/`fail` or `stop`) PluginKit calls
/// `waitUntilDone` from a host thread, then drops the handler.
public protocol PluginLoadHandler: AnyObject {
    func start()
    func stop()
    /// Back-pressure; default: ignored (the host buffers).
    func pause()
    func resume()
    /// Block until no thread of this load will touch the client again.
    func waitUntilDone()
}

extension PluginLoadHandler {
    public func pause() {}
    public func resume() {}
}

/// A scheme with its capability flags (PORTER_SCHEME_*).
public struct PluginSchemeDefinition: Sendable {
    public var name: String
    public var flags: UInt32
    public init(_ name: String, flags: UInt32) {
        self.name = name
        self.flags = flags
    }
}

/// A local service the host can connect a plugin to (porter_plugin.h, PORTER_SERVICE_*).
public enum PluginService: Int32, Sendable {
    /// The user's ssh agent (the host's $SSH_AUTH_SOCK); the connection speaks the agent
    /// protocol (draft-miller-ssh-agent).
    case sshAgent = 1   // PORTER_SERVICE_SSH_AGENT
}

/// What a plugin declares it needs of the host (ABI 1.3 `needs`): without the declaration
/// `PluginClient.connect(to:)` is refused.
public struct PluginNeeds: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let sshAgent = PluginNeeds(rawValue: UInt32(PORTER_NEED_SSH_AGENT))
}

/// Everything the descriptor says, plus the factory for loads.
public struct PluginDefinition: Sendable {
    public var name: String
    public var version: String
    public var schemes: [PluginSchemeDefinition]
    public var supportsPause: Bool
    /// Paths inside the user's home folder the plugin reads, or also writes, when it runs
    /// isolated ("~/.ssh"; ABI 1.2 `read_paths` / `write_paths`).
    public var readPaths: [String]
    public var writePaths: [String]
    /// The local services its loads may ask the host for (ABI 1.3 `needs`).
    public var needs: PluginNeeds
    /// Makes the handler for one load, or throws to refuse it at once.
    public var makeHandler: @Sendable (PluginRequest, PluginClient) throws(PluginError) -> any PluginLoadHandler
    public init(name: String, version: String, schemes: [PluginSchemeDefinition], supportsPause: Bool = true,
                readPaths: [String] = [], writePaths: [String] = [], needs: PluginNeeds = [],
                makeHandler: @escaping @Sendable (PluginRequest, PluginClient) throws(PluginError) -> any PluginLoadHandler) {
        self.needs = needs
        self.name = name
        self.version = version
        self.schemes = schemes
        self.supportsPause = supportsPause
        self.readPaths = readPaths
        self.writePaths = writePaths
        self.makeHandler = makeHandler
    }
}

/// Turns a `PluginDefinition` into the C descriptor and vtable.
public enum PluginKit {
    final class Exported: @unchecked Sendable {
        let definition: PluginDefinition
        let host: UnsafePointer<porter_host>
        let descriptor: UnsafeMutablePointer<porter_plugin_descriptor>
        init(definition: PluginDefinition, host: UnsafePointer<porter_host>,
             descriptor: UnsafeMutablePointer<porter_plugin_descriptor>) {
            self.definition = definition
            self.host = host
            self.descriptor = descriptor
        }
    }

    final class LoadBox {
        let handler: any PluginLoadHandler
        init(_ handler: any PluginLoadHandler) { self.handler = handler }
    }

    private static let exports = NSLock()
    nonisolated(unsafe) private static var byName: [String: Exported] = [:]

    /// The body of a plugin's entry point. The descriptor is built once per plugin name
    /// and host table and lives for the process.
    public static func export(_ definition: PluginDefinition, host: UnsafePointer<porter_host>?,
                              descriptor: UnsafeMutablePointer<UnsafePointer<porter_plugin_descriptor>?>?,
                              error: UnsafeMutablePointer<CChar>?, capacity: Int) -> Int32 {
        func refuse(_ message: String) -> Int32 {
            CErrorBuffer.write(message, to: error, capacity: capacity)
            return 1
        }
        guard let host, let descriptor else { return refuse("no host table or descriptor slot") }
        guard host.pointee.abi_major == UInt16(PORTER_PLUGIN_ABI_MAJOR) else {
            return refuse("built for ABI \(PORTER_PLUGIN_ABI_MAJOR).\(PORTER_PLUGIN_ABI_MINOR); host has \(host.pointee.abi_major)")
        }
        exports.lock(); defer { exports.unlock() }
        let key = "\(definition.name)@\(UInt(bitPattern: host))"
        if let existing = byName[key] {
            descriptor.pointee = UnsafePointer(existing.descriptor)
            return 0
        }
        let schemes = UnsafeMutablePointer<porter_scheme>.allocate(capacity: definition.schemes.count)
        for (i, s) in definition.schemes.enumerated() {
            schemes[i] = porter_scheme(name: UnsafePointer(strdup(s.name)), flags: s.flags)
        }
        var table = porter_handler_vtable()
        table.struct_size = UInt32(MemoryLayout<porter_handler_vtable>.size)
        table.start = { ctx, request, client, load, errorBuffer, capacity in
            guard let ctx, let request else { return Int32(PORTER_ERR_UNKNOWN) }
            let exported = Unmanaged<Exported>.fromOpaque(ctx).takeUnretainedValue()
            let pluginClient = PluginClient(host: exported.host, client: client)
            do {
                let handler = try exported.definition.makeHandler(PluginRequest(request.pointee), pluginClient)
                let box = Unmanaged.passRetained(LoadBox(handler))
                load?.pointee = box.toOpaque()
                handler.start()
                return 0
            } catch let failure as PluginError {
                CErrorBuffer.write(failure.message, to: errorBuffer, capacity: capacity)
                return failure.code != 0 ? failure.code : Int32(PORTER_ERR_UNKNOWN)
            } catch {
                CErrorBuffer.write("\(error)", to: errorBuffer, capacity: capacity)
                return Int32(PORTER_ERR_UNKNOWN)
            }
        }
        table.stop = { load in
            guard let load else { return }
            Unmanaged<LoadBox>.fromOpaque(load).takeUnretainedValue().handler.stop()
        }
        table.destroy = { load in
            guard let load else { return }
            let box = Unmanaged<LoadBox>.fromOpaque(load).takeRetainedValue()
            box.handler.waitUntilDone()
        }
        if definition.supportsPause {
            table.pause = { load in
                guard let load else { return }
                Unmanaged<LoadBox>.fromOpaque(load).takeUnretainedValue().handler.pause()
            }
            table.resume = { load in
                guard let load else { return }
                Unmanaged<LoadBox>.fromOpaque(load).takeUnretainedValue().handler.resume()
            }
        }
        let vtable = UnsafeMutablePointer<porter_handler_vtable>.allocate(capacity: 1)
        vtable.initialize(to: table)
        let d = UnsafeMutablePointer<porter_plugin_descriptor>.allocate(capacity: 1)
        var desc = porter_plugin_descriptor()
        desc.struct_size = UInt32(MemoryLayout<porter_plugin_descriptor>.size)
        desc.abi_major = UInt16(PORTER_PLUGIN_ABI_MAJOR)
        desc.abi_minor = UInt16(PORTER_PLUGIN_ABI_MINOR)
        desc.name = UnsafePointer(strdup(definition.name))
        desc.version = UnsafePointer(strdup(definition.version))
        desc.schemes = UnsafePointer(schemes)
        desc.scheme_count = definition.schemes.count
        desc.handler = UnsafePointer(vtable)
        func list(_ paths: [String]) -> UnsafePointer<UnsafePointer<CChar>?>? {
            guard !paths.isEmpty else { return nil }
            let l = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: paths.count)
            for (i, p) in paths.enumerated() { l[i] = UnsafePointer(strdup(p)) }
            return UnsafePointer(l)
        }
        desc.read_paths = list(definition.readPaths)
        desc.read_path_count = definition.readPaths.count
        desc.write_paths = list(definition.writePaths)
        desc.write_path_count = definition.writePaths.count
        desc.needs = definition.needs.rawValue
        let exported = Exported(definition: definition, host: host, descriptor: d)
        desc.plugin_context = Unmanaged.passRetained(exported).toOpaque()
        d.initialize(to: desc)
        byName[key] = exported
        descriptor.pointee = UnsafePointer(d)
        return 0
    }
}

/// Porter's listing format (`text/x-porter-listing`, see the README), for plugins that
/// list folders, so a program parses one format whatever the scheme: one line per
/// entry, sorted by name, `<kind> <size> <modified> <name>`.
public struct PluginListing: Sendable {
    public static let contentType = "text/x-porter-listing"
    public enum Kind: String, Sendable { case directory = "d", file = "f", symlink = "l", other = "o" }
    public struct Entry: Sendable {
        public var name: String
        public var kind: Kind
        public var size: Int64?
        /// Seconds since 1970, UTC.
        public var modified: Int64?
        public init(name: String, kind: Kind, size: Int64?, modified: Int64?) {
            self.name = name
            self.kind = kind
            self.size = size
            self.modified = modified
        }
    }
    public var entries: [Entry] = []
    public init() {}

    public func serialized() -> [UInt8] {
        var text = ""
        for e in entries.sorted(by: { $0.name < $1.name }) {
            var date = "-"
            if let m = e.modified {
                var t = time_t(m)
                var v = tm()
                gmtime_r(&t, &v)
                date = String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", Int(v.tm_year) + 1900, Int(v.tm_mon) + 1,
                              Int(v.tm_mday), Int(v.tm_hour), Int(v.tm_min), Int(v.tm_sec))
            }
            var name = ""
            for ch in e.name.unicodeScalars {
                switch ch {
                case "%": name += "%25"
                case "\n": name += "%0A"
                case "\r": name += "%0D"
                default: name.unicodeScalars.append(ch)
                }
            }
            text += "\(e.kind.rawValue) \(e.size.map(String.init) ?? "-") \(date) \(name)\n"
        }
        return Array(text.utf8)
    }
}
