// RFC 9111 as Porter applies it (Sources/PorterCore/HTTPCache.swift, HTTPDate.swift):
// Cache-Control, Age, Expires, Date, Last-Modified, validators and Range, through
// CacheControl, HTTPDate and every HTTPCacheRules function, on a response (and a
// request) built from fuzzed header fields; the stored body is the input itself.
//
// Input: the first two bytes are the status code (mod 600) and the offset of "now" from
// the stored date; then "Name: value" lines, for the response, or for the request when
// they start with ">".
import Foundation
import FuzzDriver
import HTTPTypes
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials

let url = URL(string: "https://example.com/a")!
let stored = Date(timeIntervalSince1970: 1_700_000_000)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard bytes.count >= 2 else { return 0 }
    let status = (Int(bytes[0]) << 8 | Int(bytes[1])) % 600
    let now = stored.addingTimeInterval(TimeInterval(Int(bytes[1]) * 3600 - 3600))
    var responseFields = HTTPFields()
    var requestFields = HTTPFields()
    var cacheControlValues: [String] = []
    let text = String(decoding: UnsafeBufferPointer(rebasing: bytes.dropFirst(2)), as: UTF8.self)
    for line in text.split(separator: "\n").prefix(1000) {
        var line = line
        let forRequest = line.hasPrefix(">")
        if forRequest { line = line.dropFirst() }
        guard let colon = line.firstIndex(of: ":"), let name = HTTPField.Name(String(line[..<colon])) else {
            cacheControlValues.append(String(line))
            continue
        }
        let field = HTTPField(name: name, value: String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
        if forRequest { requestFields.append(field) } else { responseFields.append(field) }
    }

    _ = CacheControl(cacheControlValues)
    _ = CacheControl(responseFields[values: .cacheControl])
    _ = HTTPCacheRules.httpDate(text)
    for field in responseFields { _ = HTTPDate.parse(field.value) }
    for value in cacheControlValues { _ = HTTPDate.parse(value) }

    let response = Response(url: url, mimeType: "text/plain", expectedContentLength: 0, statusCode: status,
                            headerFields: responseFields)
    let request = Request(url: url, headerFields: requestFields)
    _ = HTTPCacheRules.isStorable(request: request, response: response)
    let lifetime = HTTPCacheRules.freshnessLifetime(response)
    guard lifetime >= 0 else { fatalError("negative freshness lifetime \(lifetime)") }
    let age = HTTPCacheRules.currentAge(response, stored: stored, now: now)
    guard !(age < 0) else { fatalError("negative age \(age)") }
    if let age = HTTPCacheRules.ageHeader(response), age < 0 { fatalError("negative Age \(age)") }
    _ = HTTPCacheRules.storable(response)
    let body = Data(bytes)
    let cached = CachedResponse(response: response, data: body, storedDate: stored)
    _ = HTTPCacheRules.isFresh(cached, request: request, now: now)
    _ = HTTPCacheRules.mayServeWhileRevalidating(cached, request: request, now: now)
    _ = HTTPCacheRules.clientConditionMatches(request, response)
    if let (partial, data) = HTTPCacheRules.rangeAnswer(for: request, cached) {
        guard data.count <= body.count, partial.expectedContentLength == Int64(data.count) else {
            fatalError("a range answer of \(data.count) bytes from \(body.count)")
        }
    }
    _ = HTTPCacheRules.conditionalHeaders(for: cached)
    let served = HTTPCacheRules.serving(cached, now: now)
    guard served.headerFields[.age] != nil else { fatalError("served without an Age") }
    let merged = HTTPCacheRules.freshened(response, with: served)
    _ = HTTPCacheRules.freshnessLifetime(merged)

    // The cache itself, memory only: store, look up, serve.
    let cache = HTTPCache(memoryCapacity: 1 << 16)
    cache.storeCachedResponse(cached, for: request)
    if let hit = cache.cachedResponse(for: request) { _ = HTTPCacheRules.isFresh(hit, request: request, now: now) }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzHTTPCache_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
