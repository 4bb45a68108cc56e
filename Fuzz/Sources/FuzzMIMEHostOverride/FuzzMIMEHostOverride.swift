// Two small parsers of user input: MIMEType(parsing:) (Sources/PorterCore/MIMEType.swift;
// also every Content-Type a server sends) and HostOverride(parsing:) (curl's --resolve
// syntax, Sources/PorterCore/SessionConfiguration.swift). What parses must print as text
// that parses to the same value.
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let mime = MIMEType(parsing: text) {
        _ = mime.essence
        _ = mime.parameter("charset")
        guard let again = MIMEType(parsing: mime.description) else { fatalError("\(mime) does not parse again") }
        guard again == mime else { fatalError("\(mime) parses again as \(again)") }
    }
    if let override = HostOverride(parsing: text) {
        guard (1...65535).contains(override.port), !override.addresses.isEmpty else { fatalError("\(override)") }
        guard let again = HostOverride(parsing: override.description) else { fatalError("\(override) does not parse again") }
        guard again == override else { fatalError("\(override) parses again as \(again)") }
    }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzMIMEHostOverride_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
