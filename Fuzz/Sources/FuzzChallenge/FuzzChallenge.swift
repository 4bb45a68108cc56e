// WWW-Authenticate / Proxy-Authenticate as Porter reads a challenge: the scheme and the
// realm (HTTPHandler.parseChallenge in Sources/PorterHTTP/HTTPHandler.swift).
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials
@testable import PorterHTTP

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let header = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let (method, realm) = HTTPHandler.parseChallenge(header)
    if case .custom(let scheme) = method, scheme.contains(" ") { fatalError("a scheme with a space: \(scheme)") }
    if let realm { _ = realm.count }
    // A header value as libcurl hands it over has been trimmed; several challenges in one
    // field are separated by commas.
    for part in header.split(separator: ",") { _ = HTTPHandler.parseChallenge(String(part)) }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzChallenge_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
