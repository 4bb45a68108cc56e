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

    /// RFC 9110 §5.6.7 read as RFC 9111 §4.2 asks of caches: the three HTTP-date forms,
    /// names of days and months and the zone in any case, asctime's space-padded day, a
    /// day name that is not that date's (browsers do not check it either); GMT only,
    /// nothing after, the exact spacing; an Expires that is not one is in the past.
    func testHTTPDatesAndInvalidExpires() {
        let when = Date(timeIntervalSince1970: 784_111_777)   // Sun, 06 Nov 1994 08:49:37 GMT
        for good in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
                     "Sun Nov 06 08:49:37 1994", "SUN, 06 NOV 1994 08:49:37 gmt", "sunday, 06-nov-94 08:49:37 Gmt",
                     "sUN nOV  6 08:49:37 1994", "Mon, 06 Nov 1994 08:49:37 GMT", " Sun, 06 Nov 1994 08:49:37 GMT\t"] {
            XCTAssertEqual(HTTPDate.parse(good), when, good)
        }
        XCTAssertEqual(HTTPDate.parse("Thursday, 18-Aug-50 02:01:18 GMT"), HTTPDate.parse("Thu, 18 Aug 2050 02:01:18 GMT"),
                       "a two-digit year within 50 years ahead is this century's")
        for bad in ["Sun, 06 Nov 1994 08:49:37 PST", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Nov 1994 08:49:37 GMT junk",
                    "Sun, 31 Feb 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT", "0", "-1", "", "tomorrow",
                    "Sun, 6 Nov 1994 08:49:37 GMT", "2026-11-23T20:00:00Z", "Sun, 06 Nov 94 08:49:37 GMT",
                    "Sun 06 Nov 1994 08:49:37 GMT", "Sun, 06  Nov  1994 08:49:37 GMT", "Sun, 06-Nov-1994 08:49:37 GMT",
                    "Sun, 06 Nov 1994 08.49.37 GMT", "Sun, 06 Nov 1994 8:49:37 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT",
                    "Sun Nov 6 08:49:37 1994", "Sun, 06 Nox 1994 08:49:37 GMT", "Sondag, 06-Nov-94 08:49:37 GMT",
                    "Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:38 GMT"] {
            XCTAssertNil(HTTPDate.parse(bad), bad)
        }
        // A Date or Last-Modified that is not an HTTP-date counts as absent (the lenient
        // cookie parser read "06 Nov 1994" before): no heuristic freshness from it.
        let odd = response(200, [("Date", date(0)), ("Last-Modified", "1994-11-06")])
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(odd), 0)
        // A future Expires in a zone other than GMT (the lenient cookie parser took it) is expired.
        let future = response(200, [("Date", date(0)), ("Expires", date(3600).replacingOccurrences(of: "GMT", with: "PST"))])
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(future), 0)
        let good = response(200, [("Date", date(0)), ("Expires", date(3600))])
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(good), 3600, accuracy: 1)
    }

    /// HTTP-dates become instants by arithmetic, not through Calendar: every day of
    /// years around the leap rules (1600, 1700, 1900, 2000, 2024, 2100, 9999), month ends
    /// and impossible days (31 Apr, 29 Feb 1900, 30 Feb 2000) give what Foundation's
    /// Gregorian calendar in GMT gives; years before the Julian cut-over go to it.
    func testHTTPDateArithmeticAgreesWithTheCalendar() {
        for year in [1583, 1600, 1700, 1899, 1900, 1970, 1999, 2000, 2023, 2024, 2038, 2100, 2400, 9999] {
            for month in 1...12 {
                for day in [1, 15, 28, 29, 30, 31] {
                    let (h, m, sec) = (day % 24, (day * 7) % 60, (month * 5) % 60)
                    XCTAssertEqual(HTTPDate.date(year: year, month: month, day: day, hour: h, minute: m, second: sec),
                                   HTTPDate.calendarDate(year: year, month: month, day: day, hour: h, minute: m, second: sec),
                                   "\(year)-\(month)-\(day)")
                }
            }
        }
        XCTAssertNil(HTTPDate.parse("Thu, 29 Feb 1900 00:00:00 GMT"))
        XCTAssertNotNil(HTTPDate.parse("Tue, 29 Feb 2000 00:00:00 GMT"))
        XCTAssertEqual(HTTPDate.parse("Thu, 01 Jan 1970 00:00:00 GMT"), Date(timeIntervalSince1970: 0))
        XCTAssertEqual(HTTPDate.parse("Fri, 31 Dec 9999 23:59:59 GMT"), Date(timeIntervalSince1970: 253_402_300_799))
        XCTAssertEqual(HTTPDate.parse("Sat, 01 Jan 1000 00:00:00 GMT"),
                       HTTPDate.calendarDate(year: 1000, month: 1, day: 1, hour: 0, minute: 0, second: 0))
        XCTAssertEqual(HTTPDate.parse("Sun, 06 Nov 1994 08:49:60 GMT"), HTTPDate.parse("Sun, 06 Nov 1994 08:49:59 GMT"),
                       "a leap second is read as :59")
    }

    /// Cache-Control values in ASCII are read byte by byte; what they mean must be what
    /// the reading as Unicode text gives: quoting, "=" before a name, a second "=",
    /// white space (space and tab) around names and arguments, case, empty members,
    /// huge and malformed numbers; and a few thousand values made of those pieces.
    func testCacheControlByteReadingAgreesWithTheTextReading() {
        let fixed = ["max-age=600", "MAX-AGE=600", " max-age = 600 ", "max-age=\"600\"", "max-age=\"", "max-age=\"\"",
                     "=max-age=5", "==max-age=5", "max-age==5", "max-age=", "max-age", "max-age=5x", "max-age=-5",
                     "max-age=99999999999999999999999", "max-age=0005", "\tno-cache\t", "no-cache=\"set-cookie\"",
                     ",,,", "", " ", "=", "private, max-age=10, s-maxage=20", "max-stale", "max-stale=7", "max-stale=x",
                     "min-fresh=3", "proxy-revalidate", "must-understand, no-store", "stale-while-revalidate=30",
                     "only-if-cached", "immutable, public", "max-age=1,max-age=2", "max-age=\" 6\"", "max-age=6 7",
                     "no-store\r\n", "max-age=1\u{0B}", "\u{0C}max-age=1"]
        for value in fixed {
            XCTAssertEqual(CacheControl([value]), CacheControl(text: [value]), value.debugDescription)
        }
        let pieces = ["max-age", "s-maxage", "max-stale", "min-fresh", "no-store", "no-cache", "private", "Public",
                      "must-revalidate", "stale-while-revalidate", "x-other", "=", ",", " ", "\t", "\"", "5", "600",
                      "-1", "99999999999999999999", "a", "MAX-AGE", "\r\n"]
        var seed: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next(_ n: Int) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((seed >> 33) % UInt64(n))
        }
        for _ in 0..<5_000 {
            let value = (0..<(1 + next(8))).map { _ in pieces[next(pieces.count)] }.joined()
            XCTAssertEqual(CacheControl([value]), CacheControl(text: [value]), value.debugDescription)
        }
        // Not ASCII: the text reading (a no-break space is white space there).
        XCTAssertEqual(CacheControl(["\u{A0}max-age=7"]).maxAge, 7)
        XCTAssertNil(CacheControl(["max-age=\u{0663}"]).maxAge)
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

    /// RFC 9111 §3 and §5.2.2.3, RFC 9110 §9.3.3: what may be stored.
    func testStorabilityOfStatusesPOSTAndParts() {
        func storable(_ status: Int, _ fields: [(String, String)], method: String = "GET", request: [(String, String)] = []) -> Bool {
            var r = get(request)
            r.method = method
            return HTTPCacheRules.isStorable(request: r, response: response(status, fields))
        }
        for status in [299, 499, 500, 503, 599] {
            XCTAssertTrue(storable(status, [("Cache-Control", "max-age=60")]), "\(status) with max-age")
            XCTAssertTrue(storable(status, [("Expires", date(60))]), "\(status) with Expires")
            XCTAssertFalse(storable(status, []), "\(status) without explicit freshness")
        }
        XCTAssertTrue(storable(599, [("Cache-Control", "public")]), "public makes any status storable")
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(response(599, [("Cache-Control", "public"), ("Date", date(0)),
                                                                      ("Last-Modified", date(-1000))])), 100, accuracy: 1,
                       "and heuristically fresh (RFC 9111 §4.2.2)")
        XCTAssertEqual(HTTPCacheRules.freshnessLifetime(response(599, [("Date", date(0)), ("Last-Modified", date(-1000))])), 0)
        XCTAssertFalse(storable(100, [("Cache-Control", "max-age=60")]), "not final")
        XCTAssertFalse(storable(600, [("Cache-Control", "max-age=60")]), "not a status")
        XCTAssertFalse(storable(304, [("Cache-Control", "max-age=60")]))
        XCTAssertTrue(storable(200, [("Cache-Control", "max-age=60, no-store, must-understand")]))
        XCTAssertFalse(storable(599, [("Cache-Control", "max-age=60, no-store, must-understand")]))
        XCTAssertFalse(storable(299, [("Cache-Control", "max-age=60, must-understand")]), "must-understand alone refuses unknown codes")
        XCTAssertFalse(storable(200, [("Cache-Control", "max-age=60, no-store")]))
        XCTAssertFalse(storable(200, [("Cache-Control", "max-age=60, must-understand")], request: [("Cache-Control", "no-store")]),
                       "the request's no-store still holds")
        // POST: explicit freshness and Content-Location naming the request URI.
        XCTAssertTrue(storable(200, [("Cache-Control", "max-age=60"), ("Content-Location", "/a")], method: "POST"))
        XCTAssertTrue(storable(200, [("Expires", date(60)), ("Content-Location", "http://example.test/a")], method: "POST"))
        XCTAssertFalse(storable(200, [("Cache-Control", "max-age=60")], method: "POST"))
        XCTAssertFalse(storable(200, [("Content-Location", "/a"), ("Last-Modified", date(-3600))], method: "POST"))
        XCTAssertFalse(storable(200, [("Cache-Control", "max-age=60"), ("Content-Location", "/b")], method: "POST"))
        XCTAssertFalse(storable(200, [("Cache-Control", "max-age=60"), ("Content-Location", "http://other.test/a")], method: "POST"))
        XCTAssertFalse(storable(200, [("Cache-Control", "max-age=60"), ("Content-Location", "/a")], method: "PUT"))
        // 206: one byte range with a known length, not content-coded.
        XCTAssertTrue(storable(206, [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-4/10")]))
        XCTAssertFalse(storable(206, [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-4/*")]))
        XCTAssertFalse(storable(206, [("Cache-Control", "max-age=60"), ("Content-Type", "multipart/byteranges; boundary=x")]))
        XCTAssertFalse(storable(206, [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-4/10"), ("Content-Encoding", "gzip")]))
        XCTAssertFalse(storable(206, [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 5-4/10")]))
        XCTAssertFalse(storable(206, [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-10/10")]))
    }

    /// RFC 9111 §4.1: the normalised values Vary compares.
    func testVaryValuesAreNormalised() {
        let v = HTTPCacheRules.varyValue
        XCTAssertEqual(v("accept-language", ["en, de"]), v("accept-language", ["de, en"]))
        XCTAssertEqual(v("accept-language", ["en, de"]), v("accept-language", ["eN, De"]))
        XCTAssertEqual(v("accept-language", ["en, de"]), v("accept-language", [" en ,   de"]))
        XCTAssertEqual(v("accept-language", ["en;q=0.5, de"]), v("accept-language", ["DE", "EN ; q = 0.5"]))
        XCTAssertNotEqual(v("accept-language", ["en, de"]), v("accept-language", ["en, fr"]))
        XCTAssertNotEqual(v("accept-language", ["en;q=0.5, de"]), v("accept-language", ["en, de;q=0.5"]))
        XCTAssertEqual(v("accept-encoding", ["gzip, br"]), v("accept-encoding", ["BR,gzip"]))
        XCTAssertEqual(v("foo", ["1,2"]), v("foo", [" 1, 2 "]))
        XCTAssertEqual(v("foo", ["1, 2"]), v("foo", ["1", "2"]))
        XCTAssertNotEqual(v("foo", ["1, 2"]), v("foo", ["2, 1"]), "an unknown field's order may mean something")
        XCTAssertNotEqual(v("foo", ["A"]), v("foo", ["a"]), "and its case")
        XCTAssertEqual(v("foo", ["\"a, b\", c"]), "\"a, b\",c", "a quoted comma is no separator")
        XCTAssertEqual(v("foo", []), "")
        XCTAssertEqual(v("foo", [" , "]), "")

        let cache = HTTPCache()
        let vary = response(200, [("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")])
        cache.storeCachedResponse(CachedResponse(response: vary, data: Data("x".utf8)), for: get([("Accept-Language", "en, de")]))
        XCTAssertNotNil(cache.cachedResponse(for: get([("Accept-Language", "DE,EN")])))
        XCTAssertNil(cache.cachedResponse(for: get([("Accept-Language", "fr")])))
    }

    /// RFC 9111 §3.3-3.4: parts are stored, answer ranges inside them, combine when they
    /// share a strong validator and touch, and are completed with Range + If-Range.
    func testPartsAreStoredCombinedAndCompleted() throws {
        func part(_ range: String, _ body: String, _ fields: [(String, String)] = [("ETag", "\"v1\"")]) -> CachedResponse {
            CachedResponse(response: response(206, [("Date", date(0)), ("Cache-Control", "max-age=60"), ("Content-Range", range)] + fields),
                           data: Data(body.utf8), storagePolicy: .allowed, storedDate: now)
        }
        XCTAssertEqual(HTTPCacheRules.contentRange(response(206, [("Content-Range", "bytes 4-9/10")])),
                       HTTPCacheRules.ByteRange(first: 4, last: 9, total: 10))
        for bad in ["bytes 4-3/10", "bytes 4-10/10", "bytes */10", "items 0-1/2", "bytes 0-1", "bytes -1-2/3", "bytes 0-99999999999999999999/1"] {
            XCTAssertNil(HTTPCacheRules.contentRange(response(206, [("Content-Range", bad)])), bad)
        }
        // Ranges inside a stored part come from it; others do not.
        let head = part("bytes 4-9/10", "456789")
        func range(_ r: String, _ c: CachedResponse) -> String? {
            HTTPCacheRules.rangeAnswer(for: get([("Range", r)]), c).map { String(decoding: $0.1, as: UTF8.self) }
        }
        XCTAssertEqual(range("bytes=6-8", head), "678")
        XCTAssertEqual(range("bytes=6-", head), "6789")
        XCTAssertEqual(range("bytes=-1", head), "9")
        XCTAssertNil(range("bytes=0-4", head))
        XCTAssertNil(range("bytes=3-5", head))
        XCTAssertEqual(HTTPCacheRules.rangeAnswer(for: get([("Range", "bytes=10-")]), head)?.0.statusCode, 416)
        XCTAssertNil(HTTPCacheRules.storedAnswer(for: get(), head), "a part never answers a plain GET")
        XCTAssertEqual(HTTPCacheRules.storedAnswer(for: get([("Range", "bytes=5-6")]), head).map { String(decoding: $0.data, as: UTF8.self) }, "56")
        XCTAssertNil(range("bytes=0-1", part("bytes 0-4/10", "0123")), "a part whose body is not its range holds nothing")

        // Combining.
        let first = part("bytes 0-4/10", "01234")
        let whole = try XCTUnwrap(HTTPCacheRules.combine(stored: first, with: part("bytes 5-9/10", "56789")))
        XCTAssertEqual(whole.response.statusCode, 200)
        XCTAssertEqual(String(decoding: whole.data, as: UTF8.self), "0123456789")
        XCTAssertNil(whole.response.value(forHeader: "Content-Range"))
        XCTAssertEqual(whole.response.value(forHeader: "Content-Length"), "10")
        let grown = try XCTUnwrap(HTTPCacheRules.combine(stored: first, with: part("bytes 3-6/10", "3456")))
        XCTAssertEqual(grown.response.value(forHeader: "Content-Range"), "bytes 0-6/10")
        XCTAssertEqual(String(decoding: grown.data, as: UTF8.self), "0123456")
        let apart = part("bytes 7-9/10", "789")
        XCTAssertEqual(HTTPCacheRules.combine(stored: first, with: apart)?.response.value(forHeader: "Content-Range"), "bytes 7-9/10",
                       "a part that does not touch replaces the stored one")
        let other = part("bytes 5-9/10", "XXXXX", [("ETag", "\"v2\"")])
        XCTAssertEqual(HTTPCacheRules.combine(stored: first, with: other)?.data, Data("XXXXX".utf8), "another representation replaces")
        let weak = part("bytes 5-9/10", "56789", [("ETag", "W/\"v1\"")])
        XCTAssertEqual(HTTPCacheRules.combine(stored: part("bytes 0-4/10", "01234", [("ETag", "W/\"v1\"")]), with: weak)?.response.statusCode,
                       206, "weak validators never combine")
        XCTAssertEqual(HTTPCacheRules.combine(stored: first, with: part("bytes 5-9/11", "56789"))?.response.statusCode, 206,
                       "another length is another representation")
        XCTAssertNil(HTTPCacheRules.combine(stored: whole, with: first), "a stored whole of the same representation stays")
        // Combining stops at maximumBodyBytes: the new part stays alone.
        let size = HTTPCacheRules.maximumBodyBytes
        let big = CachedResponse(response: response(206, [("Content-Range", "bytes 0-\(size - 1)/\(size + 10)"), ("ETag", "\"v1\"")]),
                                 data: Data(count: size))
        let more = part("bytes \(size)-\(size + 9)/\(size + 10)", "0123456789")
        XCTAssertEqual(HTTPCacheRules.combine(stored: big, with: more)?.data.count, 10)
        XCTAssertNil(HTTPCacheRules.combine(stored: nil, with: part("bytes 0-4/10", "0123")), "a body that is not its range")
        XCTAssertEqual(HTTPCacheRules.combine(stored: nil, with: part("bytes 0-9/10", "0123456789"))?.response.statusCode, 200)

        // Answers: a part is completed from byte 0 with Range and If-Range; else the network.
        guard case .network(let fields, false, true) = HTTPCacheRules.answer(for: get(), cached: first, policy: .useProtocolCachePolicy, now: now)
        else { return XCTFail("a plain GET completes a stored part") }
        XCTAssertEqual(fields.map { "\($0.0): \($0.1)" }, ["Range: bytes=5-", "If-Range: \"v1\""])
        guard case .made(let r, let body) = HTTPCacheRules.answer(for: get([("Range", "bytes=1-2")]), cached: first,
                                                                  policy: .useProtocolCachePolicy, now: now) else {
            return XCTFail("a range inside a fresh part comes from it")
        }
        XCTAssertEqual(r.value(forHeader: "Content-Range"), "bytes 1-2/10")
        XCTAssertEqual(body, Data("12".utf8))
        guard case .network(let none1, false, false) = HTTPCacheRules.answer(for: get(), cached: head, policy: .useProtocolCachePolicy, now: now)
        else { return XCTFail("a part that does not start at 0 is not completed") }
        guard case .network(let none2, false, false) = HTTPCacheRules.answer(for: get(), cached: part("bytes 0-4/10", "01234", []),
                                                                      policy: .useProtocolCachePolicy, now: now)
        else { return XCTFail("a part without a strong validator is not completed") }
        var headRequest = get()
        headRequest.method = "HEAD"
        guard case .network(let none3, false, false) = HTTPCacheRules.answer(for: headRequest, cached: first, policy: .useProtocolCachePolicy, now: now)
        else { return XCTFail("a part never answers HEAD") }
        XCTAssertTrue(none1.isEmpty && none2.isEmpty && none3.isEmpty, "nothing is added to those requests")

        // The remainder that continues the part becomes the whole; anything else does not.
        var rest = response(206, [("Content-Range", "bytes 5-9/10"), ("ETag", "\"v1\""), ("X-New", "1")])
        XCTAssertNil(HTTPCacheRules.completed(first, by: rest), "a Content-Length of 1 for a range of 5: a lie")
        rest.expectedContentLength = -1
        XCTAssertNil(HTTPCacheRules.completed(first, by: rest), "no Content-Length: nothing holds the server to the range")
        rest.expectedContentLength = 5
        let done = try XCTUnwrap(HTTPCacheRules.completed(first, by: rest))
        XCTAssertEqual(done.statusCode, 200)
        XCTAssertEqual(done.value(forHeader: "Content-Length"), "10")
        XCTAssertEqual(done.value(forHeader: "X-New"), "1", "the new response's fields")
        XCTAssertNil(HTTPCacheRules.completed(first, by: response(206, [("Content-Range", "bytes 6-9/10"), ("ETag", "\"v1\"")])))
        XCTAssertNil(HTTPCacheRules.completed(first, by: response(206, [("Content-Range", "bytes 5-9/10"), ("ETag", "\"v2\"")])))
        XCTAssertNil(HTTPCacheRules.completed(first, by: response(206, [("Content-Range", "bytes 5-10/11"), ("ETag", "\"v1\"")])))

        // The store combines what it holds for the variant.
        let cache = HTTPCache()
        cache.storeCachedResponse(first, for: get())
        XCTAssertEqual(cache.cachedResponse(for: get())?.response.statusCode, 206)
        cache.storeCachedResponse(part("bytes 5-9/10", "56789"), for: get())
        let stored = try XCTUnwrap(cache.cachedResponse(for: get()))
        XCTAssertEqual(stored.response.statusCode, 200)
        XCTAssertEqual(stored.data, Data("0123456789".utf8))
        XCTAssertEqual(cache.count, 1)
    }
}
