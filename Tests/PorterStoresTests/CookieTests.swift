import Foundation
import PorterCore
import PorterCache
import PorterCookies
import PorterCredentials
import PorterStorage
import PorterSession
import XCTest

/// RFC 6265 (and 6265bis where settled): parsing, the storage model, matching and
/// ordering, with no I/O.
final class CookieTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_700_000_000)
    func store() -> MemoryCookieStore {
        let t = now
        return MemoryCookieStore(clock: { t })
    }
    func url(_ s: String) -> URL { URL(string: s)! }
    func set(_ s: MemoryCookieStore, _ headers: [String], _ u: String) { s.storeCookies(fromHeaders: headers, for: url(u), mainDocumentURL: nil) }
    func header(_ s: MemoryCookieStore, _ u: String) -> String? { s.cookieHeader(for: url(u), mainDocumentURL: nil) }

    // MARK: dates in the four formats, and bad ones

    func testDates() {
        let expected = Date(timeIntervalSince1970: 784_111_777)   // Sun, 06 Nov 1994 08:49:37 GMT
        XCTAssertEqual(CookieRules.parseDate("Sun, 06 Nov 1994 08:49:37 GMT"), expected)    // RFC 1123
        XCTAssertEqual(CookieRules.parseDate("Sunday, 06-Nov-94 08:49:37 GMT"), expected)   // RFC 850
        XCTAssertEqual(CookieRules.parseDate("Sun Nov  6 08:49:37 1994"), expected)         // asctime
        XCTAssertEqual(CookieRules.parseDate("Sun, 06-Nov-1994 08:49:37 GMT"), expected)    // Netscape
        XCTAssertEqual(CookieRules.parseDate("06 nov 1994 8:49:37"), expected, "case and one-digit hours")
        XCTAssertEqual(CookieRules.parseDate("Thu, 01 Jan 2065 00:00:00 GMT")?.timeIntervalSince1970, 2_997_993_600)
        XCTAssertEqual(CookieRules.parseDate("Wed, 01 Jan 69 00:00:00 GMT")?.timeIntervalSince1970, 3_124_224_000, "69 is 2069")
        XCTAssertEqual(CookieRules.parseDate("Thu, 01 Jan 70 00:00:00 GMT")?.timeIntervalSince1970, 0, "70 is 1970")
        for bad in ["", "tomorrow", "Sun, 06 Nov 1994", "Sun, 32 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
                    "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT", "Fri, 30 Feb 2024 10:00:00 GMT",
                    "Sun, 06 Nov 1600 08:49:37 GMT", "Sun, 06 Nov 19945 08:49:37 GMT"] {
            XCTAssertNil(CookieRules.parseDate(bad), bad)
        }
        XCTAssertNotNil(CookieRules.parseDate("Thu, 29 Feb 2024 10:00:00 GMT"), "a leap day")
        XCTAssertEqual(CookieRules.parseDate(CookieRules.formatDate(expected)), expected)
    }

    /// Found by Fuzz/FuzzSetCookie: a run of 20 or more digits where a day (or hour, or
    /// year) may stand overflowed Int and trapped. It is a token that matches nothing.
    func testDateWithAVeryLongNumberIsRejectedNotATrap() {
        let long = String(repeating: "9", count: 40)
        XCTAssertNil(CookieRules.parseDate("\(long) Jun 2021 10:18:14 GMT"))
        XCTAssertNil(CookieRules.parseDate("Wed, 09 Jun 2021 \(long):18:14 GMT"))
        XCTAssertNil(CookieRules.parseDate("Wed, 09 Jun \(long) 10:18:14 GMT"))
        XCTAssertEqual(CookieRules.parseDate("Sun, 06 Nov 1994 08:49:37 GMT \(long)")?.timeIntervalSince1970, 784_111_777)
        XCTAssertNil(CookieRules.parse("id=1; Expires=\(long) Jun 2021 10:18:14 GMT")?.expires)
        XCTAssertNil(CookieRules.parseDate("Wed, 09 Jun 2021 10:18:14 GMT".replacingOccurrences(of: "09", with: "0" + long)))
    }

    // MARK: parsing

    func testNameValueEdgeCases() {
        XCTAssertEqual(CookieRules.parse("a=\"quoted value\"")?.value, "\"quoted value\"", "quotes are part of the value")
        XCTAssertEqual(CookieRules.parse("a=b=c=d")?.value, "b=c=d", "= in values")
        XCTAssertEqual(CookieRules.parse("  a  =  b  ; Path=/")?.name, "a")
        XCTAssertEqual(CookieRules.parse("  a  =  b  ; Path=/")?.value, "b")
        let empty = CookieRules.parse("=value")
        XCTAssertEqual(empty?.name, "")
        XCTAssertEqual(empty?.value, "value")
        XCTAssertEqual(CookieRules.parse("novalue")?.value, "novalue", "no = : an empty name (6265bis)")
        XCTAssertEqual(CookieRules.parse("novalue")?.name, "")
        XCTAssertNil(CookieRules.parse("="))
        XCTAssertNil(CookieRules.parse(""))
        XCTAssertNil(CookieRules.parse("a=b\u{01}c"), "control characters")
        XCTAssertEqual(CookieRules.parse("a=")?.value, "")
    }

    func testAttributes() throws {
        let p = try XCTUnwrap(CookieRules.parse("id=1; Path=/docs; Domain=.Example.COM; Secure; HttpOnly; SameSite=Lax; Foo=bar"))
        XCTAssertEqual(p.path, "/docs")
        XCTAssertEqual(p.domain, "example.com", "leading dot dropped, lower case")
        XCTAssertTrue(p.secure)
        XCTAssertTrue(p.httpOnly)
        XCTAssertEqual(p.sameSite, .lax)
        // Repeated attributes: the last wins.
        let r = try XCTUnwrap(CookieRules.parse("a=b; Path=/one; path=/two; Max-Age=5; max-age=10; SameSite=Strict; samesite=bogus"))
        XCTAssertEqual(r.path, "/two")
        XCTAssertEqual(r.maxAge, 10)
        XCTAssertNil(r.sameSite, "an unknown SameSite value resets it")
        XCTAssertNil(CookieRules.parse("a=b; Path=relative")?.path, "a path not starting with / is the default path")
        XCTAssertNil(CookieRules.parse("a=b; Domain=")?.domain, "an empty Domain is ignored")
        XCTAssertNil(CookieRules.parse("a=b; Max-Age=12abc")?.maxAge)
        XCTAssertNil(CookieRules.parse("a=b; Max-Age=+5")?.maxAge)
        XCTAssertEqual(CookieRules.parse("a=b; Max-Age=-3")?.maxAge, -3)
        XCTAssertNil(CookieRules.parse("a=b; Expires=not a date")?.expires)
    }

    // MARK: storage model

    func testMaxAgeWinsOverExpiresAndZeroOrNegativeExpire() {
        let s = store()
        set(s, ["a=1; Expires=Thu, 01 Jan 2065 00:00:00 GMT; Max-Age=60"], "http://example.test/")
        XCTAssertEqual(s.allCookies.first?.expires, now.addingTimeInterval(60))
        set(s, ["b=2; Max-Age=60; Expires=Thu, 01 Jan 2065 00:00:00 GMT"], "http://example.test/")
        XCTAssertEqual(s.allCookies.first { $0.name == "b" }?.expires, now.addingTimeInterval(60), "whatever the order")
        set(s, ["a=1; Max-Age=0"], "http://example.test/")
        XCTAssertNil(s.allCookies.first { $0.name == "a" }, "Max-Age=0 deletes")
        set(s, ["b=2; Max-Age=-1"], "http://example.test/")
        XCTAssertTrue(s.allCookies.isEmpty, "a negative Max-Age deletes")
        set(s, ["c=3; Expires=Thu, 01 Jan 1970 00:00:10 GMT"], "http://example.test/")
        XCTAssertTrue(s.allCookies.isEmpty, "a date in the past is never stored")
        set(s, ["d=4"], "http://example.test/")
        XCTAssertTrue(s.allCookies.first?.isSessionCookie == true)
        set(s, ["e=5; Max-Age=999999999"], "http://example.test/")
        XCTAssertEqual(s.allCookies.first { $0.name == "e" }?.expires, now.addingTimeInterval(400 * 86400), "capped at 400 days")
    }

    func testDomainRules() {
        let s = store()
        set(s, ["host=1"], "http://WWW.Example.TEST/")
        let host = s.allCookies.first
        XCTAssertEqual(host?.domain, "www.example.test", "upper-case hosts are lower-cased")
        XCTAssertEqual(host?.hostOnly, true)
        XCTAssertNil(header(s, "http://sub.www.example.test/"), "host-only: not for subdomains")
        XCTAssertEqual(header(s, "http://www.example.test/"), "host=1")

        set(s, ["dom=2; Domain=example.test"], "http://www.example.test/")
        XCTAssertEqual(header(s, "http://other.example.test/"), "dom=2", "a domain cookie reaches sibling hosts")
        XCTAssertEqual(header(s, "http://example.test/"), "dom=2")
        XCTAssertNil(header(s, "http://badexample.test/"), "a suffix that is not a label boundary")

        set(s, ["foreign=3; Domain=other.test"], "http://www.example.test/")
        XCTAssertFalse(s.allCookies.contains { $0.name == "foreign" }, "a Domain the host is not in")
        set(s, ["deeper=4; Domain=a.www.example.test"], "http://www.example.test/")
        XCTAssertFalse(s.allCookies.contains { $0.name == "deeper" }, "a Domain below the host")
    }

    func testPublicSuffixesThroughLibpsl() {
        XCTAssertTrue(PublicSuffixList.shared.isPublicSuffix("com"))
        XCTAssertTrue(PublicSuffixList.shared.isPublicSuffix("co.uk"))
        XCTAssertFalse(PublicSuffixList.shared.isPublicSuffix("example.co.uk"))
        XCTAssertEqual(PublicSuffixList.shared.registrableDomain("a.b.example.co.uk"), "example.co.uk")
        let s = store()
        set(s, ["evil=1; Domain=co.uk"], "http://www.example.co.uk/")
        XCTAssertTrue(s.allCookies.isEmpty, "a Domain that is a public suffix is refused")
        set(s, ["evil=1; Domain=.com"], "http://example.com/")
        XCTAssertTrue(s.allCookies.isEmpty)
        // localhost is a public suffix to libpsl, yet its own host-only cookies work.
        set(s, ["local=1"], "http://localhost:8080/")
        set(s, ["local2=2; Domain=localhost"], "http://localhost:8080/")
        XCTAssertEqual(header(s, "http://localhost:9999/x"), "local=1; local2=2")
        XCTAssertTrue(s.allCookies.allSatisfy(\.hostOnly))
    }

    func testIPAddressHostsGetHostOnlyCookies() {
        let s = store()
        set(s, ["ip=1; Domain=127.0.0.1"], "http://127.0.0.1:8080/")
        XCTAssertEqual(s.allCookies.first?.hostOnly, true)
        XCTAssertEqual(header(s, "http://127.0.0.1/"), "ip=1")
        set(s, ["ip2=2; Domain=0.0.1"], "http://127.0.0.1/")
        XCTAssertFalse(s.allCookies.contains { $0.name == "ip2" }, "no partial matches on addresses")
        set(s, ["v6=1"], "http://[::1]:8080/")
        XCTAssertEqual(header(s, "http://[::1]/"), "v6=1")
    }

    func testIDNHostsCompareAsPunycode() {
        XCTAssertEqual(Punycode.toASCII("bücher.test"), "xn--bcher-kva.test")
        XCTAssertEqual(Punycode.toASCII("münchen.example"), "xn--mnchen-3ya.example")
        XCTAssertEqual(Punycode.toASCII("ascii.test"), "ascii.test")
        let s = store()
        set(s, ["idn=1; Domain=bücher.test"], "http://www.xn--bcher-kva.test/")
        XCTAssertEqual(s.allCookies.first?.domain, "xn--bcher-kva.test")
        XCTAssertEqual(header(s, "http://xn--bcher-kva.test/"), "idn=1")
    }

    func testPathsAndTheDefaultPath() {
        XCTAssertEqual(CookieRules.defaultPath(of: "/docs/a/b.html"), "/docs/a")
        XCTAssertEqual(CookieRules.defaultPath(of: "/b.html"), "/")
        XCTAssertEqual(CookieRules.defaultPath(of: ""), "/")
        XCTAssertTrue(CookieRules.pathMatches(requestPath: "/docs/x", cookiePath: "/docs"))
        XCTAssertTrue(CookieRules.pathMatches(requestPath: "/docs/x", cookiePath: "/docs/"))
        XCTAssertFalse(CookieRules.pathMatches(requestPath: "/docsx", cookiePath: "/docs"))
        let s = store()
        set(s, ["d=1"], "http://example.test/docs/page.html")
        XCTAssertEqual(s.allCookies.first?.path, "/docs")
        XCTAssertNil(header(s, "http://example.test/other"))
        XCTAssertEqual(header(s, "http://example.test/docs/deeper/x"), "d=1")
    }

    func testSecureCookiesOnlyFromAndToHTTPS() {
        let s = store()
        set(s, ["s=1; Secure"], "http://example.test/")
        XCTAssertTrue(s.allCookies.isEmpty, "Secure from http is refused")
        set(s, ["s=1; Secure"], "https://example.test/")
        XCTAssertEqual(header(s, "https://example.test/"), "s=1")
        XCTAssertNil(header(s, "http://example.test/"), "never over http")
        set(s, ["s=evil"], "http://example.test/")
        XCTAssertEqual(header(s, "https://example.test/"), "s=1", "http may not overwrite a Secure cookie")
    }

    func testPrefixes() {
        let s = store()
        set(s, ["__Secure-a=1"], "https://example.test/")
        set(s, ["__Secure-b=1; Secure"], "http://example.test/")
        set(s, ["__Secure-c=1; Secure"], "https://example.test/")
        set(s, ["__Host-d=1; Secure; Path=/; Domain=example.test"], "https://example.test/")
        set(s, ["__Host-e=1; Secure; Path=/docs"], "https://example.test/")
        set(s, ["__Host-f=1; Secure; Path=/"], "https://example.test/")
        XCTAssertEqual(s.allCookies.map(\.name).sorted(), ["__Host-f", "__Secure-c"])
    }

    func testHeaderOrderLongerPathsFirstThenOlder() {
        var t = now
        let clock = Locked(t)
        let s = MemoryCookieStore(clock: { clock.current })
        s.storeCookies(fromHeaders: ["b=1; Path=/"], for: url("http://example.test/"), mainDocumentURL: nil)
        t += 1; clock.withLock { $0 = t }
        s.storeCookies(fromHeaders: ["a=2; Path=/"], for: url("http://example.test/"), mainDocumentURL: nil)
        s.storeCookies(fromHeaders: ["c=3; Path=/docs/a"], for: url("http://example.test/"), mainDocumentURL: nil)
        s.storeCookies(fromHeaders: ["d=4; Path=/docs"], for: url("http://example.test/"), mainDocumentURL: nil)
        XCTAssertEqual(s.cookieHeader(for: url("http://example.test/docs/a/x"), mainDocumentURL: nil), "c=3; d=4; b=1; a=2")
        // Replacing keeps the creation time (and so the order).
        t += 1; clock.withLock { $0 = t }
        s.storeCookies(fromHeaders: ["b=new; Path=/"], for: url("http://example.test/"), mainDocumentURL: nil)
        XCTAssertEqual(s.cookieHeader(for: url("http://example.test/"), mainDocumentURL: nil), "b=new; a=2")
    }

    func testExpiryRemovesCookies() {
        let clock = Locked(now)
        let s = MemoryCookieStore(clock: { clock.current })
        s.storeCookies(fromHeaders: ["a=1; Max-Age=10"], for: url("http://example.test/"), mainDocumentURL: nil)
        XCTAssertEqual(s.cookieHeader(for: url("http://example.test/"), mainDocumentURL: nil), "a=1")
        clock.withLock { $0 = $0.addingTimeInterval(11) }
        XCTAssertNil(s.cookieHeader(for: url("http://example.test/"), mainDocumentURL: nil))
        XCTAssertTrue(s.allCookies.isEmpty)
    }

    func testAcceptPolicies() {
        let s = store()
        s.acceptPolicy = .never
        set(s, ["a=1"], "http://example.test/")
        XCTAssertTrue(s.allCookies.isEmpty)
        s.acceptPolicy = .onlyFromMainDocumentDomain
        s.storeCookies(fromHeaders: ["third=1"], for: url("http://tracker.test/"), mainDocumentURL: url("http://www.example.test/"))
        XCTAssertTrue(s.allCookies.isEmpty, "a third party's cookie is refused")
        s.storeCookies(fromHeaders: ["first=1"], for: url("http://cdn.example.test/"), mainDocumentURL: url("http://www.example.test/"))
        XCTAssertEqual(s.allCookies.map(\.name), ["first"], "the main document's own site is accepted")
        s.acceptPolicy = .always
        s.storeCookies(fromHeaders: ["third=1"], for: url("http://tracker.test/"), mainDocumentURL: url("http://www.example.test/"))
        XCTAssertEqual(s.allCookies.count, 2)
    }

    func testSameSiteIsNotSentCrossSite() {
        let s = store()
        set(s, ["strict=1; SameSite=Strict", "lax=2; SameSite=Lax", "none=3; SameSite=None; Secure", "plain=4"], "https://shop.test/")
        XCTAssertEqual(s.cookieHeader(for: url("https://shop.test/"), mainDocumentURL: url("https://www.shop.test/")),
                       "strict=1; lax=2; none=3; plain=4")
        XCTAssertEqual(s.cookieHeader(for: url("https://shop.test/"), mainDocumentURL: url("https://evil.test/")),
                       "none=3; plain=4")
    }

    func testLimitsEvictLeastRecentlyUsed() {
        let clock = Locked(now)
        let s = MemoryCookieStore(maximumPerDomain: 3, maximumTotal: 5, clock: { clock.current })
        for i in 0..<4 {
            clock.withLock { $0 = $0.addingTimeInterval(1) }
            s.storeCookies(fromHeaders: ["c\(i)=\(i)"], for: url("http://a.test/"), mainDocumentURL: nil)
        }
        XCTAssertEqual(s.allCookies.map(\.name).sorted(), ["c1", "c2", "c3"], "per domain: the oldest went")
        for i in 0..<3 {
            clock.withLock { $0 = $0.addingTimeInterval(1) }
            s.storeCookies(fromHeaders: ["d\(i)=\(i)"], for: url("http://b.test/"), mainDocumentURL: nil)
        }
        XCTAssertEqual(s.allCookies.count, 5, "in all")
        XCTAssertFalse(s.allCookies.contains { $0.name == "c1" }, "the least recently used went first")
    }

    func testNetscapeFileRoundTrip() throws {
        let s = store()
        set(s, ["a=1; Max-Age=3600", "b=2; Domain=example.test; Path=/docs; HttpOnly", "c=3"], "http://www.example.test/")
        let text = NetscapeCookieFile.serialize(s.allCookies)
        XCTAssertTrue(text.hasPrefix("# Netscape HTTP Cookie File"))
        XCTAssertTrue(text.contains("#HttpOnly_.example.test\tTRUE\t/docs\tFALSE\t0\tb\t2"), text)
        XCTAssertTrue(text.contains("www.example.test\tFALSE\t/\tFALSE\t\(Int(now.timeIntervalSince1970) + 3600)\ta\t1"), text)
        let (back, skipped) = NetscapeCookieFile.parse(text + "garbage line\n", now: now)
        XCTAssertEqual(skipped, 1)
        XCTAssertEqual(back.map(\.name).sorted(), ["a", "b", "c"])
        XCTAssertEqual(back.first { $0.name == "b" }?.httpOnly, true)
        XCTAssertEqual(back.first { $0.name == "b" }?.hostOnly, false)
        XCTAssertEqual(back.first { $0.name == "c" }?.isSessionCookie, true)
    }

    /// Found by Fuzz/FuzzSetCookie under AddressSanitizer: libpsl answers with a pointer
    /// into the host it was given, and for a host of 15 bytes or fewer Swift had passed a
    /// temporary copy that was freed before the answer was read (a use after free).
    func testRegistrableDomainOfShortAndLongHosts() {
        let psl = PublicSuffixList.shared
        XCTAssertEqual(psl.registrableDomain("a.example.com"), "example.com")
        XCTAssertEqual(psl.registrableDomain("x.y.co.uk"), "y.co.uk")
        XCTAssertEqual(psl.registrableDomain("www.a.long-name.example.co.uk"), "example.co.uk")
        XCTAssertNil(psl.registrableDomain("co.uk"))
        let s = MemoryCookieStore(clock: { [now] in now })
        s.acceptPolicy = .onlyFromMainDocumentDomain
        s.storeCookies(fromHeaders: ["a=1"], for: url("https://a.example.com/"), mainDocumentURL: url("https://b.example.com/"))
        XCTAssertEqual(header(s, "https://a.example.com/"), "a=1")
    }

    /// Found by Fuzz/FuzzNetscapeCookies: an expiry near Int64.max in a cookies.txt is a
    /// date of 2^63 seconds, and writing the file back (-c) or describing the cookie
    /// trapped converting it to an integer.
    func testNetscapeExpiryAtTheEndOfInt64RoundTrips() {
        let file = "example.com\tFALSE\t/\tFALSE\t9223372036854775807\tn\tv\n"
        let (cookies, skipped) = NetscapeCookieFile.parse(file, now: now)
        XCTAssertEqual(skipped, 0)
        XCTAssertEqual(cookies.count, 1)
        XCTAssertTrue(cookies[0].description.hasSuffix("; expires=9223372036854775807)"))
        let written = NetscapeCookieFile.serialize(cookies)
        XCTAssertTrue(written.contains("\t9223372036854775807\tn\tv\n"), written)
        XCTAssertEqual(NetscapeCookieFile.parse(written, now: now).cookies, cookies)
        let far = Cookie(name: "x", value: "1", domain: "a.test", expires: Date(timeIntervalSince1970: 1e300))
        XCTAssertTrue(NetscapeCookieFile.serialize([far]).contains("\t9223372036854775807\tx\t1\n"))
        XCTAssertTrue(Cookie(name: "x", value: "1", domain: "a.test", expires: Date(timeIntervalSince1970: -1e300))
            .description.hasSuffix("; expires=-9223372036854775808)"))
    }

    /// Found by Fuzz/FuzzNetscapeCookies: a domain of ".." was read as the domain ".",
    /// written back as ".", and that line no longer parsed. Such a line is skipped.
    func testNetscapeDomainOfDotsIsSkipped() {
        let (cookies, skipped) = NetscapeCookieFile.parse("..\tTRUE\t/\tFALSE\t0\ta\t1\n...x.test\tTRUE\t/\tFALSE\t0\tb\t2\n.x.test\tTRUE\t/\tFALSE\t0\tc\t3\n", now: now)
        XCTAssertEqual(skipped, 2)
        XCTAssertEqual(cookies.map(\.name), ["c"])
        XCTAssertEqual(NetscapeCookieFile.parse(NetscapeCookieFile.serialize(cookies), now: now).skipped, 0)
    }

    /// RFC 6265 §5.4: cookies of one response, on different domains (host-only and a
    /// parent domain) and with paths of equal length, are sent in the order they arrived.
    func testCookiesOfOneResponseKeepTheirOrder() {
        for _ in 0..<20 {
            let store = MemoryCookieStore()
            let url = URL(string: "http://www.example.com/")!
            store.storeCookies(fromHeaders: ["z=1", "a=2; Domain=example.com", "m=3", "b=4; Domain=www.example.com"],
                               for: url, mainDocumentURL: nil)
            XCTAssertEqual(store.cookieHeader(for: url, mainDocumentURL: nil), "z=1; a=2; m=3; b=4")
        }
    }
}
