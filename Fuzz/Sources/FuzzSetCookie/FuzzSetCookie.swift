// Set-Cookie (Sources/PorterCore/Cookies/Cookie.swift: CookieRules.parse, parseDate,
// Punycode through Domain=) and the storage model behind it (CookieStore.swift:
// MemoryCookieStore.storeCookies, then cookieHeader / cookies / allCookies).
//
// Input: the first byte picks the response URL, the main document URL and the accept
// policy; the rest is one Set-Cookie header value per line.
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials

let responseURLs = [
    "http://example.com/a/b/c", "https://example.com/", "https://www.sub.example.co.uk/x/y?z=1",
    "http://127.0.0.1:8080/p", "http://[::1]/v6/", "http://localhost/", "https://xn--bcher-kva.test/b",
    "https://github.io/",
].map { URL(string: $0)! }
let mainDocumentURLs: [URL?] = [nil, URL(string: "https://example.com/")!, URL(string: "https://other.test/")!]
let requestURLs = responseURLs + ["https://a.b.example.com/a/b/c/d", "http://example.com/", "https://co.uk/"]
    .map { URL(string: $0)! }
let start = Date(timeIntervalSince1970: 1_700_000_000)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard let selector = bytes.first else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(rebasing: bytes.dropFirst()), as: UTF8.self)
    let headers = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)

    for header in headers {
        if let parsed = CookieRules.parse(header) { _ = parsed.domain.map(Punycode.toASCII) }
        _ = CookieRules.parseDate(header)
    }

    // Small limits, so eviction runs too; a clock that moves a little on every call.
    let tick = Locked(0)
    let store = MemoryCookieStore(maximumPerDomain: 4, maximumTotal: 9) {
        start.addingTimeInterval(TimeInterval(tick.withLock { t -> Int in t += 37; return t }))
    }
    let policies: [CookieAcceptPolicy] = [.always, .onlyFromMainDocumentDomain, .always, .never]
    store.acceptPolicy = policies[Int(selector >> 6)]
    let url = responseURLs[Int(selector) % responseURLs.count]
    let main = mainDocumentURLs[Int(selector >> 3) % mainDocumentURLs.count]
    store.storeCookies(fromHeaders: headers, for: url, mainDocumentURL: main)
    store.storeCookies(fromHeaders: headers.reversed(), for: requestURLs[Int(selector >> 2) % requestURLs.count],
                       mainDocumentURL: nil)
    for request in requestURLs {
        if let header = store.cookieHeader(for: request, mainDocumentURL: main) {
            guard !header.isEmpty else { fatalError("an empty Cookie header") }
        }
        for cookie in store.cookies(for: request) {
            _ = cookie.description
            guard !cookie.domain.isEmpty else { fatalError("a stored cookie without a domain") }
        }
    }
    let all = store.allCookies
    guard all.count <= store.maximumTotal else { fatalError("\(all.count) cookies kept, limit \(store.maximumTotal)") }
    for cookie in all {
        _ = cookie.description
        store.deleteCookie(cookie)
    }
    guard store.allCookies.isEmpty else { fatalError("deleting every cookie left some") }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzSetCookie_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
