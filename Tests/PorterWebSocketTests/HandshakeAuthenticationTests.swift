import XCTest
import PorterCore
@testable import PorterWebSocket

/// The handshake's authentication without a network: the challenge parser, Digest's
/// response against RFC 7616's example, NTLMv2 against MS-NLMP's published values, MD4
/// against RFC 1320's test suite.
final class HandshakeAuthenticationTests: XCTestCase {
    private func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var it = hex.filter { !$0.isWhitespace }.makeIterator()
        while let a = it.next(), let b = it.next() { out.append(UInt8(String([a, b]), radix: 16)!) }
        return out
    }

    func testChallengeParametersAndToken68() {
        let all = HTTPAuthChallenge.parse([
            #"Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=SHA-256, nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#,
            #"Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=MD5, nonce="7ypf", opaque="FQhe""#,
            "NTLM TlRMTVNTUAACAAAA==", "Basic realm=\"a\\\"b\"",
        ])
        XCTAssertEqual(all.map(\.method), [.httpDigest, .httpDigest, .ntlm, .httpBasic])
        XCTAssertEqual(all[0].parameters["qop"], "auth, auth-int")
        XCTAssertEqual(all[0].parameters["algorithm"], "SHA-256")
        XCTAssertEqual(all[2].token68, "TlRMTVNTUAACAAAA==")
        XCTAssertEqual(all[3].realm, #"a"b"#)
        // Ranked: the strongest Digest (SHA-256 over MD5) stands for Digest, once.
        let ranked = HTTPAuthChallenge.strongestFirst([
            #"Basic realm="b""#, #"Digest realm="d", nonce="n", algorithm=MD5"#,
            #"Digest realm="d", nonce="n", algorithm=SHA-256"#, "Negotiate",
        ])
        XCTAssertEqual(ranked.map(\.method), [.negotiate, .httpDigest, .httpBasic])
        XCTAssertEqual(ranked[1].parameters["algorithm"], "SHA-256")
    }

    /// Found by FuzzChallenge: a field that starts inside a quoted string. The word before
    /// the first space is no token, so no challenge, and its parameters belong to nothing.
    func testJunkBeforeAChallengeIsNoChallenge() {
        let value = #"j9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS", stale=true, userhash=true"#
        XCTAssertEqual(HTTPAuthChallenge.parse([value]), [])
        let mixed = HTTPAuthChallenge.parse([#"x/y realm="a", rest="r", Basic realm="b""#, #"nonce="n""#])
        // Field lines combine into one list (RFC 9110 §5.3): the second line's parameter is Basic's.
        XCTAssertEqual(mixed, [HTTPAuthChallenge(scheme: "Basic", parameters: ["realm": "b", "nonce": "n"])])
    }

    /// RFC 7616 §3.9.1: the same request answered with SHA-256 and with MD5.
    func testDigestRFC7616Example() throws {
        for (algorithm, expected) in [("SHA-256", "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"),
                                      ("MD5", "8ca523f5e9506fed4657c9700eebdbec")] {
            let challenge = HTTPAuthChallenge.parse([
                #"Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=\#(algorithm), nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#,
            ])[0]
            let digest = try XCTUnwrap(HandshakeAuthentication.Digest(challenge))
            let value = try XCTUnwrap(digest.authorization(user: "Mufasa", password: "Circle of Life", method: "GET", uri: "/dir/index.html",
                                                           cnonce: "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", nonceCount: 1))
            XCTAssertTrue(value.contains(#"response="\#(expected)""#), value)
            XCTAssertTrue(value.contains("nc=00000001") && value.contains("qop=auth,") && value.contains(#"opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#), value)
            XCTAssertTrue(value.hasPrefix(#"Digest username="Mufasa", realm="http-auth@example.org", uri="/dir/index.html", algorithm=\#(algorithm)"#), value)
        }
    }

    /// A Digest challenge whose realm, nonce or opaque holds a control character is not
    /// answered: those values go back in the Authorization line, which a CR or LF would split.
    func testDigestWithAControlCharacterIsNotAnswered() {
        let bad: [[String: String]] = [["nonce": "a\rb"], ["nonce": "n", "opaque": "o\nX: y"], ["nonce": "n", "realm": "r\u{7F}"]]
        for parameters in bad {
            XCTAssertNil(HandshakeAuthentication.Digest(HTTPAuthChallenge(scheme: "Digest", parameters: parameters)), "\(parameters)")
        }
        let fine = HTTPAuthChallenge(scheme: "Digest", parameters: ["nonce": "n", "realm": "r", "opaque": "o"])
        XCTAssertNotNil(HandshakeAuthentication.Digest(fine))
    }

    /// A type 2 message whose target info would make the type 3's NT response longer than
    /// its 16-bit length can say is refused, not answered with a wrong length.
    func testNTLMTargetInfoTooLongForAType3IsRefused() {
        typealias N = HandshakeAuthentication.NTLM
        func message(infoLength: Int) -> [UInt8] {
            var m = Array("NTLMSSP\0".utf8) + [2, 0, 0, 0] + [UInt8](repeating: 0, count: 36)
            m[40] = UInt8(infoLength & 0xFF); m[41] = UInt8(infoLength >> 8)
            m[44] = 48
            return m + [UInt8](repeating: 1, count: infoLength)
        }
        XCTAssertNotNil(N.parseChallenge(message(infoLength: 1_000)))
        XCTAssertNil(N.parseChallenge(message(infoLength: 65_535)))
    }

    /// SHA-512-256 with userhash (RFC 7616 §3.9.2's request; its published hashes are under
    /// errata, so the expected values here were computed with Python's hashlib, another
    /// implementation), and MD5-sess (RFC 7616 §3.4.2's A1).
    func testDigestSHA512256UserhashAndSession() throws {
        let c = HTTPAuthChallenge.parse([
            #"Digest realm="api@example.org", qop="auth", algorithm=SHA-512-256, nonce="5TsQWLVdgBdmrQ0XsxbDODV+57QdFR34I9HAbC/RVvkK", opaque="HRPCssKJSGjCrkzDg8OhwpzCiGPChXYjwrI2QmXDnsOS", charset=UTF-8, userhash=true"#,
        ])[0]
        let d = try XCTUnwrap(HandshakeAuthentication.Digest(c))
        let v = try XCTUnwrap(d.authorization(user: "J\u{E4}s\u{F8}n Doe", password: "Secret, or not?", method: "GET", uri: "/doe.json",
                                              cnonce: "NTg6RKcb9boFIAS3KrFK9BGeh+iDa/sm6jUMp2wds69v", nonceCount: 1))
        XCTAssertTrue(v.contains(#"username="793263caabb707a56211940d90411ea4a575adeccb7e360aeb624ed06ece9b0b""#), v)
        XCTAssertTrue(v.contains(#"response="3798d4131c277846293534c3edc11bd8a5e4cdcbff78b05db9d95eeb1cec68a5""#), v)
        XCTAssertTrue(v.hasSuffix("userhash=true"), v)
        // MD5-sess: HA1 = MD5(MD5(user:realm:password):nonce:cnonce).
        let s = try XCTUnwrap(HandshakeAuthentication.Digest(HTTPAuthChallenge.parse([#"Digest realm="r", nonce="n", qop="auth", algorithm=MD5-sess"#])[0]))
        let sv = try XCTUnwrap(s.authorization(user: "u", password: "p", method: "GET", uri: "/", cnonce: "c", nonceCount: 2))
        XCTAssertTrue(sv.contains(#"response="4eb41d597405539b77a2117ca9cb090c""#) && sv.contains("nc=00000002"), sv)
        // Stale, and what cannot be answered: no nonce, auth-int only, an unknown algorithm.
        XCTAssertEqual(HandshakeAuthentication.Digest(HTTPAuthChallenge.parse([#"Digest realm="r", nonce="n", stale=TRUE"#])[0])?.stale, true)
        XCTAssertNil(HandshakeAuthentication.Digest(HTTPAuthChallenge.parse([#"Digest realm="r""#])[0]))
        XCTAssertNil(HandshakeAuthentication.Digest(HTTPAuthChallenge.parse([#"Digest realm="r", nonce="n", qop="auth-int""#])[0]))
        XCTAssertNil(HandshakeAuthentication.Digest(HTTPAuthChallenge.parse([#"Digest realm="r", nonce="n", algorithm=SHA-1"#])[0]))
    }

    /// RFC 1320 §A.5, and MS-NLMP §4.2.2.1.2 (NTOWFv1 is MD4 of the UTF-16 password).
    func testMD4() {
        XCTAssertEqual(HandshakeAuthentication.hex(MD4.hash([])), "31d6cfe0d16ae931b73c59d7e0c089c0")
        XCTAssertEqual(HandshakeAuthentication.hex(MD4.hash(Array("abc".utf8))), "a448017aaf21d8525fc10ae87aa6729d")
        XCTAssertEqual(HandshakeAuthentication.hex(MD4.hash(Array("12345678901234567890123456789012345678901234567890123456789012345678901234567890".utf8))),
                       "e33b4ddc9c38f2199c3e7b164fcc0536")
        XCTAssertEqual(HandshakeAuthentication.hex(MD4.hash(HandshakeAuthentication.NTLM.utf16le("Password"))), "a4f49c406510bdcab6824ee7c30fd852")
    }

    /// MS-NLMP §4.2.4 (NTLMv2 authentication): user "User", domain "Domain", password
    /// "Password", server challenge 0123456789abcdef, client challenge aa×8, time 0, and
    /// the target info of its CHALLENGE_MESSAGE.
    func testNTLMv2PublishedValues() throws {
        typealias N = HandshakeAuthentication.NTLM
        XCTAssertEqual(HandshakeAuthentication.hex(N.ntowfv2(user: "User", password: "Password", domain: "Domain")),
                       "0c868a403bfd7a93a3001ef22ef02e3f")
        let targetInfo = bytes("02000c0044006f006d00610069006e0001000c0053006500720076006500720000000000")
        let r = N.responses(user: "User", password: "Password", domain: "Domain", serverChallenge: bytes("0123456789abcdef"),
                            clientChallenge: bytes("aaaaaaaaaaaaaaaa"), time: [UInt8](repeating: 0, count: 8), targetInfo: targetInfo)
        XCTAssertEqual(HandshakeAuthentication.hex(Array(r.nt.prefix(16))), "68cd0ab851e51c96aabc927bebef6a1c")
        XCTAssertEqual(HandshakeAuthentication.hex(r.lm), "86c35097ac9cec102554764a57cccc19aaaaaaaaaaaaaaaa")
        XCTAssertEqual(HandshakeAuthentication.hex(r.sessionBaseKey), "8de40ccadbc14a82f15cb0ad0de95ca3")

        // The CHALLENGE_MESSAGE of §4.2.4.3 parses to the same values; a damaged one does not trap.
        let challengeMessage = bytes("""
            4e544c4d53535000020000000c000c003800000033828ae20123456789abcdef00000000000000002400240044000000
            060070170000000f53006500720076006500720002000c0044006f006d00610069006e0001000c00530065007200760065007200
            0000000000
            """)
        let parsed = try XCTUnwrap(N.parseChallenge(challengeMessage))
        XCTAssertEqual(parsed.serverChallenge, bytes("0123456789abcdef"))
        XCTAssertEqual(parsed.targetInfo, targetInfo)
        XCTAssertNil(parsed.timestamp)
        for cut in [0, 12, 31, 60] { XCTAssertNil(N.parseChallenge(Array(challengeMessage.prefix(cut))), "cut at \(cut)") }
        XCTAssertEqual(N.parseChallenge(Array(challengeMessage.prefix(47)))?.targetInfo, [])
        var lying = challengeMessage
        lying[40] = 0xFF  // target info longer than the message
        XCTAssertNil(N.parseChallenge(lying))
        // Found by FuzzChallenge: an empty target info whose offset lies past the end.
        var empty = challengeMessage
        empty[40] = 0
        empty[41] = 0
        empty[46] = 0x44
        XCTAssertEqual(N.parseChallenge(empty)?.targetInfo, [])

        // AUTHENTICATE: the fields where the header says they are.
        let m = N.authenticate(parsed, user: "Domain\\User", password: "Password", clientChallenge: bytes("aaaaaaaaaaaaaaaa"),
                               time: [UInt8](repeating: 0, count: 8))
        XCTAssertEqual(Array(m.prefix(12)), Array("NTLMSSP".utf8) + [0, 3, 0, 0, 0])
        func field(_ at: Int) -> [UInt8] {
            let length = Int(N.readLE16(m, at)), offset = Int(N.readLE32(m, at + 4))
            return Array(m[offset..<(offset + length)])
        }
        XCTAssertEqual(HandshakeAuthentication.hex(field(12)), "86c35097ac9cec102554764a57cccc19aaaaaaaaaaaaaaaa")
        XCTAssertEqual(HandshakeAuthentication.hex(Array(field(20).prefix(16))), "68cd0ab851e51c96aabc927bebef6a1c")
        XCTAssertEqual(field(28), N.utf16le("Domain"))
        XCTAssertEqual(field(36), N.utf16le("User"))
    }
}
