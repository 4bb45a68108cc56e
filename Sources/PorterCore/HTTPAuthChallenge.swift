import Foundation

/// One challenge of a `WWW-Authenticate` or `Proxy-Authenticate` field (RFC 9110 §11.6.1):
/// its scheme, and either its parameters or its token68. The one parser of challenges:
/// the http handler ranks them to pick a scheme for libcurl, the WebSocket handshake
/// answers them itself.
public struct HTTPAuthChallenge: Sendable, Equatable {
    /// The scheme as sent ("Digest", "NTLM").
    public var scheme: String
    /// Parameter names in lower case, values unquoted ("realm", "nonce", "qop", ...).
    public var parameters: [String: String]
    /// The token68 form ("Negotiate oYG2...", "NTLM TlRMTVNT..."), nil when absent.
    public var token68: String?

    public init(scheme: String, parameters: [String: String] = [:], token68: String? = nil) {
        self.scheme = scheme
        self.parameters = parameters
        self.token68 = token68
    }

    public var realm: String? { parameters["realm"] }

    /// The method the scheme names (`.custom(name)` for one Porter does not know).
    public var method: AuthenticationMethod { HTTPAuthChallenge.method(named: scheme) }

    public static func method(named scheme: String) -> AuthenticationMethod {
        switch scheme.lowercased() {
        case "basic": return .httpBasic
        case "digest": return .httpDigest
        case "ntlm": return .ntlm
        case "negotiate": return .negotiate
        default: return .custom(scheme.lowercased())
        }
    }

    /// Every challenge in the field values, in the order sent. One field may carry
    /// several challenges separated by commas, and a server often sends several fields.
    public static func parse(_ values: [String]) -> [HTTPAuthChallenge] {
        var found: [HTTPAuthChallenge] = []
        // Parameters belong to the challenge before them (field lines combine into one
        // list, RFC 9110 §5.3), and only when that challenge was well formed.
        var open = false
        for value in values {
            for item in splitOutsideQuotes(value) {
                let text = item.trimmingCharacters(in: .whitespaces)
                guard !text.isEmpty else { continue }
                let word = text.prefix { $0 != " " && $0 != "\t" }
                if word.contains("=") {
                    // A parameter of the challenge before it.
                    if open, let last = found.indices.last, found[last].token68 == nil, let (name, value) = parameter(text),
                       found[last].parameters[name] == nil {
                        found[last].parameters[name] = value
                    }
                    continue
                }
                // A scheme is a token; anything else (an unbalanced quote, a stray
                // separator) is no challenge, and what follows it is not its.
                open = HTTPSyntax.isToken(String(word))
                guard open else { continue }
                var challenge = HTTPAuthChallenge(scheme: String(word))
                let rest = text.dropFirst(word.count).trimmingCharacters(in: .whitespaces)
                if !rest.isEmpty {
                    if isToken68(rest) {
                        challenge.token68 = rest
                    } else if let (name, value) = parameter(rest) {
                        challenge.parameters[name] = value
                    }
                }
                found.append(challenge)
            }
        }
        return found
    }

    /// The challenges strongest first — Negotiate, NTLM, Digest, Basic, then others as
    /// sent, as curl's --anyauth ranks them — each scheme once. Of several Digest
    /// challenges, the one with the strongest algorithm this side computes is kept
    /// (SHA-512-256, SHA-256, MD5; `-sess` variants beside their base).
    public static func strongestFirst(_ values: [String]) -> [HTTPAuthChallenge] {
        func rank(_ m: AuthenticationMethod) -> Int {
            switch m {
            case .negotiate: return 0
            case .ntlm: return 1
            case .httpDigest: return 2
            case .httpBasic: return 3
            default: return 4
            }
        }
        var best: [AuthenticationMethod: (offset: Int, challenge: HTTPAuthChallenge)] = [:]
        for (offset, c) in parse(values).enumerated() {
            let m = c.method
            guard let kept = best[m] else { best[m] = (offset, c); continue }
            if m == .httpDigest, digestStrength(c) > digestStrength(kept.challenge) { best[m] = (kept.offset, c) }
        }
        return best.values.sorted { (rank($0.challenge.method), $0.offset) < (rank($1.challenge.method), $1.offset) }.map(\.challenge)
    }

    /// 0 for an algorithm this side does not compute; higher is stronger.
    static func digestStrength(_ c: HTTPAuthChallenge) -> Int {
        switch (c.parameters["algorithm"] ?? "MD5").uppercased() {
        case "SHA-512-256", "SHA-512-256-SESS": return 3
        case "SHA-256", "SHA-256-SESS": return 2
        case "MD5", "MD5-SESS": return 1
        default: return 0
        }
    }

    /// token68 (RFC 9110 §11.2): base64-ish characters, then only "=" padding.
    static func isToken68(_ text: String) -> Bool {
        let body = text.drop { c in c.isASCII && (c.isLetter || c.isNumber || "-._~+/".contains(c)) }
        return body.count < text.count && body.allSatisfy { $0 == "=" }
    }

    /// The items of a comma-separated list, commas inside quoted strings kept.
    public static func splitOutsideQuotes(_ value: String) -> [Substring] {
        var items: [Substring] = []
        var start = value.startIndex, i = value.startIndex
        var quoted = false, escaped = false
        while i < value.endIndex {
            let c = value[i]
            if escaped { escaped = false } else if quoted && c == "\\" { escaped = true } else if c == "\"" { quoted.toggle() } else if c == ",", !quoted {
                items.append(value[start..<i])
                start = value.index(after: i)
            }
            i = value.index(after: i)
        }
        items.append(value[start...])
        return items
    }

    /// `name=value` with the name in lower case and a quoted-string value unescaped.
    static func parameter(_ text: String) -> (String, String)? {
        guard let eq = text.firstIndex(of: "=") else { return nil }
        let name = text[..<eq].trimmingCharacters(in: .whitespaces).lowercased()
        guard !name.isEmpty, HTTPSyntax.isToken(name) else { return nil }
        let raw = text[text.index(after: eq)...].trimmingCharacters(in: .whitespaces)
        guard raw.hasPrefix("\"") else { return raw.isEmpty ? nil : (name, raw) }
        var out = "", escaped = false
        for c in raw.dropFirst() {
            if escaped { out.append(c); escaped = false } else if c == "\\" { escaped = true } else if c == "\"" { break } else { out.append(c) }
        }
        return (name, out)
    }
}
