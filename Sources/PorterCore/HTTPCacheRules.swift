import Foundation
import HTTPTypes

/// The directives of Cache-Control header fields (RFC 9111 §5.2).
public struct CacheControl: Sendable, Equatable {
    public var maxAge: Int?
    public var sharedMaxAge: Int?
    public var maxStale: Int?
    public var minFresh: Int?
    public var noStore = false
    public var noCache = false
    public var mustRevalidate = false
    public var isPrivate = false
    public var isPublic = false
    public var immutable = false
    public var onlyIfCached = false
    /// RFC 5861: seconds a stale response may still be served while it is revalidated.
    public var staleWhileRevalidate: Int?

    public init(_ values: [String]) {
        for value in values {
            for part in value.split(separator: ",") {
                let pieces = part.split(separator: "=", maxSplits: 1)
                let name = pieces.first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
                var argument = pieces.count > 1 ? pieces[1].trimmingCharacters(in: .whitespaces) : nil
                if let a = argument, a.hasPrefix("\""), a.hasSuffix("\""), a.count >= 2 { argument = String(a.dropFirst().dropLast()) }
                // A malformed or negative number is ignored; a huge one is clamped.
                let seconds = argument.flatMap { a -> Int? in
                    // delta-seconds is ASCII digits only (RFC 9111 §1.2.2): "½" or "٣" is not a number here.
                    guard !a.isEmpty, a.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
                    return Int(a) ?? Int(Int32.max)
                }
                switch name {
                case "max-age": if let s = seconds { maxAge = s }
                case "s-maxage": if let s = seconds { sharedMaxAge = s }
                case "max-stale": maxStale = seconds ?? Int(Int32.max)
                case "min-fresh": if let s = seconds { minFresh = s }
                case "no-store": noStore = true
                case "no-cache": noCache = true
                case "must-revalidate", "proxy-revalidate": mustRevalidate = true
                case "private": isPrivate = true
                case "public": isPublic = true
                case "immutable": immutable = true
                case "only-if-cached": onlyIfCached = true
                case "stale-while-revalidate": if let s = seconds { staleWhileRevalidate = s }
                default: continue
                }
            }
        }
    }
}

/// RFC 9111 for a private cache: what may be stored, how long it is fresh, how old it
/// is, and how to revalidate it. Pure functions, no I/O.
public enum HTTPCacheRules {
    /// Heuristic freshness: this fraction of the time since Last-Modified (§4.2.2),
    /// for statuses that are cacheable by default only.
    public static let heuristicFraction = 0.1
    /// §15.1 of RFC 9110: statuses that are heuristically cacheable.
    public static let cacheableByDefault: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]

    static func httpDate(_ text: String?) -> Date? { text.flatMap(CookieRules.parseDate) }

    /// §3: whether a response to `request` may be stored (a private cache: `private`
    /// responses are storable here).
    public static func isStorable(request: Request, response: Response) -> Bool {
        guard request.method == "GET", let status = response.statusCode else { return false }
        guard ![206, 304].contains(status), status >= 200 else { return false }   // no partial bodies
        if CacheControl(request.headerFields[values: .cacheControl]).noStore { return false }
        let cc = CacheControl(response.headerFields[values: .cacheControl])
        if cc.noStore { return false }
        if response.value(forHeader: "Vary")?.trimmingCharacters(in: .whitespaces) == "*" { return false }
        return cc.maxAge != nil || response.value(forHeader: "Expires") != nil || cc.isPublic || cc.isPrivate
            || cacheableByDefault.contains(status)
    }

    /// §4.2.1: max-age, else Expires - Date, else the heuristic (default-cacheable
    /// statuses with Last-Modified), else 0.
    public static func freshnessLifetime(_ response: Response) -> TimeInterval {
        let cc = CacheControl(response.headerFields[values: .cacheControl])
        if let maxAge = cc.maxAge { return TimeInterval(maxAge) }
        if let expiresText = response.value(forHeader: "Expires") {
            // Only a valid HTTP-date counts (RFC 9111 §5.3): anything else is in the past.
            guard let expires = HTTPDate.parse(expiresText) else { return 0 }
            let date = httpDate(response.value(forHeader: "Date")) ?? Date()
            return max(0, expires.timeIntervalSince(date))
        }
        if let status = response.statusCode, cacheableByDefault.contains(status),
           let modified = httpDate(response.value(forHeader: "Last-Modified")) {
            let date = httpDate(response.value(forHeader: "Date")) ?? Date()
            return max(0, date.timeIntervalSince(modified) * heuristicFraction)
        }
        return 0
    }

    /// §4.2.3: the response's current age. `stored` is when it was received.
    public static func currentAge(_ response: Response, stored: Date, now: Date) -> TimeInterval {
        let date = httpDate(response.value(forHeader: "Date")) ?? stored
        let apparent = max(0, stored.timeIntervalSince(date))
        let ageValue = ageHeader(response) ?? 0
        return max(apparent, ageValue) + max(0, now.timeIntervalSince(stored))
    }

    /// §5.1: the Age field's value. A list (or several fields) counts by its first member;
    /// a value that is not a non-negative integer is ignored (nil).
    public static func ageHeader(_ response: Response) -> TimeInterval? {
        guard let first = response.headerFields[values: .age].first?.split(separator: ",", omittingEmptySubsequences: false).first
        else { return nil }
        let text = first.trimmingCharacters(in: .whitespaces)
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return TimeInterval(text) ?? TimeInterval(Int32.max)
    }

    /// §3.1: header fields a cache never stores: the hop-by-hop ones and those the
    /// Connection field names.
    public static let hopByHopFields: Set<String> = ["connection", "keep-alive", "te", "transfer-encoding", "upgrade",
                                                      "proxy-authenticate", "proxy-authorization", "proxy-connection"]

    /// The response as it is stored: without hop-by-hop fields.
    public static func storable(_ response: Response) -> Response {
        var named = hopByHopFields
        for value in response.headerFields[values: .connection] {
            for name in value.split(separator: ",") { named.insert(name.trimmingCharacters(in: .whitespaces).lowercased()) }
        }
        var r = response
        r.headerFields = HTTPFields(response.headerFields.filter { !named.contains($0.name.canonicalName) })
        return r
    }

    /// RFC 5861: a stale response whose `stale-while-revalidate` window is still open may be
    /// served at once while it is revalidated in the background.
    public static func mayServeWhileRevalidating(_ cached: CachedResponse, request: Request, now: Date) -> Bool {
        let response = cached.response
        let cc = CacheControl(response.headerFields[values: .cacheControl])
        let rc = CacheControl(request.headerFields[values: .cacheControl])
        guard let window = cc.staleWhileRevalidate, !cc.noCache, !cc.mustRevalidate, !rc.noCache, !requestSaysNoCache(request) else {
            return false
        }
        let age = currentAge(response, stored: cached.storedDate ?? now, now: now)
        return age < freshnessLifetime(response) + TimeInterval(window)
    }

    /// §5.4: `Pragma: no-cache` means `Cache-Control: no-cache` when the request has no
    /// Cache-Control field of its own.
    static func requestSaysNoCache(_ request: Request) -> Bool {
        if CacheControl(request.headerFields[values: .cacheControl]).noCache { return true }
        guard request.headerFields.combined(.cacheControl) == nil else { return false }
        return request.headerFields[values: HTTPField.Name("Pragma")!].contains { $0.lowercased().contains("no-cache") }
    }

    /// RFC 9110 §13.1.2 / §13.1.3: whether the client's own validators match the stored
    /// response, so that the cache answers 304 itself.
    public static func clientConditionMatches(_ request: Request, _ response: Response) -> Bool {
        if let inm = request.value(forHeader: "If-None-Match") {
            guard let etag = response.value(forHeader: "ETag") else { return false }
            func weak(_ tag: String) -> String {
                let t = tag.trimmingCharacters(in: .whitespaces)
                return t.hasPrefix("W/") ? String(t.dropFirst(2)) : t
            }
            return inm.trimmingCharacters(in: .whitespaces) == "*"
                || inm.split(separator: ",").contains { weak(String($0)) == weak(etag) }
        }
        if let ims = request.value(forHeader: "If-Modified-Since").flatMap(HTTPDate.parse),
           let modified = response.value(forHeader: "Last-Modified").flatMap(HTTPDate.parse) {
            return modified <= ims
        }
        return false
    }

    /// A Range request answered from a stored full (200) response: one range of bytes
    /// ("a-b", "a-", "-n") as a 206 with its Content-Range; nil when the request has no
    /// Range field or asks for several ranges (the whole response is then the answer, as
    /// a server may give), and a 416 for a range past the end.
    public static func rangeAnswer(for request: Request, _ cached: CachedResponse) -> (Response, Data)? {
        guard let value = request.value(forHeader: "Range"), cached.response.statusCode == 200,
              value.lowercased().hasPrefix("bytes="), !value.contains(",") else { return nil }
        let spec = value.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let size = cached.data.count
        var first: Int, last: Int
        if parts[0].isEmpty {
            guard let n = Int(parts[1]), n > 0 else { return nil }
            first = max(0, size - n)
            last = size - 1
        } else {
            guard let a = Int(parts[0]) else { return nil }
            first = a
            last = parts[1].isEmpty ? size - 1 : (Int(parts[1]).map { min($0, size - 1) } ?? -1)
            guard last >= first || first >= size else { return nil }
        }
        var r = cached.response
        if first >= size || size == 0 {
            r.statusCode = 416
            r.statusLine = "HTTP/1.1 416 Range Not Satisfiable"
            r.headerFields[.contentRange] = "bytes */\(size)"
            r.headerFields[.contentLength] = "0"
            r.expectedContentLength = 0
            return (r, Data())
        }
        let body = cached.data.subdata(in: first..<(last + 1))
        r.statusCode = 206
        r.statusLine = "HTTP/1.1 206 Partial Content"
        r.headerFields[.contentRange] = "bytes \(first)-\(last)/\(size)"
        r.headerFields[.contentLength] = String(body.count)
        r.expectedContentLength = Int64(body.count)
        return (r, body)
    }

    /// §4.2 with the request's own directives: whether the stored response may be used
    /// without asking the server.
    public static func isFresh(_ cached: CachedResponse, request: Request, now: Date) -> Bool {
        let response = cached.response
        let cc = CacheControl(response.headerFields[values: .cacheControl])
        let rc = CacheControl(request.headerFields[values: .cacheControl])
        if cc.noCache || requestSaysNoCache(request) { return false }
        let stored = cached.storedDate ?? now
        let age = currentAge(response, stored: stored, now: now)
        var lifetime = freshnessLifetime(response)
        if let maxAge = rc.maxAge { lifetime = min(lifetime, TimeInterval(maxAge)) }
        let needed = age + TimeInterval(rc.minFresh ?? 0)
        if needed < lifetime { return true }
        // max-stale lets the client take a stale response, unless the server forbids it.
        if let stale = rc.maxStale, !cc.mustRevalidate, needed < lifetime + TimeInterval(stale) { return true }
        return false
    }

    /// §4.3.1: the validators for a conditional request.
    public static func conditionalHeaders(for cached: CachedResponse) -> [(String, String)] {
        var fields: [(String, String)] = []
        if let etag = cached.response.value(forHeader: "ETag") { fields.append(("If-None-Match", etag)) }
        if let modified = cached.response.value(forHeader: "Last-Modified") { fields.append(("If-Modified-Since", modified)) }
        return fields
    }

    /// §4.3.4: the stored response with the header fields of a 304 (except the framing
    /// ones), and an Age of 0 from now on.
    public static func freshened(_ cached: Response, with notModified: Response) -> Response {
        var merged = cached
        let skip: Set<String> = ["content-length", "content-encoding", "transfer-encoding", "content-range"]
        for field in notModified.headerFields where !skip.contains(field.name.canonicalName) {
            merged.headerFields[field.name] = nil
        }
        for field in notModified.headerFields where !skip.contains(field.name.canonicalName) {
            merged.headerFields.append(field)
        }
        merged.headerFields[.age] = nil
        return merged
    }

    /// The stored response as served now: with its current Age.
    public static func serving(_ cached: CachedResponse, now: Date) -> Response {
        var r = cached.response
        // RFC 9111 §1.2.2: an age past 2^31 seconds (from a server's "Age: 1e30", say) is sent as 2^31.
        let age = currentAge(r, stored: cached.storedDate ?? now, now: now)
        r.headerFields[.age] = String(age < 2_147_483_648 ? Int(age) : 2_147_483_648)
        return r
    }
}
