// Netscape cookies.txt (Sources/PorterCore/Cookies/NetscapeCookieFile.swift), as the
// CLI's -b reads it and -c writes it back: parse, store, serialize, parse again.
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials

let now = Date(timeIntervalSince1970: 1_700_000_000)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let (cookies, _) = NetscapeCookieFile.parse(text, now: now)
    let store = MemoryCookieStore(clock: { now })
    for cookie in cookies {
        _ = cookie.description
        store.setCookie(cookie)
    }
    let written = NetscapeCookieFile.serialize(store.allCookies)
    let (again, skipped) = NetscapeCookieFile.parse(written, now: now)
    guard skipped == 0 else { fatalError("\(skipped) lines Porter wrote do not parse:\n\(written)") }
    guard again.count <= cookies.count else { fatalError("more cookies after a round trip") }
    for cookie in again {
        if let url = URL(string: "https://\(cookie.domain)\(cookie.path)") { _ = store.cookieHeader(for: url, mainDocumentURL: nil) }
    }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzNetscapeCookies_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
