import Foundation

/// One cookie as RFC 6265 (§5.3) stores it.
public struct Cookie: Sendable, Equatable, CustomStringConvertible {
    public enum SameSite: String, Sendable { case strict = "Strict", lax = "Lax", none = "None" }

    public var name: String
    public var value: String
    /// Lower case, ASCII (punycode for IDN), without a leading dot.
    public var domain: String
    /// True: sent to `domain` only; false: to `domain` and its subdomains.
    public var hostOnly: Bool
    public var path: String
    /// nil for a session cookie (never written to disk).
    public var expires: Date?
    public var secure: Bool
    public var httpOnly: Bool
    public var sameSite: SameSite?
    public var creation: Date
    public var lastAccess: Date

    public init(name: String, value: String, domain: String, hostOnly: Bool = true, path: String = "/",
                expires: Date? = nil, secure: Bool = false, httpOnly: Bool = false, sameSite: SameSite? = nil,
                creation: Date = Date()) {
        self.name = name
        self.value = value
        self.domain = domain.lowercased()
        self.hostOnly = hostOnly
        self.path = path
        self.expires = expires
        self.secure = secure
        self.httpOnly = httpOnly
        self.sameSite = sameSite
        self.creation = creation
        self.lastAccess = creation
    }

    public var isSessionCookie: Bool { expires == nil }

    public func isExpired(at now: Date) -> Bool { expires.map { $0 <= now } ?? false }

    /// Same name, domain, host-only flag and path: a new one replaces the old (§5.3 step 11).
    package func sameIdentity(as other: Cookie) -> Bool {
        name == other.name && domain == other.domain && path == other.path && hostOnly == other.hostOnly
    }

    /// The cookie's value never appears in descriptions (they reach logs).
    public var description: String {
        "Cookie(\(name); domain=\(hostOnly ? "" : ".")\(domain); path=\(path)\(secure ? "; secure" : "")"
            + "\(httpOnly ? "; httponly" : "")\(expires.map { "; expires=\(Cookie.wholeSeconds($0))" } ?? "; session"))"
    }

    /// Seconds since 1970, truncated and clamped to Int64 (NaN gives 0): an expiry read
    /// from a cookies.txt may be any number, and Int64(_:) traps outside its range.
    package static func wholeSeconds(_ date: Date) -> Int64 {
        let t = date.timeIntervalSince1970.rounded(.towardZero)
        if t.isNaN { return 0 }
        if t >= 9_223_372_036_854_775_808.0 { return .max }
        if t < -9_223_372_036_854_775_808.0 { return .min }
        return Int64(t)
    }
}

/// Which cookies a store accepts (URLSession's HTTPCookie.AcceptPolicy).
public enum CookieAcceptPolicy: Sendable, Equatable {
    case always
    case never
    /// Only from a response whose host is in the registrable domain of the request's
    /// `mainDocumentURL` (all, when the request has none).
    case onlyFromMainDocumentDomain
}

/// RFC 6265 §5.1 and §5.2: the parts of a Set-Cookie header and how hosts, paths and
/// dates compare. Pure functions, no I/O.
public enum CookieRules {
    // MARK: - dates (§5.1.1)

    /// Parses a cookie date the way RFC 6265 §5.1.1 says user agents must: RFC 1123,
    /// RFC 850, asctime() and the Netscape forms all fall out of one token algorithm.
    public static func parseDate(_ text: String) -> Date? {
        var tokens: [[UInt8]] = []
        var current: [UInt8] = []
        for b in text.utf8 {
            let delimiter = b == 0x09 || (0x20...0x2F).contains(b) || (0x3B...0x40).contains(b)
                || (0x5B...0x60).contains(b) || (0x7B...0x7E).contains(b)
            if delimiter {
                if !current.isEmpty { tokens.append(current); current = [] }
            } else {
                current.append(b)
            }
        }
        if !current.isEmpty { tokens.append(current) }

        func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }
        /// Leading digits (between min and max of them) followed by nothing or a non-digit.
        func number(_ t: [UInt8], min: Int, max: Int) -> Int? {
            var n = 0, count = 0
            // Digits past `max` are counted, not added: a long run must fail, not overflow.
            while count < t.count, isDigit(t[count]) {
                if count < max { n = n * 10 + Int(t[count] - 0x30) }
                count += 1
            }
            guard count >= min, count <= max else { return nil }
            return n
        }
        var time: (Int, Int, Int)?
        var day: Int?, month: Int?, year: Int?
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        for t in tokens {
            if time == nil {
                // 1*2DIGIT ":" 1*2DIGIT ":" 1*2DIGIT ( non-digit *OCTET )
                let parts = t.split(separator: UInt8(ascii: ":"), maxSplits: 2, omittingEmptySubsequences: false)
                if parts.count == 3, let h = number(Array(parts[0]), min: 1, max: 2), parts[0].allSatisfy(isDigit),
                   let m = number(Array(parts[1]), min: 1, max: 2), parts[1].allSatisfy(isDigit),
                   let s = number(Array(parts[2]), min: 1, max: 2) {
                    time = (h, m, s)
                    continue
                }
            }
            if day == nil, let d = number(t, min: 1, max: 2) { day = d; continue }
            if month == nil, t.count >= 3 {
                let prefix = String(decoding: t.prefix(3), as: UTF8.self).lowercased()
                if let i = months.firstIndex(of: prefix) { month = i + 1; continue }
            }
            if year == nil, let y = number(t, min: 2, max: 4) { year = y; continue }
        }
        guard let (h, m, s) = time, let d = day, let mo = month, var y = year else { return nil }
        if (70...99).contains(y) { y += 1900 } else if (0...69).contains(y) { y += 2000 }
        guard (1...31).contains(d), y >= 1601, h <= 23, m <= 59, s <= 59 else { return nil }
        let daysInMonth = [31, (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard d <= daysInMonth[mo - 1] else { return nil }
        // Days from 1970-01-01 (proleptic Gregorian), without the C library's time zone.
        func daysFromCivil(_ y: Int, _ m: Int, _ d: Int) -> Int {
            let y2 = m <= 2 ? y - 1 : y
            let era = (y2 >= 0 ? y2 : y2 - 399) / 400
            let yoe = y2 - era * 400
            let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
            let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
            return era * 146097 + doe - 719468
        }
        let seconds = daysFromCivil(y, mo, d) * 86400 + h * 3600 + m * 60 + s
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// Formats a date for a Set-Cookie Expires attribute (RFC 1123, GMT).
    public static func formatDate(_ date: Date) -> String {
        var t = time_t(date.timeIntervalSince1970.rounded(.down))
        var v = tm()
        gmtime_r(&t, &v)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        return String(format: "%@, %02d %@ %04d %02d:%02d:%02d GMT", days[Int(v.tm_wday)], Int(v.tm_mday),
                      months[Int(v.tm_mon)], Int(v.tm_year) + 1900, Int(v.tm_hour), Int(v.tm_min), Int(v.tm_sec))
    }

    // MARK: - hosts and paths (§5.1.3, §5.1.4)

    /// An IPv4 or IPv6 literal (as URL.host gives it, with or without brackets).
    public static func isIPAddress(_ host: String) -> Bool {
        var h = host
        if h.hasPrefix("[") && h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, h, &v4) == 1 || inet_pton(AF_INET6, h, &v6) == 1
    }

    /// §5.1.3: the host is the domain, or a name under it (never for IP addresses).
    public static func domainMatches(host: String, domain: String) -> Bool {
        if host == domain { return true }
        guard host.count > domain.count, host.hasSuffix(domain), !isIPAddress(host) else { return false }
        return host.utf8.reversed().dropFirst(domain.utf8.count).first == UInt8(ascii: ".")
    }

    /// §5.1.4: the default path of a request URI's path.
    public static func defaultPath(of urlPath: String) -> String {
        guard urlPath.hasPrefix("/"), let last = urlPath.lastIndex(of: "/"), last != urlPath.startIndex else { return "/" }
        return String(urlPath[..<last])
    }

    /// §5.1.4: request path matches cookie path.
    public static func pathMatches(requestPath: String, cookiePath: String) -> Bool {
        let request = requestPath.isEmpty ? "/" : requestPath
        if request == cookiePath { return true }
        guard request.hasPrefix(cookiePath) else { return false }
        if cookiePath.hasSuffix("/") { return true }
        return request.utf8.dropFirst(cookiePath.utf8.count).first == UInt8(ascii: "/")
    }

    /// The host of a URL as cookies compare it: lower case, ASCII (IDN to punycode),
    /// no brackets for IPv6, no trailing dot.
    public static func canonicalHost(_ url: URL) -> String? {
        guard var host = url.host(percentEncoded: false), !host.isEmpty else { return nil }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host.hasSuffix(".") { host.removeLast() }
        return Punycode.toASCII(host.lowercased())
    }

    // MARK: - Set-Cookie (§5.2)

    /// The parts of one Set-Cookie header value, before the storage rules.
    public struct Parsed: Sendable, Equatable {
        public var name: String
        public var value: String
        public var expires: Date?
        /// Seconds; wins over `expires` when present.
        public var maxAge: Int64?
        public var domain: String?
        public var path: String?
        public var secure = false
        public var httpOnly = false
        public var sameSite: Cookie.SameSite?
    }

    /// §5.2 (with 6265bis's empty names): nil when the header is to be ignored.
    public static func parse(_ header: String) -> Parsed? {
        func trim(_ s: Substring) -> String { s.trimmingCharacters(in: CharacterSet(charactersIn: " \t")) }
        // Control characters (other than tab) make the whole header invalid (6265bis).
        if header.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\t") || $0.value == 0x7F }) { return nil }
        let pieces = header.split(separator: ";", omittingEmptySubsequences: false)
        guard let pair = pieces.first else { return nil }
        var name = "", value = ""
        if let eq = pair.firstIndex(of: "=") {
            name = trim(pair[..<eq])
            value = trim(pair[pair.index(after: eq)...])
        } else {
            value = trim(pair)
        }
        if name.isEmpty && value.isEmpty { return nil }
        if name.utf8.count + value.utf8.count > 4096 { return nil }
        var p = Parsed(name: name, value: value)
        for attribute in pieces.dropFirst() {
            let eq = attribute.firstIndex(of: "=")
            let key = trim(eq.map { attribute[..<$0] } ?? attribute[...]).lowercased()
            let raw = eq.map { trim(attribute[attribute.index(after: $0)...]) } ?? ""
            if raw.utf8.count > 1024 { continue }
            switch key {
            case "expires":
                if let d = parseDate(raw) { p.expires = d }
            case "max-age":
                guard let first = raw.first, first == "-" || (first.isASCII && first.isNumber),
                      raw.dropFirst().allSatisfy({ $0.isASCII && $0.isNumber }) else { continue }
                p.maxAge = Int64(raw) ?? (first == "-" ? Int64.min : Int64.max)
            case "domain":
                guard !raw.isEmpty else { continue }
                let d = raw.hasPrefix(".") ? String(raw.dropFirst()) : raw
                p.domain = d.lowercased()
            case "path":
                p.path = raw.hasPrefix("/") ? raw : nil
            case "secure": p.secure = true
            case "httponly": p.httpOnly = true
            case "samesite":
                switch raw.lowercased() {
                case "strict": p.sameSite = .strict
                case "lax": p.sameSite = .lax
                case "none": p.sameSite = Cookie.SameSite.none
                default: p.sameSite = nil
                }
            default: continue
            }
        }
        return p
    }
}

/// RFC 3492 Punycode for IDN host names (the ASCII form cookies are compared in).
public enum Punycode {
    /// "bücher.test" -> "xn--bcher-kva.test"; ASCII labels unchanged.
    public static func toASCII(_ host: String) -> String {
        guard !host.allSatisfy(\.isASCII) else { return host }
        return host.split(separator: ".", omittingEmptySubsequences: false).map { label in
            label.allSatisfy(\.isASCII) ? String(label) : "xn--" + encode(Array(label.unicodeScalars.map(\.value)))
        }.joined(separator: ".")
    }

    static func encode(_ input: [UInt32]) -> String {
        let base: UInt32 = 36, tMin: UInt32 = 1, tMax: UInt32 = 26, skew: UInt32 = 38, damp: UInt32 = 700
        func digit(_ d: UInt32) -> Character { Character(UnicodeScalar(d < 26 ? d + 97 : d + 22)!) }
        func adapt(_ delta: UInt32, _ numPoints: UInt32, _ first: Bool) -> UInt32 {
            var delta = first ? delta / damp : delta / 2
            delta += delta / numPoints
            var k: UInt32 = 0
            while delta > ((base - tMin) * tMax) / 2 { delta /= base - tMin; k += base }
            return k + (base - tMin + 1) * delta / (delta + skew)
        }
        var output = String(input.filter { $0 < 0x80 }.map { Character(UnicodeScalar($0)!) })
        let basic = UInt32(output.count)
        var handled = basic
        if basic > 0 { output.append("-") }
        var n: UInt32 = 0x80, delta: UInt32 = 0, bias: UInt32 = 72
        while handled < UInt32(input.count) {
            let m = input.filter { $0 >= n }.min() ?? n
            delta &+= (m - n) &* (handled + 1)
            n = m
            for c in input {
                if c < n { delta &+= 1 }
                if c == n {
                    var q = delta
                    var k = base
                    while true {
                        let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                        if q < t { break }
                        output.append(digit(t + (q - t) % (base - t)))
                        q = (q - t) / (base - t)
                        k += base
                    }
                    output.append(digit(q))
                    bias = adapt(delta, handled + 1, handled == basic)
                    delta = 0
                    handled += 1
                }
            }
            delta &+= 1
            n &+= 1
        }
        return output
    }
}
