import XCTest
import PorterTestSupport
@testable import Porter

/// RFC 9111's optimal behaviours (issue 24), through a Session against a real origin
/// (cacheserver.py) that answers as each URL says and logs every request it receives:
/// what reached the server is the proof of what the cache answered.
final class CacheConformanceTests: XCTestCase {
    nonisolated(unsafe) static var server: Process?
    nonisolated(unsafe) static var port = 0

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("cacheserver.py").path
        if let (p, n) = try? startReadyServer("/usr/bin/env", ["python3", script]) {
            server = p
            port = n
        }
    }

    override class func tearDown() {
        if let p = server {
            // Started from a test thread it may have SIGTERM blocked: end it for sure.
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
        }
        super.tearDown()
    }

    override func setUpWithError() throws {
        guard Self.port > 0 else { throw NginxFixture.Failure.setup("the cache origin (python3 cacheserver.py) did not start") }
    }

    private var base: String { "http://127.0.0.1:\(Self.port)" }

    /// A URL on the origin: a unique path, then the query that scripts the answer.
    private func url(_ query: [(String, String)], path: String = "/r") -> URL {
        var c = URLComponents(string: base + path + "/" + UUID().uuidString)!
        c.queryItems = query.map { URLQueryItem(name: $0.0, value: $0.1) }
        // "+" in a value stays a plus sign for the server's parse_qs.
        c.percentEncodedQuery = c.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        return c.url!
    }

    private struct Seen: Decodable {
        var method: String
        var target: String
        var headers: [[String]]
        func field(_ name: String) -> String? { headers.first { $0.first?.lowercased() == name.lowercased() }?.last }
    }

    /// The requests the origin received for `url` (its path and query).
    private func seen(_ url: URL) throws -> [Seen] {
        let text = try String(contentsOf: URL(string: base + "/log")!, encoding: .utf8)
        let target = url.path + (url.query.map { "?" + $0 } ?? "")
        return try text.split(separator: "\n").map { try JSONDecoder().decode(Seen.self, from: Data($0.utf8)) }
            .filter { $0.target == target }
    }

    private func session(_ cache: HTTPCache = HTTPCache()) -> Session {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.responseCache = cache
        return Session(configuration: c)
    }

    private func get(_ s: Session, _ u: URL, _ fields: [(String, String)] = []) async throws -> (Data, Response) {
        var r = Request(url: u)
        for (n, v) in fields { r.headerFields.append(HTTPField(name: HTTPField.Name(n)!, value: v)) }
        return try await s.data(for: r)
    }

    /// RFC 9111 §4.2 / RFC 9110 §5.6.7: Expires in the three forms, names and zone in any
    /// case, asctime's padded day (and a weekday that is not that date's) are dates; the
    /// rest are not, and then the response is already expired.
    func testExpiresIsReadLenientlyButOnlyAsADate() async throws {
        let s = session()
        let dates = ["Thu, 18 Aug 2050 02:01:18 GMT", "Thursday, 18-Aug-50 02:01:18 GMT", "Thu Aug  8 02:01:18 2050",
                     "THU, 18 Aug 2050 02:01:18 GMT", "Thu, 18 AUG 2050 02:01:18 GMT", "Thu, 18 Aug 2050 02:01:18 gMT",
                     "thursday, 18-aug-50 02:01:18 gmt", "tHU aUG 18 02:01:18 2050", "Sun, 21 Nov 2286 04:46:39 GMT"]
        for expires in dates {
            let u = url([("h", "Expires:" + expires)])
            _ = try await get(s, u)
            _ = try await get(s, u)
            XCTAssertEqual(try seen(u).count, 1, "a future Expires of \(expires) is a date: the second load is the cache's")
        }
        let notDates = ["Thu, 18 Aug 2050 02:01:18 UTC", "Thu, 18 Aug 2050 02:01:18 AEST", "Thu, 18 Aug 50 02:01:18 GMT",
                        "Thu 18 Aug 2050 02:01:18 GMT", "Thu, 18  Aug  2050 02:01:18 GMT", "Thu, 18-Aug-2050 02:01:18 GMT",
                        "Thu, 18 Aug 2050 02.01.18 GMT", "Thu, 18 Aug 2050 2:01:18 GMT", "Thu, 31 Feb 2050 02:01:18 GMT",
                        "Thu, 18 Aug 2050 02:01:18 GMT junk", "0", "2050-08-18T02:01:18Z", "Xyz, 18 Aug 2050 02:01:18 GMT"]
        for expires in notDates {
            let u = url([("h", "Expires:" + expires)])
            _ = try await get(s, u)
            _ = try await get(s, u)
            XCTAssertEqual(try seen(u).count, 2, "an Expires of \(expires) is not a date: expired, so both loads reach the server")
        }
        s.finishTasksAndInvalidate()
    }

    /// RFC 9111 §3: explicit freshness stores a status the cache does not know; without it
    /// such a status is not stored; must-understand stores an understood status despite
    /// no-store, and refuses an unknown one.
    func testStatusesExplicitFreshnessAndMustUnderstand() async throws {
        let s = session()
        func twice(_ query: [(String, String)]) async throws -> (Int, Int?) {
            let u = url(query)
            let (_, first) = try await get(s, u)
            let (body, second) = try await get(s, u)
            XCTAssertEqual(String(decoding: body, as: UTF8.self), "body")
            XCTAssertEqual(first.statusCode, second.statusCode)
            return (try seen(u).count, second.statusCode)
        }
        for status in ["599", "299", "499", "500", "503", "400"] {
            let (n, code) = try await twice([("status", status), ("h", "Cache-Control:max-age=3600")])
            XCTAssertEqual(n, 1, "a \(status) with max-age is reused")
            XCTAssertEqual(code, Int(status))
        }
        let expires = try await twice([("status", "599"), ("h", "Expires:Thu, 18 Aug 2050 02:01:18 GMT")]).0
        XCTAssertEqual(expires, 1, "a 599 with Expires is reused")
        let bare = try await twice([("status", "599")]).0
        XCTAssertEqual(bare, 2, "an unknown status without freshness is not stored")
        let unknown = try await twice([("status", "599"), ("h", "Cache-Control:max-age=3600, no-store, must-understand")]).0
        XCTAssertEqual(unknown, 2, "must-understand with a status the cache does not know: not stored")
        let understood = try await twice([("h", "Cache-Control:max-age=3600, no-store, must-understand")]).0
        XCTAssertEqual(understood, 1, "must-understand with a 200: stored despite no-store")
        let noStore = try await twice([("h", "Cache-Control:max-age=3600, no-store")]).0
        XCTAssertEqual(noStore, 2, "no-store alone is never stored")
        s.finishTasksAndInvalidate()
    }

    /// RFC 9110 §9.3.3 / RFC 9111 §4: a POST response with explicit freshness and a
    /// Content-Location that is the request's URI answers a later GET of that URI;
    /// without either, the GET goes to the server.
    func testAPOSTResponseWithContentLocationAnswersAGET() async throws {
        let s = session()
        func post(_ query: [(String, String)]) async throws -> URL {
            let u = url(query)
            var r = Request(url: u, method: "POST")
            _ = r.setValue("text/plain", forHeader: "Content-Type")
            let (data, response) = try await s.upload(for: r, from: Data("12345".utf8))
            XCTAssertEqual(response.statusCode, 200)
            XCTAssertEqual(data, Data((query.first { $0.0 == "body" }?.1 ?? "body").utf8))
            return u
        }
        let reused = try await post([("h", "Cache-Control:max-age=3600"), ("cl", "self"), ("body", "posted")])
        let (data, response) = try await get(s, reused)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "posted")
        XCTAssertEqual(response.statusCode, 200)
        var head = Request(url: reused)
        head.method = "HEAD"
        _ = try await s.data(for: head)
        XCTAssertEqual(try seen(reused).map(\.method), ["POST"], "the GET and HEAD were answered by the stored POST response")

        for query in [[("h", "Cache-Control:max-age=3600")],                                  // no Content-Location
                      [("cl", "self")],                                                        // no explicit freshness
                      [("h", "Cache-Control:max-age=3600"), ("h", "Content-Location:/elsewhere")]] {
            let u = try await post(query)
            _ = try await get(s, u)
            XCTAssertEqual(try seen(u).map(\.method), ["POST", "GET"], "\(query): the GET reached the server")
        }
        s.finishTasksAndInvalidate()
    }

    /// RFC 9111 §4.1: the request fields a Vary names are compared normalised: several
    /// fields as one list, white space around members; for Accept-Language also the case
    /// and the order of its members. A different value is still a different variant.
    func testVaryComparesNormalisedRequestFields() async throws {
        let s = session()
        let lang = url([("h", "Cache-Control:max-age=3600"), ("h", "Vary:Accept-Language")])
        _ = try await get(s, lang, [("Accept-Language", "en, de")])
        for same in ["de, en", "eN, De", " en ,   de", "de,en"] {
            _ = try await get(s, lang, [("Accept-Language", same)])
        }
        XCTAssertEqual(try seen(lang).count, 1, "every spelling of \"en, de\" was answered by the cache")
        _ = try await get(s, lang, [("Accept-Language", "en, fr")])
        _ = try await get(s, lang)
        XCTAssertEqual(try seen(lang).count, 3, "another language, and none, reach the server")

        let foo = url([("h", "Cache-Control:max-age=3600"), ("h", "Vary:Foo")])
        _ = try await get(s, foo, [("Foo", "1,2")])
        _ = try await get(s, foo, [("Foo", " 1, 2 ")])
        _ = try await get(s, foo, [("Foo", "1"), ("Foo", "2")])
        XCTAssertEqual(try seen(foo).count, 1, "white space and the number of fields do not matter")
        _ = try await get(s, foo, [("Foo", "2, 1")])
        XCTAssertEqual(try seen(foo).count, 2, "the order of an unknown field's members may matter: another variant")
        s.finishTasksAndInvalidate()
    }

    /// RFC 9111 §3.3-3.4: a 206 is stored; a range inside it comes from the cache; a
    /// plain GET asks only for the rest (Range: bytes=5-, If-Range with the stored part's
    /// ETag) and gets the whole, which is then stored; two adjacent parts combine. A part
    /// without a strong validator answers ranges inside it but is never combined. The
    /// parts go through the disk tier too.
    func testPartialContentIsStoredReusedAndCompleted() async throws {
        let folder = NSTemporaryDirectory() + "porter-partial-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let cache = try HTTPCache(memoryCapacity: 1 << 20, diskCapacity: 4 << 20, directory: folder)
        let s = session(cache)
        let file = [("ranges", "1"), ("body", "0123456789"), ("h", "Cache-Control:max-age=3600"), ("h", "ETag:\"v1\"")]

        let u = url(file)
        let (part, r1) = try await get(s, u, [("Range", "bytes=0-4")])
        XCTAssertEqual(String(decoding: part, as: UTF8.self), "01234")
        XCTAssertEqual(r1.statusCode, 206)
        let (inside, r2) = try await get(s, u, [("Range", "bytes=1-3")])
        XCTAssertEqual(String(decoding: inside, as: UTF8.self), "123")
        XCTAssertEqual(r2.statusCode, 206)
        XCTAssertEqual(r2.value(forHeader: "Content-Range"), "bytes 1-3/10")
        XCTAssertEqual(try seen(u).count, 1, "a range inside the stored part came from the cache")

        let (whole, r3) = try await get(s, u)
        XCTAssertEqual(String(decoding: whole, as: UTF8.self), "0123456789")
        XCTAssertEqual(r3.statusCode, 200)
        XCTAssertNil(r3.value(forHeader: "Content-Range"))
        let requests = try seen(u)
        XCTAssertEqual(requests.count, 2)
        XCTAssertEqual(requests.last?.field("Range"), "bytes=5-", "only the rest was asked for")
        XCTAssertEqual(requests.last?.field("If-Range"), "\"v1\"", "for the same representation")

        let (again, r4) = try await get(s, u)
        XCTAssertEqual(String(decoding: again, as: UTF8.self), "0123456789")
        XCTAssertEqual(r4.statusCode, 200)
        let (tail, r5) = try await get(s, u, [("Range", "bytes=-3")])
        XCTAssertEqual(String(decoding: tail, as: UTF8.self), "789")
        XCTAssertEqual(r5.value(forHeader: "Content-Range"), "bytes 7-9/10")
        XCTAssertEqual(try seen(u).count, 2, "the combined whole is stored and answers both")

        // Two adjacent parts combine into the whole, and a fresh cache on the same folder
        // (the disk tier) serves it.
        let v = url(file)
        _ = try await get(s, v, [("Range", "bytes=0-4")])
        _ = try await get(s, v, [("Range", "bytes=5-9")])
        let reopened = try HTTPCache(memoryCapacity: 1 << 20, diskCapacity: 4 << 20, directory: folder)
        let s2 = session(reopened)
        let (combined, r6) = try await get(s2, v)
        XCTAssertEqual(String(decoding: combined, as: UTF8.self), "0123456789")
        XCTAssertEqual(r6.statusCode, 200)
        XCTAssertEqual(try seen(v).count, 2, "the two parts made the whole")

        // A part that does not reach the start is not completed: the plain GET asks for all.
        let w = url(file)
        _ = try await get(s, w, [("Range", "bytes=4-")])
        let (all, r7) = try await get(s, w)
        XCTAssertEqual(String(decoding: all, as: UTF8.self), "0123456789")
        XCTAssertEqual(r7.statusCode, 200)
        XCTAssertNil(try seen(w).last?.field("Range"))

        // Without a strong validator: reused for ranges inside it, never combined.
        let x = url([("ranges", "1"), ("body", "0123456789"), ("h", "Cache-Control:max-age=3600")])
        _ = try await get(s, x, [("Range", "bytes=0-4")])
        let (small, _) = try await get(s, x, [("Range", "bytes=2-3")])
        XCTAssertEqual(String(decoding: small, as: UTF8.self), "23")
        let (full, r8) = try await get(s, x)
        XCTAssertEqual(String(decoding: full, as: UTF8.self), "0123456789")
        XCTAssertEqual(r8.statusCode, 200)
        XCTAssertEqual(try seen(x).map { $0.field("Range") ?? "-" }, ["bytes=0-4", "-"])

        // The policies that answer from the store whatever its age: a part answers only a
        // range inside it; otherwise there is nothing to serve.
        let y = url(file)
        _ = try await get(s, y, [("Range", "bytes=0-4")])
        var within = Request(url: y)
        _ = within.setValue("bytes=2-3", forHeader: "Range")
        within.cachePolicy = .returnCacheDataDontLoad
        let (cut, r9) = try await s.data(for: within)
        XCTAssertEqual(String(decoding: cut, as: UTF8.self), "23")
        XCTAssertEqual(r9.value(forHeader: "Content-Range"), "bytes 2-3/10")
        var plain = Request(url: y)
        plain.cachePolicy = .returnCacheDataDontLoad
        do {
            let (data, response) = try await s.data(for: plain)
            XCTFail("a stored part answered a plain GET: \(response.statusCode ?? 0) \(data.count) bytes")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .resourceUnavailable)
        }
        plain.cachePolicy = .returnCacheDataElseLoad
        let (loaded, r10) = try await s.data(for: plain)
        XCTAssertEqual(String(decoding: loaded, as: UTF8.self), "0123456789")
        XCTAssertEqual(r10.statusCode, 200)
        XCTAssertEqual(try seen(y).count, 2)
        s.finishTasksAndInvalidate()
        s2.finishTasksAndInvalidate()
    }

    /// The server changed the representation: the If-Range does not match, it sends the
    /// whole 200, and that is what the client gets (and what is stored).
    func testAChangedRepresentationIsNotCombined() async throws {
        let s = session()
        let u = url([("ranges", "1"), ("body", "0123456789"), ("h", "Cache-Control:max-age=3600"), ("h", "ETag:\"v1\""),
                     ("later_body", "ABCDEFGHIJ"), ("later_h", "Cache-Control:max-age=3600"), ("later_h", "ETag:\"v2\"")])
        _ = try await get(s, u, [("Range", "bytes=0-4")])
        let (all, r) = try await get(s, u)
        XCTAssertEqual(r.statusCode, 200)
        XCTAssertEqual(String(decoding: all, as: UTF8.self), "ABCDEFGHIJ", "the new whole, not the old part with new bytes")
        XCTAssertEqual(try seen(u).last?.field("If-Range"), "\"v1\"")
        let (stored, _) = try await get(s, u)
        XCTAssertEqual(String(decoding: stored, as: UTF8.self), "ABCDEFGHIJ")
        XCTAssertEqual(try seen(u).count, 2, "the new whole was stored")
        s.finishTasksAndInvalidate()
    }

    /// A server that lies about the rest: its 206 says bytes 5-9 and brings 3. The part
    /// is not completed into a whole it is not: the load fails, nothing whole is stored,
    /// and the stored part is dropped.
    func testALyingRemainderIsNotCombined() async throws {
        let s = session()
        let u = url([("status", "206"), ("reason", "Partial Content"), ("body", "01234"), ("h", "Content-Range:bytes 0-4/10"),
                     ("h", "ETag:\"v1\""), ("h", "Cache-Control:max-age=3600"),
                     ("later_body", "567"), ("later_h", "Content-Range:bytes 5-9/10"), ("later_h", "ETag:\"v1\""),
                     ("later_h", "Cache-Control:max-age=3600")])
        let (part, _) = try await get(s, u, [("Range", "bytes=0-4")])
        XCTAssertEqual(String(decoding: part, as: UTF8.self), "01234")
        do {
            let (data, response) = try await get(s, u)
            XCTFail("a remainder shorter than its range was delivered: \(response.statusCode ?? 0) \(data.count) bytes")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .badServerResponse)
        }
        XCTAssertEqual(try seen(u).last?.field("Range"), "bytes=5-")
        _ = try? await get(s, u)
        XCTAssertNil(try seen(u).last?.field("Range"), "the stored part was dropped: the next plain GET asks for everything")
        XCTAssertEqual(try seen(u).count, 3)
        s.finishTasksAndInvalidate()
    }

    /// The fields the cache adds to ask about what it holds (Range / If-Range for the
    /// rest of a part, If-None-Match to revalidate) are for the stored URL only: when the
    /// server redirects, the next request goes as the client made it.
    func testCacheFieldsDoNotFollowARedirect() async throws {
        let s = session()
        let target = url([("ranges", "1"), ("body", "elsewhere"), ("h", "ETag:\"t\"")])
        let part = url([("status", "206"), ("reason", "Partial Content"), ("body", "01234"), ("h", "Content-Range:bytes 0-4/10"),
                        ("h", "ETag:\"v1\""), ("h", "Cache-Control:max-age=3600"),
                        ("later_status", "302"), ("later_reason", "Found"), ("later_h", "Location:" + target.absoluteString)])
        _ = try await get(s, part, [("Range", "bytes=0-4")])
        let (data, response) = try await get(s, part)
        XCTAssertEqual(try seen(part).last?.field("Range"), "bytes=5-", "the rest of the part was asked for")
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "elsewhere")
        let redirected = try XCTUnwrap(try seen(target).last)
        XCTAssertNil(redirected.field("Range"), "the redirect's request carries no Range the client did not send")
        XCTAssertNil(redirected.field("If-Range"))

        let other = url([("body", "elsewhere")])
        let stale = url([("body", "old"), ("h", "Cache-Control:max-age=0"), ("h", "ETag:\"v1\""),
                         ("later_status", "302"), ("later_reason", "Found"), ("later_h", "Location:" + other.absoluteString)])
        _ = try await get(s, stale)
        let (moved, _) = try await get(s, stale)
        XCTAssertEqual(try seen(stale).last?.field("If-None-Match"), "\"v1\"", "the stale entry was revalidated")
        XCTAssertEqual(String(decoding: moved, as: UTF8.self), "elsewhere")
        XCTAssertEqual(try seen(other).count, 1)
        XCTAssertNil(try seen(other).last?.field("If-None-Match"), "the redirect's request carries no validator of another URL")
        s.finishTasksAndInvalidate()
    }

    /// A stale stored whole asked for one range: revalidated, and the 304 answers with that
    /// range of the stored body (it served all of it), for the client asked for a range.
    func testARevalidatedRangeIsCutFromTheStoredWhole() async throws {
        let s = session()
        let u = url([("ranges", "1"), ("cond", "1"), ("body", "0123456789"), ("h", "Cache-Control:max-age=0"), ("h", "ETag:\"v1\"")])
        _ = try await get(s, u)
        let (cut, r) = try await get(s, u, [("Range", "bytes=1-2")])
        XCTAssertEqual(try seen(u).last?.field("If-None-Match"), "\"v1\"")
        XCTAssertEqual(r.statusCode, 206)
        XCTAssertEqual(r.value(forHeader: "Content-Range"), "bytes 1-2/10")
        XCTAssertEqual(String(decoding: cut, as: UTF8.self), "12")
        var stored = Request(url: u)
        _ = stored.setValue("bytes=-3", forHeader: "Range")
        stored.cachePolicy = .returnCacheDataDontLoad
        let (tail, _) = try await s.data(for: stored)
        XCTAssertEqual(String(decoding: tail, as: UTF8.self), "789", "a policy that serves the store serves the range too")
        XCTAssertEqual(try seen(u).count, 2)
        s.finishTasksAndInvalidate()
    }
}
