import CPorterAuth
import Foundation
import PorterCore

/// The pure parts of answering a challenge in the opening handshake: Digest's response
/// (RFC 7616) and NTLM's messages (MS-NLMP, NTLMv2). No I/O: values in, header text out,
/// so the RFC's and Microsoft's published examples test them directly.
enum HandshakeAuthentication {
    /// A digest through libcrypto ("MD5", "SHA256", "SHA512-256"); nil when unavailable.
    static func digest(_ name: String, _ bytes: [UInt8]) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: 64)
        let n = bytes.withUnsafeBytes { porter_auth_digest(name, $0.baseAddress, $0.count, &out) }
        return n == 0 ? nil : Array(out[..<Int(n)])
    }

    static func hmacMD5(key: [UInt8], _ data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        let ok = key.withUnsafeBytes { k in data.withUnsafeBytes { d in porter_auth_hmac_md5(k.baseAddress, k.count, d.baseAddress, d.count, &out) } }
        return ok == 1 ? out : []
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] })
    }

    // MARK: - Digest (RFC 7616)

    /// Digest's answer to one challenge: the Authorization value, or nil when the
    /// challenge cannot be answered (no nonce, an unknown algorithm, a qop without "auth").
    struct Digest: Sendable {
        var realm: String
        var nonce: String
        var opaque: String?
        /// As the server wrote it ("MD5", "SHA-256-sess"), nil when absent (then MD5).
        var algorithm: String?
        var qopAuth: Bool
        var userhash: Bool
        var stale: Bool

        init?(_ challenge: HTTPAuthChallenge) {
            guard challenge.method == .httpDigest, let nonce = challenge.parameters["nonce"] else { return nil }
            // The realm, nonce and opaque go back in our request's Authorization line:
            // a control character in one (a lone CR or LF the head's parser let through)
            // would split it, so such a challenge is not answered.
            for value in [challenge.realm, nonce, challenge.parameters["opaque"]].compactMap({ $0 })
            where value.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
                return nil
            }
            self.realm = challenge.realm ?? ""
            self.nonce = nonce
            self.opaque = challenge.parameters["opaque"]
            self.algorithm = challenge.parameters["algorithm"]
            if let qop = challenge.parameters["qop"] {
                let options = qop.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
                guard options.contains("auth") else { return nil }   // auth-int needs the body: none here
                qopAuth = true
            } else {
                qopAuth = false
            }
            userhash = challenge.parameters["userhash"]?.lowercased() == "true"
            stale = challenge.parameters["stale"]?.lowercased() == "true"
            guard hashName != nil else { return nil }
        }

        /// libcrypto's name of the algorithm's hash.
        var hashName: String? {
            switch base.uppercased() {
            case "MD5": return "MD5"
            case "SHA-256": return "SHA256"
            case "SHA-512-256": return "SHA512-256"
            default: return nil
            }
        }
        var session: Bool { (algorithm ?? "").uppercased().hasSuffix("-SESS") }
        private var base: String {
            let a = algorithm ?? "MD5"
            return session ? String(a.dropLast(5)) : a
        }

        func h(_ text: String) -> String? {
            guard let name = hashName, let d = HandshakeAuthentication.digest(name, Array(text.utf8)) else { return nil }
            return HandshakeAuthentication.hex(d)
        }

        /// The Authorization value for `method` `uri` (the request target as sent).
        func authorization(user: String, password: String, method: String, uri: String, cnonce: String,
                           nonceCount: Int) -> String? {
            let nc = String(format: "%08x", nonceCount)
            guard var ha1 = h("\(user):\(realm):\(password)"), let ha2 = h("\(method):\(uri)") else { return nil }
            if session { guard let s = h("\(ha1):\(nonce):\(cnonce)") else { return nil }; ha1 = s }
            let response = qopAuth ? h("\(ha1):\(nonce):\(nc):\(cnonce):auth:\(ha2)") : h("\(ha1):\(nonce):\(ha2)")
            guard let response else { return nil }
            func quoted(_ s: String) -> String {
                "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
            }
            let name: String
            if userhash {
                guard let hashed = h("\(user):\(realm)") else { return nil }
                name = hashed
            } else {
                name = user
            }
            var parts = ["username=\(quoted(name))", "realm=\(quoted(realm))", "uri=\(quoted(uri))"]
            if let algorithm { parts.append("algorithm=\(algorithm)") }
            parts.append("nonce=\(quoted(nonce))")
            if qopAuth { parts += ["nc=\(nc)", "cnonce=\(quoted(cnonce))", "qop=auth"] }
            parts.append("response=\(quoted(response))")
            if let opaque { parts.append("opaque=\(quoted(opaque))") }
            if userhash { parts.append("userhash=true") }
            return "Digest " + parts.joined(separator: ", ")
        }
    }

    // MARK: - NTLM (MS-NLMP, NTLMv2)

    enum NTLM {
        static let signature: [UInt8] = Array("NTLMSSP".utf8) + [0]
        // NEGOTIATE_UNICODE, REQUEST_TARGET, NEGOTIATE_NTLM, ALWAYS_SIGN,
        // EXTENDED_SESSIONSECURITY, NEGOTIATE_TARGET_INFO, 128, 56. No key exchange: HTTP
        // signs and seals nothing, so no session key travels.
        static let flags: UInt32 = 0x0000_0001 | 0x0000_0004 | 0x0000_0200 | 0x0000_8000 | 0x0008_0000
            | 0x0080_0000 | 0x2000_0000 | 0x8000_0000

        /// The type 1 (NEGOTIATE) message: no domain or workstation.
        static func negotiate() -> [UInt8] {
            signature + le32(1) + le32(flags) + [UInt8](repeating: 0, count: 16)
        }

        /// What a type 2 (CHALLENGE) message carries that the answer needs.
        struct Challenge: Sendable, Equatable {
            var flags: UInt32
            var serverChallenge: [UInt8]
            var targetInfo: [UInt8]
            /// MsvAvTimestamp of the target info, when present (FILETIME).
            var timestamp: [UInt8]?
        }

        /// Parses a type 2 message; nil when it is not one (bounds checked, never traps).
        static func parseChallenge(_ m: [UInt8]) -> Challenge? {
            guard m.count >= 32, Array(m[0..<8]) == signature, readLE32(m, 8) == 1 << 1 else { return nil }
            let flags = readLE32(m, 20)
            var info: [UInt8] = []
            if m.count >= 48 {
                let length = Int(readLE16(m, 40)), offset = Int(readLE32(m, 44))
                if length > 0 {
                    // Its length bounds the type 3 message's own 16-bit lengths (the NT
                    // response carries it with 48 bytes more).
                    guard offset <= m.count, length <= m.count - offset, length <= 65_000 else { return nil }
                    info = Array(m[offset..<(offset + length)])
                }
            }
            // AV pairs: id (2), length (2), value; MsvAvEOL (0) ends them.
            var timestamp: [UInt8]?
            var i = 0
            while i + 4 <= info.count {
                let id = readLE16(info, i), length = Int(readLE16(info, i + 2))
                guard id != 0, i + 4 + length <= info.count else { break }
                if id == 7, length == 8 { timestamp = Array(info[(i + 4)..<(i + 12)]) }
                i += 4 + length
            }
            return Challenge(flags: flags, serverChallenge: Array(m[24..<32]), targetInfo: info, timestamp: timestamp)
        }

        static func utf16le(_ s: String) -> [UInt8] { s.utf16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] } }

        /// NTOWFv2: HMAC-MD5 under MD4(password) of the upper-cased user and the domain.
        static func ntowfv2(user: String, password: String, domain: String) -> [UInt8] {
            hmacMD5(key: MD4.hash(utf16le(password)), utf16le(user.uppercased() + domain))
        }

        /// NTLMv2's responses: (NT response, LM response, session base key).
        static func responses(user: String, password: String, domain: String, serverChallenge: [UInt8], clientChallenge: [UInt8],
                              time: [UInt8], targetInfo: [UInt8]) -> (nt: [UInt8], lm: [UInt8], sessionBaseKey: [UInt8]) {
            let key = ntowfv2(user: user, password: password, domain: domain)
            let temp: [UInt8] = [1, 1, 0, 0, 0, 0, 0, 0] + time + clientChallenge + [0, 0, 0, 0] + targetInfo + [0, 0, 0, 0]
            let proof = hmacMD5(key: key, serverChallenge + temp)
            let lm = hmacMD5(key: key, serverChallenge + clientChallenge) + clientChallenge
            return (proof + temp, lm, hmacMD5(key: key, proof))
        }

        /// The type 3 (AUTHENTICATE) message answering `challenge`. `user` may be
        /// "DOMAIN\user" or "user@domain"; `time` is a FILETIME (little-endian 100 ns since
        /// 1601) used when the challenge carries no timestamp.
        static func authenticate(_ challenge: Challenge, user qualified: String, password: String, clientChallenge: [UInt8],
                                 time: [UInt8]) -> [UInt8] {
            var user = qualified, domain = ""
            if let slash = qualified.firstIndex(where: { $0 == "\\" || $0 == "/" }) {
                domain = String(qualified[..<slash])
                user = String(qualified[qualified.index(after: slash)...])
            }
            let r = responses(user: user, password: password, domain: domain, serverChallenge: challenge.serverChallenge,
                              clientChallenge: clientChallenge, time: challenge.timestamp ?? time, targetInfo: challenge.targetInfo)
            // With a server timestamp, MS-NLMP §3.1.5.1.2 asks for an empty (zero) LM response.
            let lm = challenge.timestamp == nil ? r.lm : [UInt8](repeating: 0, count: 24)
            let fields: [[UInt8]] = [lm, r.nt, utf16le(domain), utf16le(user), utf16le("")]
            let header = 64
            var out = signature + le32(3)
            var payload: [UInt8] = []
            for f in fields {
                let offset = header + payload.count
                out += le16(UInt16(truncatingIfNeeded: f.count)) + le16(UInt16(truncatingIfNeeded: f.count)) + le32(UInt32(offset))
                payload += f
            }
            // The encrypted session key: none (no key exchange).
            out += le16(0) + le16(0) + le32(UInt32(header + payload.count))
            out += le32(flags & challenge.flags | 0x0000_0001)
            return out + payload
        }

        static func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
        static func le32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8((v >> (8 * UInt32($0))) & 0xFF) } }
        static func readLE16(_ b: [UInt8], _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }
        static func readLE32(_ b: [UInt8], _ i: Int) -> UInt32 {
            UInt32(b[i]) | UInt32(b[i + 1]) << 8 | UInt32(b[i + 2]) << 16 | UInt32(b[i + 3]) << 24
        }

        /// Now as a FILETIME.
        static func fileTime(_ date: Date = Date()) -> [UInt8] {
            let ticks = UInt64(max(0, (date.timeIntervalSince1970 + 11_644_473_600) * 10_000_000))
            return (0..<8).map { UInt8((ticks >> (8 * UInt64($0))) & 0xFF) }
        }
    }
}
