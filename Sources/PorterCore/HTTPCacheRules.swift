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
    /// §5.2.2.3: store only in a cache that understands the status code (and then
    /// `no-store` is ignored).
    public var mustUnderstand = false
    /// RFC 5861: seconds a stale response may still be served while it is revalidated.
    public var staleWhileRevalidate: Int?

    public init(_ values: [String]) {
        for value in values {
            // Field values are ASCII in practice: read those byte by byte (a cache parses
            // the Cache-Control of every request and every stored response it answers
            // with); anything else the way Unicode text is read (`readText`).
            let ascii = value.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
                guard !bytes.contains(where: { $0 >= 0x80 }) else { return false }
                read(ascii: bytes)
                return true
            }
            if ascii != true { readText(value) }
        }
    }

    /// Every value read as Unicode text, ASCII or not (what the byte reading must agree with).
    init(text values: [String]) {
        for value in values { readText(value) }
    }

    /// One directive, its name lower case, its argument unquoted.
    private mutating func apply(_ name: Directive, _ seconds: Int?) {
        switch name {
        case .maxAge: if let s = seconds { maxAge = s }
        case .sMaxAge: if let s = seconds { sharedMaxAge = s }
        case .maxStale: maxStale = seconds ?? Int(Int32.max)
        case .minFresh: if let s = seconds { minFresh = s }
        case .noStore: noStore = true
        case .noCache: noCache = true
        case .mustRevalidate: mustRevalidate = true
        case .isPrivate: isPrivate = true
        case .isPublic: isPublic = true
        case .immutable: immutable = true
        case .onlyIfCached: onlyIfCached = true
        case .mustUnderstand: mustUnderstand = true
        case .staleWhileRevalidate: if let s = seconds { staleWhileRevalidate = s }
        }
    }

    private enum Directive: CaseIterable {
        case maxAge, sMaxAge, maxStale, minFresh, noStore, noCache, mustRevalidate, isPrivate, isPublic, immutable,
             onlyIfCached, mustUnderstand, staleWhileRevalidate

        static let names: [(StaticString, Directive)] = [
            ("max-age", .maxAge), ("s-maxage", .sMaxAge), ("max-stale", .maxStale), ("min-fresh", .minFresh),
            ("no-store", .noStore), ("no-cache", .noCache), ("must-revalidate", .mustRevalidate),
            ("proxy-revalidate", .mustRevalidate), ("private", .isPrivate), ("public", .isPublic),
            ("immutable", .immutable), ("only-if-cached", .onlyIfCached), ("must-understand", .mustUnderstand),
            ("stale-while-revalidate", .staleWhileRevalidate),
        ]

        /// The directive a (lower-cased) name is, nil for one this cache ignores.
        init?(_ lowered: String) {
            guard let found = Self.names.first(where: { String(describing: $0.0) == lowered }) else { return nil }
            self = found.1
        }

        /// The directive `b` names in any case.
        init?(ascii b: UnsafeBufferPointer<UInt8>) {
            for (name, directive) in Self.names where name.utf8CodeUnitCount == b.count {
                let n = name.utf8Start
                var i = 0
                while i < b.count, (b[i] >= 0x41 && b[i] <= 0x5A ? b[i] | 0x20 : b[i]) == n[i] { i += 1 }
                if i == b.count { self = directive; return }
            }
            return nil
        }
    }

    /// delta-seconds is ASCII digits only (RFC 9111 §1.2.2): "½" or "٣" is not a number
    /// here. A malformed or negative number is ignored (nil); a huge one is clamped.
    private static func seconds<C: Collection>(_ digits: C) -> Int? where C.Element == UInt8 {
        guard !digits.isEmpty else { return nil }
        var n = 0
        for c in digits {
            guard c >= 0x30, c <= 0x39 else { return nil }
            let (times, o1) = n.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(Int(c - 0x30))
            if o1 || o2 { return digits.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } ? Int(Int32.max) : nil }
            n = sum
        }
        return n
    }

    /// An ASCII value: the same reading as `readText`'s (members split at ",", a name and an
    /// argument split at the first "=" after the name, space and tab trimmed, a quoted
    /// argument unquoted), without making strings.
    private mutating func read(ascii b: UnsafeBufferPointer<UInt8>) {
        func trimmed(_ lo: Int, _ hi: Int) -> Range<Int> {
            var lo = lo, hi = hi
            while lo < hi, b[lo] == 0x20 || b[lo] == 0x09 { lo += 1 }
            while hi > lo, b[hi - 1] == 0x20 || b[hi - 1] == 0x09 { hi -= 1 }
            return lo..<hi
        }
        var start = 0
        while start < b.count {
            var end = start
            while end < b.count, b[end] != 0x2C { end += 1 }
            defer { start = end + 1 }
            // `split("=", maxSplits: 1)` without empty pieces: "=" before the name skipped.
            var nameStart = start
            while nameStart < end, b[nameStart] == 0x3D { nameStart += 1 }
            guard nameStart < end else { continue }
            var equals = nameStart
            while equals < end, b[equals] != 0x3D { equals += 1 }
            let nameRange = trimmed(nameStart, equals)
            guard let directive = Directive(ascii: UnsafeBufferPointer(rebasing: b[nameRange])) else { continue }
            var seconds: Int?
            if equals + 1 < end {
                var arg = trimmed(equals + 1, end)
                if arg.count >= 2, b[arg.lowerBound] == 0x22, b[arg.upperBound - 1] == 0x22 {
                    arg = arg.lowerBound + 1..<arg.upperBound - 1
                }
                seconds = Self.seconds(b[arg])
            }
            apply(directive, seconds)
        }
    }

    /// Any value, as Unicode text (white space as `CharacterSet.whitespaces` has it).
    private mutating func readText(_ value: String) {
        for part in value.split(separator: ",") {
            let pieces = part.split(separator: "=", maxSplits: 1)
            let name = pieces.first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
            var argument = pieces.count > 1 ? pieces[1].trimmingCharacters(in: .whitespaces) : nil
            if let a = argument, a.hasPrefix("\""), a.hasSuffix("\""), a.count >= 2 { argument = String(a.dropFirst().dropLast()) }
            guard let directive = Directive(name) else { continue }
            apply(directive, argument.flatMap { Self.seconds($0.utf8) })
        }
    }
}

/// RFC 9111 for a private cache: what may be stored, how long it is fresh, how old it
/// is, how to revalidate it, how a request is answered from what is stored (`answer`),
/// how stored parts of a representation combine (`combine`), and how Vary compares
/// requests (`varyValue`). Pure functions, no I/O: the HTTP handler, the session's cache
/// step and `HTTPCache` ask these and decide nothing of their own.
public enum HTTPCacheRules {
    /// Heuristic freshness: this fraction of the time since Last-Modified (§4.2.2),
    /// for statuses that are cacheable by default (or responses marked `public`) only.
    public static let heuristicFraction = 0.1
    /// §15.1 of RFC 9110: statuses that are heuristically cacheable.
    public static let cacheableByDefault: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]
    /// The statuses this cache understands (§3, §5.2.2.3): those RFC 9110 defines, whose
    /// caching requirements it follows (206 included: it stores and combines parts,
    /// §3.3-3.4). 304 is understood as an answer to a revalidation, never stored itself.
    /// A response with `must-understand` and any other status is not stored.
    public static let understoodStatuses: Set<Int> = Set([200, 201, 202, 203, 204, 205, 206,
                                                          300, 301, 302, 303, 307, 308]
                                                         + Array(400...417) + [421, 422, 426] + Array(500...505))

    /// The largest body kept for the cache: what a delegate-driven data task holds back for
    /// it, and what combined parts may grow to (a bigger whole is left to the network).
    public static let maximumBodyBytes = 16 << 20

    static func httpDate(_ text: String?) -> Date? { text.flatMap(HTTPDate.parse) }

    /// The methods whose responses may be stored: GET, and POST under §9.3.3 of RFC 9110.
    public static func mayStoreResponses(to method: String) -> Bool {
        let m = method.uppercased()
        return m == "GET" || m == "POST"
    }

    /// §3: whether a response to `request` may be stored (a private cache: `private`
    /// responses are storable here). The status must be final and valid (200-599); one
    /// the cache does not know (299, 599) is storable with explicit freshness or
    /// `public`; a 206 only as one range of bytes it can combine (§3.3), not content-coded;
    /// `must-understand` stores only understood statuses and then overrides `no-store`
    /// (§5.2.2.3). A POST response only with explicit freshness and a Content-Location
    /// naming the request's own URI (RFC 9110 §9.3.3), to answer later GETs of it.
    public static func isStorable(request: Request, response: Response) -> Bool {
        guard let status = response.statusCode, (200...599).contains(status), status != 304 else { return false }
        if CacheControl(request.headerFields[values: .cacheControl]).noStore { return false }
        let cc = CacheControl(response.headerFields[values: .cacheControl])
        if cc.mustUnderstand {
            guard understoodStatuses.contains(status) else { return false }
        } else if cc.noStore {
            return false
        }
        if varyNames(response).contains("*") { return false }
        let explicit = cc.maxAge != nil || response.headerFields.combined(.expires) != nil
        switch request.method.uppercased() {
        case "GET": break
        case "POST":
            guard explicit, contentLocationIsRequestURI(request: request, response: response) else { return false }
        default: return false
        }
        if status == 206 {
            guard let range = contentRange(response), range.total != nil else { return false }
            let coding = response.headerFields.combined(.contentEncoding)?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
            guard coding.isEmpty || coding == "identity" else { return false }
        }
        return explicit || cc.isPublic || cc.isPrivate || cacheableByDefault.contains(status)
    }

    /// RFC 9110 §9.3.3: the Content-Location, resolved against the request's URI, is that URI.
    static func contentLocationIsRequestURI(request: Request, response: Response) -> Bool {
        guard let value = response.headerFields.combined(.contentLocation)?.trimmingCharacters(in: .whitespaces),
              let target = URL(string: value, relativeTo: request.url)?.absoluteURL else { return false }
        return withoutFragment(target) == withoutFragment(request.url)
    }

    /// The URL's text without its fragment: what identifies a stored response (§2). The
    /// "#" is found in the UTF-8 bytes: a search by Character costs more than the rest
    /// of a cache hit's key.
    public static func withoutFragment(_ url: URL) -> String {
        let text = url.absoluteString
        let at = text.utf8.withContiguousStorageIfAvailable { $0.firstIndex(of: UInt8(ascii: "#")) }
            ?? text.utf8.firstIndex(of: UInt8(ascii: "#")).map { text.utf8.distance(from: text.utf8.startIndex, to: $0) }
        guard let at else { return text }
        return String(decoding: text.utf8.prefix(at), as: UTF8.self)
    }

    /// §4.2.1: max-age, else Expires - Date, else the heuristic (default-cacheable
    /// statuses, or `public`, with Last-Modified), else 0. Dates that are not
    /// HTTP-dates count as absent (Date, Last-Modified) or as the past (Expires).
    public static func freshnessLifetime(_ response: Response) -> TimeInterval {
        freshnessLifetime(response, CacheControl(response.headerFields[values: .cacheControl]), date: nil)
    }

    /// `freshnessLifetime` with the response's Cache-Control read already, and its Date
    /// (nil: read it here, if it is needed).
    static func freshnessLifetime(_ response: Response, _ cc: CacheControl, date parsedDate: Date??) -> TimeInterval {
        func date() -> Date { (parsedDate ?? httpDate(response.headerFields.combined(.date))) ?? Date() }
        if let maxAge = cc.maxAge { return TimeInterval(maxAge) }
        if let expiresText = response.headerFields.combined(.expires) {
            // Only a valid HTTP-date counts (RFC 9111 §5.3): anything else is in the past.
            guard let expires = HTTPDate.parse(expiresText) else { return 0 }
            return max(0, expires.timeIntervalSince(date()))
        }
        if let status = response.statusCode, cacheableByDefault.contains(status) || cc.isPublic,
           let modified = httpDate(response.headerFields.combined(.lastModified)) {
            return max(0, date().timeIntervalSince(modified) * heuristicFraction)
        }
        return 0
    }

    /// §4.2.3: the response's current age. `stored` is when it was received.
    public static func currentAge(_ response: Response, stored: Date, now: Date) -> TimeInterval {
        currentAge(response, date: httpDate(response.headerFields.combined(.date)), stored: stored, now: now)
    }

    /// `currentAge` with the response's Date read already.
    static func currentAge(_ response: Response, date parsed: Date?, stored: Date, now: Date) -> TimeInterval {
        let date = parsed ?? stored
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
        mayServeWhileRevalidating(Stored(cached, now: now), request: request, CacheControl(request.headerFields[values: .cacheControl]))
    }

    static func mayServeWhileRevalidating(_ stored: Stored, request: Request, _ rc: CacheControl) -> Bool {
        let cc = stored.cc
        guard let window = cc.staleWhileRevalidate, !cc.noCache, !cc.mustRevalidate, !rc.noCache,
              !requestSaysNoCache(request, rc) else {
            return false
        }
        return stored.age < stored.lifetime + TimeInterval(window)
    }

    static let pragma = HTTPField.Name("Pragma")!

    /// §5.4: `Pragma: no-cache` means `Cache-Control: no-cache` when the request has no
    /// Cache-Control field of its own.
    static func requestSaysNoCache(_ request: Request) -> Bool {
        requestSaysNoCache(request, CacheControl(request.headerFields[values: .cacheControl]))
    }

    static func requestSaysNoCache(_ request: Request, _ rc: CacheControl) -> Bool {
        if rc.noCache { return true }
        guard request.headerFields.combined(.cacheControl) == nil else { return false }
        return request.headerFields[values: pragma].contains { $0.lowercased().contains("no-cache") }
    }

    /// RFC 9110 §13.1.2 / §13.1.3: whether the client's own validators match the stored
    /// response, so that the cache answers 304 itself.
    public static func clientConditionMatches(_ request: Request, _ response: Response) -> Bool {
        if let inm = request.headerFields.combined(.ifNoneMatch) {
            guard let etag = response.headerFields.combined(.eTag) else { return false }
            func weak(_ tag: String) -> String {
                let t = tag.trimmingCharacters(in: .whitespaces)
                return t.hasPrefix("W/") ? String(t.dropFirst(2)) : t
            }
            return inm.trimmingCharacters(in: .whitespaces) == "*"
                || inm.split(separator: ",").contains { weak(String($0)) == weak(etag) }
        }
        if let ims = request.headerFields.combined(.ifModifiedSince).flatMap(HTTPDate.parse),
           let modified = response.headerFields.combined(.lastModified).flatMap(HTTPDate.parse) {
            return modified <= ims
        }
        return false
    }
    /// The field names a response's Vary lists, lower-cased.
    public static func varyNames(_ response: Response) -> [String] {
        response.headerFields[values: .vary].flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
    }

    /// Request fields whose members are case-insensitive tokens and whose order carries no
    /// meaning (preference is the q parameter): compared sorted and lower-cased.
    static let unorderedListFields: Set<String> = ["accept", "accept-language", "accept-encoding", "accept-charset"]

    /// §4.1: the request's value of a field a Vary names, normalised as the section
    /// allows: several fields combined into one list, list members trimmed of white
    /// space (and around ";" and "="), empty members dropped; for the Accept fields
    /// (language tags, codings, media types, charsets are case-insensitive and their order
    /// means nothing beside q) members lower-cased and sorted. "" when absent.
    public static func varyValue(_ name: String, _ values: [String]) -> String {
        var members: [String] = []
        for value in values {
            var current = "", quoted = false, escaped = false
            for ch in value {
                if escaped { escaped = false; current.append(ch); continue }
                if quoted, ch == "\\" { escaped = true; current.append(ch); continue }
                if ch == "\"" { quoted.toggle() }
                if ch == ",", !quoted { members.append(current); current = ""; continue }
                current.append(ch)
            }
            members.append(current)
        }
        let unordered = unorderedListFields.contains(name.lowercased())
        var normal = members.map { member -> String in
            var m = member.trimmingCharacters(in: .whitespaces)
            if unordered {
                m = m.split(separator: ";").map { param in
                    param.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: "=")
                }.joined(separator: ";").lowercased()
            }
            return m
        }.filter { !$0.isEmpty }
        if unordered { normal.sort() }
        return normal.joined(separator: ",")
    }

    /// §4.2 with the request's own directives: whether the stored response may be used
    /// without asking the server.
    public static func isFresh(_ cached: CachedResponse, request: Request, now: Date) -> Bool {
        isFresh(Stored(cached, now: now), request: request, CacheControl(request.headerFields[values: .cacheControl]))
    }

    /// What answering from a stored response needs to know of it, read once (its
    /// Cache-Control, its Date, its age and lifetime at `now`): the fields are parsed
    /// once per answer, not once per rule that asks.
    struct Stored {
        let cached: CachedResponse
        let cc: CacheControl
        let age: TimeInterval
        let lifetime: TimeInterval
        let now: Date

        init(_ cached: CachedResponse, now: Date) {
            let response = cached.response
            self.cached = cached
            self.now = now
            cc = CacheControl(response.headerFields[values: .cacheControl])
            let date = httpDate(response.headerFields.combined(.date))
            age = currentAge(response, date: date, stored: cached.storedDate ?? now, now: now)
            lifetime = freshnessLifetime(response, cc, date: .some(date))
        }
    }

    static func isFresh(_ stored: Stored, request: Request, _ rc: CacheControl) -> Bool {
        let cc = stored.cc
        if cc.noCache || requestSaysNoCache(request, rc) { return false }
        let age = stored.age
        var lifetime = stored.lifetime
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
        if let etag = cached.response.headerFields.combined(.eTag) { fields.append(("If-None-Match", etag)) }
        if let modified = cached.response.headerFields.combined(.lastModified) { fields.append(("If-Modified-Since", modified)) }
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

    /// §4.3.4: what is stored after a 304 revalidated `cached`: the freshened head
    /// (`head`, as served), without an Age, received `now`.
    public static func refreshed(_ cached: CachedResponse, head: Response, now: Date) -> CachedResponse {
        var r = cached
        r.response = head
        r.response.headerFields[.age] = nil
        r.storedDate = now
        return r
    }

    /// The stored response as served now: with its current Age.
    public static func serving(_ cached: CachedResponse, now: Date) -> Response {
        serving(cached, age: currentAge(cached.response, stored: cached.storedDate ?? now, now: now))
    }

    static func serving(_ cached: CachedResponse, age: TimeInterval) -> Response {
        var r = cached.response
        // RFC 9111 §1.2.2: an age past 2^31 seconds (from a server's "Age: 1e30", say) is sent as 2^31.
        let value = String(age < 2_147_483_648 ? Int(age) : 2_147_483_648)
        // Appended when there is none (a stored response keeps no Age): what the subscript
        // would do, without its general replace-every-field path.
        if r.headerFields[.age] == nil {
            r.headerFields.append(HTTPField(name: .age, value: value))
        } else {
            r.headerFields[.age] = value
        }
        return r
    }

    // MARK: - answering a request

    /// How a request is answered, given what is stored for it: the one decision the HTTP
    /// handler carries out.
    public enum Answer: Sendable {
        /// The stored response as it is (with its Age).
        case stored(Response)
        /// A response the cache makes from what is stored: a 304 to the client's own
        /// validators, one range of bytes (206) or a 416.
        case made(Response, Data)
        /// Stale, inside its stale-while-revalidate window (RFC 5861): served now and
        /// revalidated in the background.
        case storedWhileRevalidating(Response)
        /// §5.2.1.7: only-if-cached and nothing stored answers: a 504, no network.
        case gatewayTimeout(Response)
        /// Ask the server, with `fields` added to the request. `revalidating`: they are
        /// the stored response's validators (a 304 means it is still good).
        /// `completing`: they ask for the rest of a stored part (`Range` and `If-Range`);
        /// a 206 that continues it is combined with it (`completed(_:by:)`).
        case network(fields: [(String, String)], revalidating: Bool, completing: Bool)
    }

    /// RFC 9111 §4: a fresh stored response answers without the network (unless the
    /// policy is to revalidate) — as it is, as a 304 to matching client validators, or
    /// one range of it; an incomplete (206) one answers only a range inside it (§3.3) and
    /// is otherwise completed: `Range` for the bytes after it with `If-Range` (its strong
    /// validator), when it starts at byte 0 and the request is a plain GET; a stale one
    /// inside its stale-while-revalidate window is served and revalidated; a stale one
    /// with validators is revalidated; only-if-cached without a usable one is a 504.
    public static func answer(for request: Request, cached: CachedResponse?, policy: CachePolicy, now: Date) -> Answer {
        let rc = CacheControl(request.headerFields[values: .cacheControl])
        let method = request.method.uppercased()
        let partial = cached.map(isPartial) ?? false
        if let cached, policy != .reloadRevalidatingCacheData {
            let stored = Stored(cached, now: now)
            if isFresh(stored, request: request, rc), let served = fromStore(request, cached, age: stored.age) { return served }
            if !rc.onlyIfCached, !partial, mayServeWhileRevalidating(stored, request: request, rc) {
                return .storedWhileRevalidating(serving(cached, age: stored.age))
            }
        }
        if rc.onlyIfCached {
            var r = Response(url: request.url, mimeType: nil, expectedContentLength: 0, statusCode: 504, headerFields: [:])
            r.statusLine = "HTTP/1.1 504 Gateway Timeout"
            r.headerFields[.contentLength] = "0"
            return .gatewayTimeout(r)
        }
        guard let cached, method == "GET" || method == "HEAD", request.resumeRange == nil else {
            return .network(fields: [], revalidating: false, completing: false)
        }
        if partial {
            let conditional = [HTTPField.Name.ifNoneMatch, .ifModifiedSince, .ifRange, .ifMatch, .ifUnmodifiedSince]
                .contains { request.headerFields[$0] != nil }
            guard method == "GET", request.headerFields.combined(.range) == nil, !conditional,
                  let held = storedRange(cached), held.first == 0, let total = held.total, held.last + 1 < total,
                  let validator = strongValidator(cached.response) else {
                return .network(fields: [], revalidating: false, completing: false)
            }
            return .network(fields: [("Range", "bytes=\(held.last + 1)-"), ("If-Range", validator)], revalidating: false,
                            completing: true)
        }
        // The client's own validators go as they are: its 304 is its own.
        let validators = conditionalHeaders(for: cached)
        let ownValidators = request.headerFields.combined(.ifNoneMatch) != nil || request.headerFields.combined(.ifModifiedSince) != nil
        guard !validators.isEmpty, !ownValidators else { return .network(fields: [], revalidating: false, completing: false) }
        return .network(fields: validators, revalidating: true, completing: false)
    }

    /// A stored response as the answer to `request` without asking the server: as it is,
    /// a 304 to the client's matching validators, or the range it asks for. nil when it
    /// cannot answer: an incomplete (206) response answers only a GET whose one range
    /// lies inside it (§3.3).
    static func fromStore(_ request: Request, _ cached: CachedResponse, age: TimeInterval) -> Answer? {
        let method = request.method.uppercased()
        let served = serving(cached, age: age)
        if isPartial(cached) {
            guard method == "GET", let (r, body) = rangeAnswer(for: request, CachedResponse(response: served, data: cached.data))
            else { return nil }
            return .made(r, body)
        }
        if method == "GET" || method == "HEAD", clientConditionMatches(request, served) {
            var r = served
            r.statusCode = 304
            r.statusLine = "HTTP/1.1 304 Not Modified"
            r.headerFields[.contentLength] = nil
            r.expectedContentLength = 0
            return .made(r, Data())
        }
        if let (r, body) = rangeAnswer(for: request, CachedResponse(response: served, data: cached.data)) { return .made(r, body) }
        return .stored(served)
    }

    /// For the policies that answer from the store whatever its age
    /// (`.returnCacheDataElseLoad`, `.returnCacheDataDontLoad`): what of `cached` answers
    /// `request` — itself, or for an incomplete (206) response the range asked for when
    /// it holds it; nil when it cannot answer (the network, or a failure, then).
    public static func storedAnswer(for request: Request, _ cached: CachedResponse) -> CachedResponse? {
        guard isPartial(cached) else { return cached }
        guard request.method.uppercased() == "GET", let (r, body) = rangeAnswer(for: request, cached) else { return nil }
        return CachedResponse(response: r, data: body, storagePolicy: cached.storagePolicy, storedDate: cached.storedDate)
    }

    /// §4.4: a non-error response to an unsafe method invalidates the target URI and the
    /// same-origin URIs of its Location and Content-Location.
    public static func invalidated(by response: Response, to request: Request) -> [URL] {
        guard let status = response.statusCode, (200..<400).contains(status),
              !["GET", "HEAD", "OPTIONS", "TRACE"].contains(request.method.uppercased()) else { return [] }
        var urls = [request.url]
        for name in [HTTPField.Name.location, .contentLocation] {
            guard let value = response.headerFields.combined(name),
                  let target = URL(string: value, relativeTo: request.url)?.absoluteURL,
                  target.scheme == request.url.scheme, target.host == request.url.host,
                  target.port == request.url.port else { continue }
            urls.append(target)
        }
        return urls
    }
}
