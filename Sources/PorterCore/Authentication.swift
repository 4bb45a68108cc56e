import Foundation

/// How a server (or a proxy) asks for proof.
public enum AuthenticationMethod: Sendable, Hashable, CustomStringConvertible {
    case `default`
    /// A user name and password, for a scheme with no more specific method (a plugin's
    /// `PORTER_AUTH_PASSWORD`: sftp, gopher, ...).
    case password
    case httpBasic
    case httpDigest
    case ntlm
    case negotiate
    case clientCertificate
    case serverTrust
    /// A plugin's own method, e.g. "ssh-password" or "ssh-publickey".
    case custom(String)

    public var description: String {
        switch self {
        case .default: return "default"
        case .password: return "password"
        case .httpBasic: return "basic"
        case .httpDigest: return "digest"
        case .ntlm: return "ntlm"
        case .negotiate: return "negotiate"
        case .clientCertificate: return "client-certificate"
        case .serverTrust: return "server-trust"
        case .custom(let name): return name
        }
    }

    /// The method `description` names; any other name is a plugin's own (`.custom`). The one
    /// parser of stored and transmitted method names (credential files and keyrings,
    /// porterd's wire, a plugin worker's wire).
    public init(name: String) {
        switch name {
        case "default": self = .default
        case "password": self = .password
        case "basic": self = .httpBasic
        case "digest": self = .httpDigest
        case "ntlm": self = .ntlm
        case "negotiate": self = .negotiate
        case "client-certificate": self = .clientCertificate
        case "server-trust": self = .serverTrust
        default: self = .custom(name)
        }
    }

    /// Methods that belong to the connection rather than to one request; the session
    /// delegate answers them when the task delegate does not.
    public var isConnectionLevel: Bool {
        switch self {
        case .serverTrust, .clientCertificate, .ntlm, .negotiate: return true
        default: return false
        }
    }
}

/// What a server presented for a server-trust challenge.
public struct ServerTrust: Sendable, Equatable {
    /// The peer's certificate chain, leaf first, DER encoded (for SSH: the host key blob).
    public var certificateChain: [Data]
    /// Why the default check did not accept it ("self-signed certificate", "unknown host key").
    public var evaluationFailure: String?
    public init(certificateChain: [Data], evaluationFailure: String? = nil) {
        self.certificateChain = certificateChain
        self.evaluationFailure = evaluationFailure
    }
}

/// The realm a credential applies to.
public struct ProtectionSpace: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// The scheme ("http", "https", "sftp", ...).
    public var `protocol`: String
    public var realm: String?
    public var authenticationMethod: AuthenticationMethod
    /// True for a proxy's challenge (407).
    public var isProxy: Bool
    public var serverTrust: ServerTrust?

    public init(host: String, port: Int, protocol: String, realm: String?, authenticationMethod: AuthenticationMethod,
                isProxy: Bool = false, serverTrust: ServerTrust? = nil) {
        self.host = host
        self.port = port
        self.protocol = `protocol`
        self.realm = realm
        self.authenticationMethod = authenticationMethod
        self.isProxy = isProxy
        self.serverTrust = serverTrust
    }

    /// True when this space belongs to `url`'s origin: the same scheme, host and port
    /// (the port its handler declares when the URL names none, as `registry` answers). A
    /// credential given for a URL answers only challenges for which this holds, so it
    /// never reaches another host, another port, or plain http when it was given for https.
    public func isOrigin(of url: URL, registry: HandlerRegistry = .shared) -> Bool {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return false }
        return `protocol`.lowercased() == scheme && self.host.lowercased() == host
            && port == (url.port ?? registry.defaultPort(forScheme: scheme) ?? 0)
    }

    /// The port a URL of `scheme` means when it names none (0 when no handler of the
    /// shared registry declares one): `HandlerRegistry.shared.defaultPort(forScheme:)`.
    public static func defaultPort(for scheme: String) -> Int {
        HandlerRegistry.shared.defaultPort(forScheme: scheme) ?? 0
    }

    public static func == (a: ProtectionSpace, b: ProtectionSpace) -> Bool {
        a.host.lowercased() == b.host.lowercased() && a.port == b.port && a.protocol == b.protocol
            && a.realm == b.realm && a.authenticationMethod == b.authenticationMethod && a.isProxy == b.isProxy
    }
    public func hash(into h: inout Hasher) {
        h.combine(host.lowercased()); h.combine(port); h.combine(`protocol`); h.combine(realm)
        h.combine(authenticationMethod); h.combine(isProxy)
    }

    public var description: String {
        "\(isProxy ? "proxy " : "")\(`protocol`)://\(host):\(port) realm=\(realm ?? "-") method=\(authenticationMethod)"
    }
}

/// Proof offered in answer to a challenge.
public struct Credential: Sendable, Equatable, CustomStringConvertible {
    public enum Persistence: Sendable, Equatable { case none, forSession, permanent }
    public enum Kind: Sendable, Equatable {
        case password(user: String, password: String)
        /// Accept the server as presented (the answer to a server-trust challenge).
        case trust(ServerTrust)
        /// A PEM certificate and key (file paths), for client-certificate challenges
        /// and for key-based logins (ssh).
        case certificate(certificatePath: String, keyPath: String, passphrase: String?)
    }
    public var kind: Kind
    public var persistence: Persistence

    public init(user: String, password: String, persistence: Persistence = .forSession) {
        self.kind = .password(user: user, password: password)
        self.persistence = persistence
    }
    public init(trust: ServerTrust) {
        self.kind = .trust(trust)
        self.persistence = .none
    }
    public init(certificatePath: String, keyPath: String, passphrase: String? = nil, persistence: Persistence = .forSession) {
        self.kind = .certificate(certificatePath: certificatePath, keyPath: keyPath, passphrase: passphrase)
        self.persistence = persistence
    }

    public var user: String? {
        if case .password(let u, _) = kind { return u }
        return nil
    }
    public var password: String? {
        if case .password(_, let p) = kind { return p }
        return nil
    }
    /// Never prints a password.
    public var description: String {
        switch kind {
        case .password(let u, _): return "Credential(user: \(u))"
        case .trust: return "Credential(trust)"
        case .certificate(let c, _, _): return "Credential(certificate: \(c))"
        }
    }
}

/// The answer to a challenge.
public enum ChallengeDisposition: Sendable, Equatable {
    case useCredential(Credential)
    /// What would happen with no delegate: the proposed credential or stored one if
    /// any, else carry on without one (an HTTP handler then delivers the 401).
    case performDefaultHandling
    /// Cancel the challenge: the task ends with `.userCancelledAuthentication`.
    case cancelAuthenticationChallenge
    /// Skip this protection space; the handler tries the next one it knows.
    case rejectProtectionSpace
}

/// A request for proof, raised by a handler and answered by the delegate (or by the
/// session's default handling). The handler supplies `reply`, which Porter calls
/// exactly once, from any thread, unless the handler withdrew the challenge first.
public struct AuthenticationChallenge: Sendable, CustomStringConvertible {
    public var protectionSpace: ProtectionSpace
    public var proposedCredential: Credential?
    /// How many times a credential for this space already failed in this task.
    public var previousFailureCount: Int
    public var failureResponse: Response?
    public var error: PorterError?
    /// Distinguishes the challenges of one handler (for `didCancel`).
    public let identifier: UInt64
    package let reply: @Sendable (ChallengeDisposition) -> Void

    private static let counter = AtomicCounter()

    public init(protectionSpace: ProtectionSpace, proposedCredential: Credential?, previousFailureCount: Int,
                failureResponse: Response? = nil, error: PorterError? = nil,
                reply: @escaping @Sendable (ChallengeDisposition) -> Void) {
        self.protectionSpace = protectionSpace
        self.proposedCredential = proposedCredential
        self.previousFailureCount = previousFailureCount
        self.failureResponse = failureResponse
        self.error = error
        self.identifier = AuthenticationChallenge.counter.next()
        self.reply = reply
    }

    public var description: String {
        "challenge #\(identifier) \(protectionSpace) failures=\(previousFailureCount)"
    }
}
