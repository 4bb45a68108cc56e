// WWW-Authenticate / Proxy-Authenticate as Porter reads a challenge: PorterCore's one
// parser (HTTPAuthChallenge: schemes, parameters, token68, the ranking the http handler
// and the WebSocket handshake use), and what the handshake makes of a challenge: a
// Digest answer (RFC 7616), an NTLM type 2 message inside a token68 and the type 3
// answering it.
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials
@testable import PorterHTTP
@testable import PorterWebSocket

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let header = String(decoding: bytes, as: UTF8.self)
    let (method, realm) = HTTPHandler.parseChallenge(header)
    if case .custom(let scheme) = method, scheme.contains(" ") { fatalError("a scheme with a space: \(scheme)") }
    if let realm { _ = realm.count }
    // Several fields: each line a field value.
    let fields = header.split(separator: "\n").map(String.init)
    let ranked = HTTPAuthChallenge.strongestFirst(fields)
    if Set(ranked.map(\.method)).count != ranked.count { fatalError("a scheme twice in the ranking") }
    for challenge in HTTPAuthChallenge.parse(fields) {
        if challenge.scheme.contains(where: { $0 == " " || $0 == "," }) { fatalError("a scheme with a separator: \(challenge.scheme)") }
        if let digest = HandshakeAuthentication.Digest(challenge) {
            _ = digest.authorization(user: "u", password: "p", method: "GET", uri: "/", cnonce: "c", nonceCount: 1)
        }
        if let token = challenge.token68, let decoded = Data(base64Encoded: token),
           let type2 = HandshakeAuthentication.NTLM.parseChallenge([UInt8](decoded)) {
            _ = HandshakeAuthentication.NTLM.authenticate(type2, user: "D\\u", password: "p", clientChallenge: [UInt8](repeating: 1, count: 8),
                                                          time: [UInt8](repeating: 0, count: 8))
        }
    }
    // The raw bytes as an NTLM message too (a decoded token68 is arbitrary bytes).
    if let type2 = HandshakeAuthentication.NTLM.parseChallenge(bytes) {
        _ = HandshakeAuthentication.NTLM.authenticate(type2, user: "u", password: "p", clientChallenge: [UInt8](repeating: 1, count: 8),
                                                      time: [UInt8](repeating: 0, count: 8))
    }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzChallenge_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
