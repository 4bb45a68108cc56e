import Foundation
import HTTPTypes
@testable import PorterCore
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials
@testable import PorterStorage
@testable import PorterSession
import XCTest

/// RFC 9111 decisions, no I/O.
final class HTTPCacheTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_700_000_000)
    func response(_ status: Int = 200, _ fields: [(String, String)]) -> Response {
        var f = HTTPFields()
        for (n, v) in fields { f.append(HTTPField(name: HTTPField.Name(n)!, value: v)) }
        return Response(url: URL(string: "http://example.test/a")!, mimeType: "text/plain", expectedContentLength: 1,
                        statusCode: status, headerFields: f)
    }
    func get(_ fields: [(String, String)] = []) -> Request {
        var r = Request(url: URL(string: "http://example.test/a")!)
        for (n, v) in fields { _ = r.setValue(v, forHeader: n) }
        return r
    }
    func date(_ offset: TimeInterval) -> String { CookieRules.formatDate(now.addingTimeInterval(offset)) }

    /// Entries are served only within the partition (trust settings, address overrides)
    /// they were fetched under; entries stored without one are never served.
    func testEntriesStayInTheirTrustPartition() throws {
        var insecure = SessionConfiguration.ephemeral
        insecure.tlsVerificationDisabled = true
        var pinned = SessionConfiguration.ephemeral
        pinned.hostOverrides = [try XCTUnwrap(HostOverride(parsing: "example.test:80:127.0.0.1"))]
        var otherAddress = SessionConfiguration.ephemeral
        otherAddress.hostOverrides = [try XCTUnwrap(HostOverride(parsing: "example.test:80:127.0.0.2"))]
        let partitions = [SessionConfiguration.ephemeral.cachePartition, insecure.cachePartition, pinned.cachePartition,
                          otherAddress.cachePartition]
        XCTAssertEqual(Set(partitions).count, 4, "\(partitions)")
        XCTAssertEqual(partitions[0], "")

        let cache = HTTPCache()
        var weak = get()
        weak.cachePartition = insecure.cachePartition
        let r = response(200, [("Cache-Control", "max-age=600")])
        cache.storeCachedResponse(CachedResponse(response: r, data: Data("x".utf8), storagePolicy: .allowed), for: weak)
        XCTAssertNotNil(cache.cachedResponse(for: weak))
        XCTAssertNil(cache.cachedResponse(for: get()), "an entry fetched with -k answered a verifying load")
        var other = get()
        other.cachePartition = pinned.cachePartition
        XCTAssertNil(cache.cachedResponse(for: other))
    }

    /// RFC 9110 §5.6.7: the three HTTP-date forms, GMT only, the right weekday, nothing
    /// after; an Expires that is not one is in the past (RFC 9111 §5.3).
    func testHTTPDatesAndInvalidExpires() {
        let when = Date(timeIntervalSince1970: 784_111_777)   // Sun, 06 Nov 1994 08:49:37 GMT
        XCTAssertEqual(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT"), when)
        XCTAssertEqual(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT"), when)
        XCTAssertEqual(HTTPDate.parse("Sun Nov  6 08:49:37 1994"), when)
        for bad in ["Sun, 06 Nov 1994 08:49:37 PST", "Mon, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT junk",
                    "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT", "0", "-1", "", "tomorrow",
                    "Sun, 6 Nov 1994 08:49:37 GMT", "2026-11-23T20:00:00Z"] {
            XCTAssertNil(HTTPDate.parse(bad), bad)
        }
        // A future Expires in a zone other than GMT (the lenient cookie parser took it) is expired.
        let future = response(200, [("Date", date(0)), ("Expires", date(3600).replacingOccurrences(of: "GMT", with: "PST"))])
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(future), 0)
        let good = response(200, [("Date", date(0)), ("Expires", date(3600))])
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(good), 3600, accuracy: 1)
    }

    /// RFC 9111 §5.1: a list-valued Age counts by its first member; a value that is not a
    /// non-negative integer is ignored.
    func testAgeListsAndInvalidAges() {
        XCTAssertEqual(HTTPCacheRules.ageHeader(response(200, [("Age", "30, 60")])), 30)
        XCTAssertEqual(HTTPCacheRules.ageHeader(response(200, [("Age", "45"), ("Age", "90")])), 45)
        for bad in ["-5", "1e3", "12.5", "", "ten", " , 4"] {
            XCTAssertNil(HTTPCacheRules.ageHeader(response(200, [("Age", bad)])), bad)
        }
    }

    /// RFC 9111 §3.1: hop-by-hop fields, and those Connection names, are never stored.
    func testHopByHopFieldsAreNotStored() throws {
        let cache = HTTPCache()
        let r = response(200, [("Cache-Control", "max-age=600"), ("Connection", "X-Private-Hop, close"), ("X-Private-Hop", "1"),
                               ("Keep-Alive", "timeout=5"), ("Proxy-Authenticate", "Basic"), ("Upgrade", "h2c"),
                               ("Proxy-Connection", "keep-alive"), ("TE", "trailers"), ("X-Kept", "yes")])
        cache.storeCachedResponse(CachedResponse(response: r, data: Data("x".utf8)), for: get())
        let hit = try XCTUnwrap(cache.cachedResponse(for: get()))
        XCTAssertEqual(hit.response.headerFields.map { $0.name.canonicalName }.sorted(), ["cache-control", "x-kept"])
    }

    /// Pragma: no-cache means no-cache only when the request has no Cache-Control; a
    /// client's own validators that match get a 304 from the cache; a single Range is cut
    /// from a stored full response; stale-while-revalidate opens a window.
    func testRequestDirectivesAgainstAStoredResponse() throws {
        let stored = CachedResponse(response: response(200, [("Date", date(0)), ("Cache-Control", "max-age=60, stale-while-revalidate=30"),
                                                             ("ETag", "\"v1\""), ("Last-Modified", date(-3600))]),
                                    data: Data("0123456789".utf8), storagePolicy: .allowed, storedDate: now)
        XCTAssertFalse(HTTPCacheRules.isFresh(stored, request: get([("Pragma", "no-cache")]), now: now))
        XCTAssertTrue(HTTPCacheRules.isFresh(stored, request: get([("Pragma", "no-cache"), ("Cache-Control", "max-age=100")]), now: now))
        XCTAssertTrue(HTTPCacheRules.clientConditionMatches(get([("If-None-Match", "\"v0\", W/\"v1\"")]), stored.response))
        XCTAssertFalse(HTTPCacheRules.clientConditionMatches(get([("If-None-Match", "\"v2\"")]), stored.response))
        XCTAssertTrue(HTTPCacheRules.clientConditionMatches(get([("If-Modified-Since", date(0))]), stored.response))
        XCTAssertFalse(HTTPCacheRules.clientConditionMatches(get([("If-Modified-Since", date(-7200))]), stored.response))
        let (partial, body) = try XCTUnwrap(HTTPCacheRules.rangeAnswer(for: get([("Range", "bytes=2-5")]), stored))
        XCTAssertEqual(partial.statusCode, 206)
        XCTAssertEqual(partial.value(forHeader: "Content-Range"), "bytes 2-5/10")
        XCTAssertEqual(body, Data("2345".utf8))
        XCTAssertEqual(try XCTUnwrap(HTTPCacheRules.rangeAnswer(for: get([("Range", "bytes=-3")]), stored)).1, Data("789".utf8))
        XCTAssertEqual(try XCTUnwrap(HTTPCacheRules.rangeAnswer(for: get([("Range", "bytes=20-")]), stored)).0.statusCode, 416)
        XCTAssertNil(HTTPCacheRules.rangeAnswer(for: get([("Range", "bytes=0-1,4-5")]), stored))
        let later = now.addingTimeInterval(75)
        XCTAssertFalse(HTTPCacheRules.isFresh(stored, request: get(), now: later))
        XCTAssertTrue(HTTPCacheRules.mayServeWhileRevalidating(stored, request: get(), now: later))
        XCTAssertFalse(HTTPCacheRules.mayServeWhileRevalidating(stored, request: get(), now: now.addingTimeInterval(95)))
        XCTAssertFalse(HTTPCacheRules.mayServeWhileRevalidating(stored, request: get([("Cache-Control", "no-cache")]), now: later))
    }

    /// delta-seconds are ASCII digits: "½" or an Arabic-Indic digit is no max-age (it was
    /// clamped to 68 years of freshness), and a non-ASCII Max-Age is no cookie lifetime.
    func testOnlyASCIIDigitsAreSeconds() {
        XCTAssertNil(CacheControl(["max-age=½"]).maxAge)
        XCTAssertNil(CacheControl(["max-age=\u{0663}"]).maxAge)
        XCTAssertEqual(CacheControl(["max-age=30"]).maxAge, 30)
        XCTAssertNil(CookieRules.parse("a=b; Max-Age=\u{0663}0")?.maxAge)
        XCTAssertEqual(CookieRules.parse("a=b; Max-Age=30")?.maxAge, 30)
    }

    func testCacheControlParsing() {
        let cc = CacheControl(["max-age=60, no-cache", "Must-Revalidate, private=\"Set-Cookie\", s-maxage=\"10\", immutable, max-age=bad"])
        XCTAssertEqual(cc.maxAge, 60, "a malformed later max-age is ignored")
        XCTAssertTrue(cc.noCache && cc.mustRevalidate && cc.isPrivate && cc.immutable)
        XCTAssertEqual(cc.sharedMaxAge, 10)
        XCTAssertEqual(CacheControl(["max-stale"]).maxStale, Int(Int32.max))
        XCTAssertNil(CacheControl(["max-age=-5"]).maxAge)
    }

    func testStorability() {
        XCTAssertTrue(HTTPCacheRules.isStorable(request: get(), response: response(200, [])))
        XCTAssertTrue(HTTPCacheRules.isStorable(request: get(), response: response(404, [])), "cacheable by default")
        XCTAssertFalse(HTTPCacheRules.isStorable(request: get(), response: response(500, [])))
        XCTAssertTrue(HTTPCacheRules.isStorable(request: get(), response: response(500, [("Cache-Control", "max-age=5")])))
        XCTAssertFalse(HTTPCacheRules.isStorable(request: get(), response: response(200, [("Cache-Control", "no-store")])))
        XCTAssertFalse(HTTPCacheRules.isStorable(request: get([("Cache-Control", "no-store")]), response: response(200, [])))
        XCTAssertTrue(HTTPCacheRules.isStorable(request: get(), response: response(200, [("Cache-Control", "private, max-age=5")])),
                      "a private cache stores private responses")
        XCTAssertFalse(HTTPCacheRules.isStorable(request: get(), response: response(200, [("Vary", "*")])))
        XCTAssertFalse(HTTPCacheRules.isStorable(request: get(), response: response(206, [])))
        var post = get(); post.method = "POST"
        XCTAssertFalse(HTTPCacheRules.isStorable(request: post, response: response(200, [("Cache-Control", "max-age=60")])))
    }

    func testFreshnessLifetime() {
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(response(200, [("Cache-Control", "max-age=60"), ("Expires", date(3600))])), 60,
                       "max-age wins over Expires")
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(response(200, [("Date", date(0)), ("Expires", date(120))])), 120)
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(response(200, [("Date", date(0)), ("Expires", "0")])), 0, "invalid Expires: stale")
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(response(200, [("Date", date(0)), ("Last-Modified", date(-1000))])), 100,
                       "heuristic: 10% of the time since Last-Modified")
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(response(500, [("Date", date(0)), ("Last-Modified", date(-1000))])), 0,
                       "no heuristic for a status that is not cacheable by default")
    }

    func testAgeAndFreshness() {
        let r = response(200, [("Cache-Control", "max-age=60"), ("Date", date(-10)), ("Age", "5")])
        XCTAssertEqual(HTTPCacheRules.currentAge(r, stored: now, now: now.addingTimeInterval(20)), 30, "max(apparent 10, Age 5) + 20 resident")
        let cached = CachedResponse(response: r, data: Data("x".utf8), storedDate: now)
        XCTAssertTrue(HTTPCacheRules.isFresh(cached, request: get(), now: now.addingTimeInterval(40)))
        XCTAssertFalse(HTTPCacheRules.isFresh(cached, request: get(), now: now.addingTimeInterval(55)))
        XCTAssertFalse(HTTPCacheRules.isFresh(cached, request: get([("Cache-Control", "max-age=5")]), now: now), "the request's max-age")
        XCTAssertFalse(HTTPCacheRules.isFresh(cached, request: get([("Cache-Control", "min-fresh=55")]), now: now))
        XCTAssertTrue(HTTPCacheRules.isFresh(cached, request: get([("Cache-Control", "max-stale=100")]), now: now.addingTimeInterval(100)))
        let must = CachedResponse(response: response(200, [("Cache-Control", "max-age=1, must-revalidate")]), data: Data(), storedDate: now)
        XCTAssertFalse(HTTPCacheRules.isFresh(must, request: get([("Cache-Control", "max-stale=100")]), now: now.addingTimeInterval(5)),
                       "must-revalidate forbids serving stale")
        let noCache = CachedResponse(response: response(200, [("Cache-Control", "max-age=600, no-cache")]), data: Data(), storedDate: now)
        XCTAssertFalse(HTTPCacheRules.isFresh(noCache, request: get(), now: now))
        XCTAssertEqual(HTTPCacheRules.serving(cached, now: now.addingTimeInterval(20)).value(forHeader: "Age"), "30")
    }

    /// Found by Fuzz/FuzzHTTPCache: an Age past Int's range (or a date that far back)
    /// trapped converting the current age for the served response; RFC 9111 §1.2.2 caps
    /// it at 2^31. Also a cookie-date token of 20+ digits in Last-Modified (it overflowed).
    func testHugeAgeIsServedAsTwoToTheThirtyFirst() {
        let huge = CachedResponse(response: response(200, [("Age", "99922222222222222222229999999")]), data: Data(), storedDate: now)
        XCTAssertEqual(HTTPCacheRules.serving(huge, now: now).value(forHeader: "Age"), "2147483648")
        XCTAssertFalse(HTTPCacheRules.isFresh(huge, request: get(), now: now))
        // Not non-negative integers: ignored (RFC 9111 §5.1), never a trap.
        for age in ["1e400", "inf"] {
            let cached = CachedResponse(response: response(200, [("Age", age)]), data: Data(), storedDate: now)
            XCTAssertEqual(HTTPCacheRules.serving(cached, now: now).value(forHeader: "Age"), "0", age)
        }
        let digits = response(301, [("Last-Modified", "Sun, \(String(repeating: "5", count: 40)) Nov 1994 08:49:37 GMT")])
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(digits), 0)
    }

    func testRevalidationHelpers() {
        let stored = response(200, [("ETag", "\"v1\""), ("Last-Modified", date(-100)), ("Cache-Control", "max-age=1"), ("X-Old", "1")])
        let headers = HTTPCacheRules.conditionalHeaders(for: CachedResponse(response: stored, data: Data()))
        XCTAssertEqual(headers.map(\.0), ["If-None-Match", "If-Modified-Since"])
        let merged = HTTPCacheRules.freshened(stored, with: response(304, [("Cache-Control", "max-age=60"), ("Content-Length", "0")]))
        XCTAssertEqual(merged.value(forHeader: "Cache-Control"), "max-age=60", "the 304's fields replace the stored ones")
        XCTAssertEqual(merged.value(forHeader: "X-Old"), "1")
        XCTAssertNil(merged.headerFields[values: .contentLength].first { $0 == "0" }, "framing fields are not taken from a 304")
    }

    func testVaryAndHEADAndEviction() {
        let cache = HTTPCache(memoryCapacity: 64 << 10)
        let vary = response(200, [("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")])
        cache.storeCachedResponse(CachedResponse(response: vary, data: Data("en".utf8)), for: get([("Accept-Language", "en")]))
        cache.storeCachedResponse(CachedResponse(response: vary, data: Data("fr".utf8)), for: get([("Accept-Language", "fr")]))
        XCTAssertEqual(cache.cachedResponse(for: get([("Accept-Language", "fr")]))?.data, Data("fr".utf8))
        XCTAssertEqual(cache.cachedResponse(for: get([("Accept-Language", "en")]))?.data, Data("en".utf8))
        XCTAssertNil(cache.cachedResponse(for: get()), "no Accept-Language: another variant")
        var head = get([("Accept-Language", "en")]); head.method = "HEAD"
        XCTAssertEqual(cache.cachedResponse(for: head)?.data, Data("en".utf8), "HEAD is answered from the stored GET")
        cache.storeCachedResponse(CachedResponse(response: response(200, [("Cache-Control", "no-store")]), data: Data()), for: get())
        XCTAssertEqual(cache.count, 2, "no-store is not stored")
        // Eviction: the least recently used goes first.
        for i in 0..<10 {
            var r = Request(url: URL(string: "http://example.test/big\(i)")!)
            r.method = "GET"
            cache.storeCachedResponse(CachedResponse(response: response(200, [("Cache-Control", "max-age=60")]),
                                                     data: Data(count: 10 << 10)), for: r)
        }
        XCTAssertLessThanOrEqual(cache.currentMemoryUsage, 64 << 10)
        XCTAssertNil(cache.cachedResponse(for: Request(url: URL(string: "http://example.test/big0")!)))
        XCTAssertNotNil(cache.cachedResponse(for: Request(url: URL(string: "http://example.test/big9")!)))
        cache.removeCachedResponse(for: Request(url: URL(string: "http://example.test/big9")!))
        XCTAssertNil(cache.cachedResponse(for: Request(url: URL(string: "http://example.test/big9")!)))
    }
}
