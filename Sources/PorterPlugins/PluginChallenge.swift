import CPorterPlugin
import Foundation
import PorterCore

/// The one place a plugin's challenge becomes an `AuthenticationChallenge`, for every way
/// a plugin raises one: a C plugin in process (`porter_host.challenge`), a Swift plugin on
/// PorterPluginKit (the same C call), and an isolated plugin's `challenge` message, which
/// the host rebuilds here from its own load, never from the worker's copy.
///
/// The protection space's scheme, host and port are the load's own URL's (after a
/// redirect, the new URL's: each hop is a load of its own). A plugin chooses only the
/// realm and the method, which select among the credentials of that one origin (the
/// stores match a space exactly), so no plugin can name another scheme's, host's or port's
/// space and be handed its stored password, its netrc login or the `-u` credential. What
/// it sends as host, port or scheme is ignored.
struct PluginChallengeRequest: Sendable {
    /// The realm, as the plugin names it (cleaned: no control characters, at most
    /// `realmLimit` bytes), or nil.
    var realm: String?
    var method: AuthenticationMethod
    var previousFailureCount: Int
    /// For `.serverTrust`: what the server presented.
    var serverTrust: ServerTrust?

    static let realmLimit = 256

    init(realm: String?, method: AuthenticationMethod, previousFailureCount: Int, serverTrust: ServerTrust?) {
        self.realm = realm.map(Self.clean)
        self.method = method
        self.previousFailureCount = max(0, previousFailureCount)
        if method == .serverTrust {
            let presented = serverTrust ?? ServerTrust(certificateChain: [])
            self.serverTrust = ServerTrust(certificateChain: presented.certificateChain,
                                           evaluationFailure: presented.evaluationFailure.map(Self.clean))
        } else {
            self.serverTrust = nil
        }
    }

    /// A `PORTER_AUTH_*` value (and `method_name` for `PORTER_AUTH_CUSTOM`) as a method.
    /// `PORTER_AUTH_PASSWORD` is `.password`, as the plugin said, not `.default`.
    static func method(code: Int32, name: String?) -> AuthenticationMethod {
        switch code {
        case Int32(PORTER_AUTH_PASSWORD): return .password
        case Int32(PORTER_AUTH_CLIENT_CERTIFICATE): return .clientCertificate
        case Int32(PORTER_AUTH_SERVER_TRUST): return .serverTrust
        case Int32(PORTER_AUTH_CUSTOM): return customMethod(name ?? "custom")
        default: return .default
        }
    }

    /// A method named on a worker's wire: only what the C ABI can express (default,
    /// password, client certificate, server trust, a custom name); a custom name that
    /// spells a built-in HTTP method stays custom.
    static func method(wireName: String) -> AuthenticationMethod {
        switch wireName {
        case "password": return .password
        case "client-certificate": return .clientCertificate
        case "server-trust": return .serverTrust
        case let s where s.hasPrefix("custom:"): return customMethod(String(s.dropFirst(7)))
        default: return .default
        }
    }

    /// The wire's name of a method (the inverse of `method(wireName:)`).
    static func wireName(_ m: AuthenticationMethod) -> String {
        switch m {
        case .password: return "password"
        case .clientCertificate: return "client-certificate"
        case .serverTrust: return "server-trust"
        case .custom(let name): return "custom:" + name
        default: return "default"
        }
    }

    private static func customMethod(_ name: String) -> AuthenticationMethod {
        let cleaned = clean(name)
        return .custom(cleaned.isEmpty ? "custom" : cleaned)
    }

    /// No control characters (a realm is printed by `porter -v` and by applications),
    /// bounded.
    static func clean(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars where !(scalar.properties.generalCategory == .control) {
            if out.utf8.count + String(scalar).utf8.count > realmLimit { break }
            out.unicodeScalars.append(scalar)
        }
        return out
    }

    /// The protection space of a challenge raised while loading `url` for a session of
    /// `configuration`: the port the URL names, else the one its scheme's handler declares
    /// (the plugin's own `default_port`, read from its descriptor, never from the challenge).
    func protectionSpace(loading url: URL, configuration: SessionConfiguration) -> ProtectionSpace {
        let scheme = url.scheme?.lowercased() ?? ""
        return ProtectionSpace(host: url.host ?? "",
                               port: configuration.port(of: url) ?? 0,
                               protocol: scheme, realm: realm, authenticationMethod: method, serverTrust: serverTrust)
    }

    /// The challenge raised while loading `url`. A password the URL carries is the
    /// proposed credential of a password challenge, as for http and ftp.
    func challenge(loading url: URL, configuration: SessionConfiguration,
                   reply: @escaping @Sendable (ChallengeDisposition) -> Void) -> AuthenticationChallenge {
        var proposed: Credential?
        if method == .default || method == .password,
           let user = url.user(percentEncoded: false), let password = url.password(percentEncoded: false) {
            proposed = Credential(user: user, password: password, persistence: .none)
        }
        return AuthenticationChallenge(protectionSpace: protectionSpace(loading: url, configuration: configuration), proposedCredential: proposed,
                                       previousFailureCount: previousFailureCount, reply: reply)
    }
}
