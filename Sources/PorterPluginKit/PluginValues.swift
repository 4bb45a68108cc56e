@_exported import CPorterPlugin
import Foundation

// The values a Swift plugin sees: the request it loads, the response it gives, its errors,
// and the challenges it asks the host about with their replies.

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

