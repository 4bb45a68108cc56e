// .netrc (Sources/PorterCore/CredentialStore.swift: Netrc(parsing:), what
// Netrc(contentsOf:) runs on the file's text) and the look-up the CLI's -n makes.
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
    let netrc = Netrc(parsing: text)
    for entry in netrc.entries {
        if let machine = entry.machine, let credential = netrc.credential(for: machine) {
            guard credential.user != nil, credential.password != nil else { fatalError("a credential without its parts") }
        }
    }
    _ = netrc.credential(for: "example.com")
    _ = netrc.credential(for: "")
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzNetrc_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
