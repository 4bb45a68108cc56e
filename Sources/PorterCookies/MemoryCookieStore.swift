import CPSL
import Foundation
import PorterCore

/// The public suffix list through libpsl (with the system's list from Debian's
/// `publicsuffix`, or libpsl's built-in copy), never a hand-written list.
public final class PublicSuffixList: @unchecked Sendable {
    public static let shared = PublicSuffixList()
    private let context: OpaquePointer?

    private init() {
        context = psl_latest(nil) ?? psl_builtin()
    }

    /// True for "com", "co.uk", "github.io", ... (ICANN and private rules).
    public func isPublicSuffix(_ domain: String) -> Bool {
        guard let context else { return false }
        return psl_is_public_suffix2(context, domain, Int32(PSL_TYPE_ANY)) != 0
    }

    /// The registrable domain ("example.co.uk" for "a.b.example.co.uk"), or nil.
    public func registrableDomain(_ host: String) -> String? {
        guard let context else { return nil }
        // libpsl answers with a pointer into the string it was given: read it while that
        // string is alive (a String passed as `const char *` lives only for the call).
        return host.withCString { name in
            guard let p = psl_registrable_domain(context, name) else { return nil }
            return String(cString: p)
        }
    }
}

/// A change to a store's cookies (what a persistent store writes through).
enum CookieChange: Sendable {
    case stored(Cookie)
    case removed(Cookie)
    case removedAll
}

/// Cookies in memory: indexed by domain, so building a header looks only at the
/// request host's own domain and its parents.
///
/// Limits (RFC 6265 §6.1 asks for at least 50 per domain and 3000 in all): at most
/// `maximumPerDomain` per domain and `maximumTotal` in all. Over a limit, expired
/// cookies go first, then the least recently used.
public final class MemoryCookieStore: CookieStore, @unchecked Sendable {
    /// A store for the whole process, in memory (`.default` sessions use
    /// `PersistentCookieStore.shared`).
    public static let shared = MemoryCookieStore()

    private let lock = NSLock()
    private var byDomain: [String: [Cookie]] = [:]
    private var count = 0
    private var policy = CookieAcceptPolicy.always
    public let maximumPerDomain: Int
    public let maximumTotal: Int
    private let now: @Sendable () -> Date
    /// What changed, for a persistent store built on this one (under the lock).
    private var changes: [CookieChange] = []
    private let changeHandler: (@Sendable ([CookieChange]) -> Void)?

    public init(maximumPerDomain: Int = 180, maximumTotal: Int = 10_000, clock: @escaping @Sendable () -> Date = Date.init) {
        self.maximumPerDomain = maximumPerDomain
        self.maximumTotal = maximumTotal
        self.now = clock
        self.changeHandler = nil
    }

    /// A store that reports every cookie it stores or drops to `onChange`, in order
    /// (after its lock is released): what `PersistentCookieStore` writes through.
    init(maximumPerDomain: Int, maximumTotal: Int, clock: @escaping @Sendable () -> Date,
         onChange: @escaping @Sendable ([CookieChange]) -> Void) {
        self.maximumPerDomain = maximumPerDomain
        self.maximumTotal = maximumTotal
        self.now = clock
        self.changeHandler = onChange
    }

    /// Hands the recorded changes to the handler (not under the lock).
    private func flushChanges() {
        guard let changeHandler else { return }
        let batch = lock.withLock { () -> [CookieChange] in
            defer { changes.removeAll() }
            return changes
        }
        if !batch.isEmpty { changeHandler(batch) }
    }

    /// Under the lock.
    private func note(_ change: CookieChange) {
        if changeHandler != nil { changes.append(change) }
    }

    public var acceptPolicy: CookieAcceptPolicy {
        get { lock.withLock { policy } }
        set { lock.withLock { policy = newValue } }
    }

    public var allCookies: [Cookie] {
        let t = now()
        return lock.withLock { byDomain.values.flatMap { $0 }.filter { !$0.isExpired(at: t) } }
            .sorted { ($0.domain, $0.path, $0.name) < ($1.domain, $1.path, $1.name) }
    }

    public func removeAll() {
        lock.withLock { byDomain.removeAll(); count = 0; note(.removedAll) }
        flushChanges()
    }

    public func deleteCookie(_ cookie: Cookie) {
        lock.withLock {
            guard var list = byDomain[cookie.domain], let i = list.firstIndex(where: { $0.sameIdentity(as: cookie) }) else { return }
            note(.removed(list.remove(at: i)))
            count -= 1
            byDomain[cookie.domain] = list.isEmpty ? nil : list
        }
        flushChanges()
    }

    public func setCookie(_ cookie: Cookie) {
        let t = now()
        lock.withLock { insert(cookie, now: t) }
        flushChanges()
    }

    /// Loads cookies without reporting them as changes (a persistent store's own rows).
    func restore(_ cookies: [Cookie]) {
        let t = now()
        lock.withLock {
            for c in cookies where !c.isExpired(at: t) { insert(c, now: t) }
            changes.removeAll()
        }
    }

    // MARK: - receiving

    public func storeCookies(fromHeaders headers: [String], for url: URL, mainDocumentURL: URL?) {
        guard !headers.isEmpty, let host = CookieRules.canonicalHost(url) else { return }
        let policy = acceptPolicy
        if policy == .never { return }
        if policy == .onlyFromMainDocumentDomain, let main = mainDocumentURL.flatMap(CookieRules.canonicalHost) {
            let site = PublicSuffixList.shared.registrableDomain(main) ?? main
            guard CookieRules.domainMatches(host: host, domain: site) else { return }
        }
        let t = now()
        let scheme = url.scheme?.lowercased() ?? ""
        let secureOrigin = scheme == "https"
        for (i, header) in headers.enumerated() {
            // Cookies of one response keep the order they arrived in (§5.4 orders equal
            // paths by creation time): each is a microsecond younger than the one before.
            guard let parsed = CookieRules.parse(header),
                  let cookie = Self.cookie(from: parsed, host: host, path: url.path(percentEncoded: true),
                                           secureOrigin: secureOrigin, now: t.addingTimeInterval(Double(i) * 1e-6)) else { continue }
            lock.withLock {
                // 6265bis "leave secure cookies alone": an insecure origin may not
                // replace (or shadow) a Secure cookie of the same name.
                if !secureOrigin, byDomain[cookie.domain]?.contains(where: { $0.secure && $0.name == cookie.name }) == true {
                    return
                }
                if cookie.isExpired(at: t) {
                    if var list = byDomain[cookie.domain], let i = list.firstIndex(where: { $0.sameIdentity(as: cookie) }) {
                        note(.removed(list.remove(at: i)))
                        count -= 1
                        byDomain[cookie.domain] = list.isEmpty ? nil : list
                    }
                    return
                }
                insert(cookie, now: t)
            }
        }
        flushChanges()
    }

    /// §5.3 storage model: a parsed header and the request's host to a cookie, or nil
    /// when the cookie must be ignored.
    static func cookie(from p: CookieRules.Parsed, host: String, path: String, secureOrigin: Bool, now: Date) -> Cookie? {
        var expires: Date?
        if let maxAge = p.maxAge {
            expires = maxAge <= 0 ? Date(timeIntervalSince1970: 0)
                : now.addingTimeInterval(TimeInterval(min(maxAge, 400 * 86400)))
        } else if let e = p.expires {
            // 6265bis: no cookie lives longer than 400 days.
            expires = min(e, now.addingTimeInterval(400 * 86400))
        }
        var domain = host
        var hostOnly = true
        if let d = p.domain.map(Punycode.toASCII), !d.isEmpty {
            if PublicSuffixList.shared.isPublicSuffix(d) {
                // A public suffix may only set a cookie for itself (localhost, say).
                guard d == host else { return nil }
            } else {
                // (An IP address matches only itself and stays host-only.)
                guard CookieRules.domainMatches(host: host, domain: d) else { return nil }
                if !CookieRules.isIPAddress(host) {
                    domain = d
                    hostOnly = false
                }
            }
        }
        if p.secure && !secureOrigin { return nil }
        // Cookie prefixes (6265bis §4.1.3).
        let lowerName = p.name.lowercased()
        if lowerName.hasPrefix("__secure-") && !(p.secure && secureOrigin) { return nil }
        if lowerName.hasPrefix("__host-") && !(p.secure && secureOrigin && p.domain == nil && p.path == "/") { return nil }
        var cookie = Cookie(name: p.name, value: p.value, domain: domain, hostOnly: hostOnly,
                            path: p.path ?? CookieRules.defaultPath(of: path), expires: expires, secure: p.secure,
                            httpOnly: p.httpOnly, sameSite: p.sameSite, creation: now)
        cookie.lastAccess = now
        return cookie
    }

    /// Under the lock.
    private func insert(_ cookie: Cookie, now: Date) {
        var c = cookie
        var list = byDomain[c.domain] ?? []
        if let i = list.firstIndex(where: { $0.sameIdentity(as: c) }) {
            c.creation = list[i].creation   // §5.3 step 11.3
            list[i] = c
        } else {
            list.append(c)
            count += 1
        }
        note(.stored(c))
        if list.count > maximumPerDomain {
            let before = list.count
            for gone in list where gone.isExpired(at: now) && !gone.sameIdentity(as: c) { note(.removed(gone)) }
            list.removeAll { $0.isExpired(at: now) && !$0.sameIdentity(as: c) }
            while list.count > maximumPerDomain, let victim = list.indices.filter({ !list[$0].sameIdentity(as: c) })
                    .min(by: { list[$0].lastAccess < list[$1].lastAccess }) {
                note(.removed(list.remove(at: victim)))
            }
            count -= before - list.count
        }
        byDomain[c.domain] = list
        if count > maximumTotal { evictOverall(now: now, keeping: c) }
    }

    private func evictOverall(now: Date, keeping c: Cookie) {
        for (d, list) in byDomain {
            for gone in list where gone.isExpired(at: now) && !gone.sameIdentity(as: c) { note(.removed(gone)) }
            byDomain[d] = list.filter { !$0.isExpired(at: now) || $0.sameIdentity(as: c) }
        }
        byDomain = byDomain.filter { !$0.value.isEmpty }
        count = byDomain.values.reduce(0) { $0 + $1.count }
        guard count > maximumTotal else { return }
        var all = byDomain.values.flatMap { $0 }.filter { !$0.sameIdentity(as: c) }
        all.sort { $0.lastAccess < $1.lastAccess }
        for victim in all.prefix(count - maximumTotal) {
            byDomain[victim.domain]?.removeAll { $0.sameIdentity(as: victim) }
            note(.removed(victim))
        }
        byDomain = byDomain.filter { !$0.value.isEmpty }
        count = byDomain.values.reduce(0) { $0 + $1.count }
    }

    // MARK: - sending

    public func cookies(for url: URL) -> [Cookie] { matching(url, mainDocumentURL: nil) }

    public func cookieHeader(for url: URL, mainDocumentURL: URL?) -> String? {
        let list = matching(url, mainDocumentURL: mainDocumentURL)
        guard !list.isEmpty else { return nil }
        var header = ""
        for c in list {
            if !header.isEmpty { header += "; " }
            header += c.name.isEmpty ? c.value : c.name + "=" + c.value
        }
        return header
    }

    /// §5.4: the cookies for a request, longer paths first, then earlier creation.
    private func matching(_ url: URL, mainDocumentURL: URL?) -> [Cookie] {
        // An empty jar (every request of a client that never got a cookie) answers
        // before the host, path and site are worked out.
        if lock.withLock({ count == 0 }) { return [] }
        defer { flushChanges() }
        guard let host = CookieRules.canonicalHost(url) else { return [] }
        let scheme = url.scheme?.lowercased() ?? ""
        let secure = scheme == "https"
        let path = url.path(percentEncoded: true)
        let t = now()
        // SameSite: a request made for a page of another site gets only SameSite=None
        // cookies (and cookies without the attribute, as browsers did before Lax by default).
        var crossSite = false
        if let main = mainDocumentURL.flatMap(CookieRules.canonicalHost) {
            let a = PublicSuffixList.shared.registrableDomain(main) ?? main
            let b = PublicSuffixList.shared.registrableDomain(host) ?? host
            crossSite = a != b
        }
        // The host's own domain and each parent domain: only those buckets can match.
        var candidates: [String] = [host]
        if !CookieRules.isIPAddress(host) {
            var rest = Substring(host)
            while let dot = rest.firstIndex(of: ".") {
                rest = rest[rest.index(after: dot)...]
                if !rest.isEmpty { candidates.append(String(rest)) }
            }
        }
        return lock.withLock {
            var result: [Cookie] = []
            for domain in candidates {
                guard var list = byDomain[domain] else { continue }
                var changed = false
                var i = 0
                while i < list.count {
                    let c = list[i]
                    if c.isExpired(at: t) {
                        note(.removed(list.remove(at: i)))
                        changed = true
                        continue
                    }
                    let hostOK = c.hostOnly ? host == c.domain : CookieRules.domainMatches(host: host, domain: c.domain)
                    if hostOK, !c.secure || secure, CookieRules.pathMatches(requestPath: path, cookiePath: c.path),
                       !(crossSite && (c.sameSite == .strict || c.sameSite == .lax)) {
                        list[i].lastAccess = t
                        changed = true
                        result.append(list[i])
                    }
                    i += 1
                }
                if changed {
                    count -= (byDomain[domain]?.count ?? 0) - list.count
                    byDomain[domain] = list.isEmpty ? nil : list
                }
            }
            result.sort { a, b in
                a.path.utf8.count != b.path.utf8.count ? a.path.utf8.count > b.path.utf8.count : a.creation < b.creation
            }
            return result
        }
    }
}
