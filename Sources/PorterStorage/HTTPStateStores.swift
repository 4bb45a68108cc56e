import Foundation
import PorterCore

/// One known HSTS host (RFC 6797 §5.1): `host` (lower case, no trailing dot) is reached
/// over https only until `expires` (nil: never expires, curl's "unlimited"), and its
/// subdomains too when `includesSubdomains`.
public struct HSTSEntry: Sendable, Hashable {
    public var host: String
    public var includesSubdomains: Bool
    public var expires: Date?
    public init(host: String, includesSubdomains: Bool, expires: Date?) {
        self.host = host
        self.includesSubdomains = includesSubdomains
        self.expires = expires
    }
}

/// The HTTP Strict Transport Security store (RFC 6797): hosts that said, over a verified
/// https connection, that they want https only. A load of `http://` for such a host is
/// upgraded to `https://` before anything is sent (the handler reports it as a
/// "307 Internal Redirect", as browsers do). Kept in memory, and, when made with a
/// `path`, in curl's HSTS cache file format (`host "YYYYMMDD HH:MM:SS"`, a leading dot
/// for includeSubDomains), so `porter --hsts` and `curl --hsts` share files.
///
/// - Learned only from a response over https whose certificate verified (§8.1): never
///   from plain http, never when verification is off or the delegate trusted the server
///   by hand; never for an IP address (§8.1.1).
/// - `max-age=0` removes the host (§6.1.1); an expired entry is gone (§5.3).
/// - A persistent store re-reads its file when another process replaced it, and writes
///   each change through as read–modify–write of the file (rename over it, mode 0600).
///
/// Every method may be called from any thread.
public final class HSTSStore: StrictTransportStore, @unchecked Sendable {
    /// The file, or nil for a memory store.
    public let path: String?
    private let clock: @Sendable () -> Date
    private struct State {
        var entries: [String: HSTSEntry] = [:]
        /// The file as last read or written (inode, size, mtime): re-read when it changes.
        var fileStamp: [Int] = []
    }
    private let state = Locked(State())

    /// A memory store (ephemeral sessions).
    public init(clock: @escaping @Sendable () -> Date = Date.init) {
        path = nil
        self.clock = clock
    }

    /// A store kept in `path` (curl's format). `requirePrivate` (the default stores):
    /// the folder is made 0700 and checked, and a file that is not this user's own
    /// regular file, or that others may read, is refused. Throws `PorterError`.
    public init(path: String, requirePrivate: Bool = true, clock: @escaping @Sendable () -> Date = Date.init) throws {
        self.path = path
        self.clock = clock
        if requirePrivate {
            try PrivateFiles.makeFolder(PathText.parent(of: path))
            try PrivateFiles.refuseIfOthersCanRead(path, what: "the HSTS store")
        }
        try state.withLock { s in try reloadIfChanged(&s, force: true) }
    }

    /// `$XDG_DATA_HOME/porter/hsts.txt` (or `~/.local/share/porter/hsts.txt`).
    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        (XDG.dataHome(environment: environment) ?? NSHomeDirectory() + "/.local/share") + "/porter/hsts.txt"
    }

    /// The store `.default` sessions share (opened on first use); a memory store, with a
    /// warning, when the file cannot be used.
    public static let shared: HSTSStore = {
        do {
            return try HSTSStore(path: defaultPath())
        } catch {
            FileHandle.standardError.write(Data("porter: the HSTS store stays in memory: \(error)\n".utf8))
            return HSTSStore()
        }
    }()

    // MARK: - the rules

    /// The https URL a load of `url` must use instead, or nil when `url` is not `http:`
    /// or its host is not a known HSTS host (RFC 6797 §8.3: the port is kept unless it
    /// is 80, which becomes https' default).
    public func upgradedURL(for url: URL) -> URL? {
        guard url.scheme?.lowercased() == "http", let host = url.host, isKnown(host: host) else { return nil }
        guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return nil }
        parts.scheme = "https"
        if parts.port == 80 { parts.port = nil }
        return parts.url
    }

    /// Whether `host` is a known HSTS host: a congruent match, or a superdomain match
    /// with includeSubDomains (§8.2). IP addresses never are.
    public func isKnown(host: String) -> Bool {
        guard let name = HSTSStore.domainName(host) else { return false }
        let now = clock()
        return state.withLock { s -> Bool in
            try? reloadIfChanged(&s, force: false)
            if let e = s.entries[name], e.expires.map({ $0 > now }) ?? true { return true }
            var rest = Substring(name)
            while let dot = rest.firstIndex(of: ".") {
                rest = rest[rest.index(after: dot)...]
                if let e = s.entries[String(rest)], e.includesSubdomains, e.expires.map({ $0 > now }) ?? true { return true }
            }
            return false
        }
    }

    /// Applies a `Strict-Transport-Security` field value (the first such field of a
    /// response, §8.1) received for `host` over a verified https connection. A value that
    /// does not parse (no max-age, a directive twice, a bad number) is ignored, as §6.1
    /// says. Returns true when the value was taken.
    @discardableResult
    public func noteHeader(_ value: String, host: String) -> Bool {
        guard let name = HSTSStore.domainName(host), let (maxAge, subdomains) = HSTSStore.parseHeader(value) else { return false }
        let now = clock()
        if maxAge == 0 {
            change { entries in entries[name] = nil }
            return true
        }
        // At most a hundred years ahead: the file's dates stay four-digit years.
        let expires = now.addingTimeInterval(TimeInterval(min(maxAge, 100 * 365 * 86400)))
        let entry = HSTSEntry(host: name, includesSubdomains: subdomains, expires: expires)
        let current = state.withLock { $0.entries[name] }
        // The same answer again (every response of an HSTS site carries it): the file is
        // rewritten only when the entry changes by more than a minute.
        if let current, current.includesSubdomains == subdomains, let old = current.expires, abs(old.timeIntervalSince(expires)) < 60 {
            return true
        }
        change { entries in entries[name] = entry }
        return true
    }

    /// Every entry that has not expired, by host.
    public var entries: [HSTSEntry] {
        let now = clock()
        return state.withLock { s in
            try? reloadIfChanged(&s, force: false)
            return s.entries.values.filter { $0.expires.map { $0 > now } ?? true }.sorted { $0.host < $1.host }
        }
    }

    /// Adds (or replaces) an entry as is (a preload list, a test).
    public func add(_ entry: HSTSEntry) {
        guard let name = HSTSStore.domainName(entry.host) else { return }
        var e = entry
        e.host = name
        change { $0[name] = e }
    }

    public func remove(host: String) {
        guard let name = HSTSStore.domainName(host) else { return }
        change { $0[name] = nil }
    }

    public func removeAll() { change { $0.removeAll() } }

    /// `host` lower-cased without a trailing dot; nil for an IP address or an empty name.
    static func domainName(_ host: String) -> String? {
        var h = host.lowercased()
        if h.hasPrefix("[") || h.contains(":") { return nil }  // IPv6
        while h.hasSuffix(".") { h.removeLast() }
        guard !h.isEmpty, !h.hasPrefix("."), !h.contains(".."),
              h.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") }) else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, h, &v4) == 1 { return nil }
        // "1.2.3" and other short numeric forms URL parsers take as IPv4 addresses.
        if h.split(separator: ".").last.map({ $0.allSatisfy(\.isNumber) }) == true { return nil }
        return h
    }

    /// RFC 6797 §6.1: `max-age` (required, digits, quoted or not) and `includeSubDomains`
    /// (no value), names in any case, each at most once; other directives are ignored.
    static func parseHeader(_ value: String) -> (maxAge: Int, includeSubdomains: Bool)? {
        var maxAge: Int?
        var subdomains = false
        var seen = Set<String>()
        for part in value.split(separator: ";", omittingEmptySubsequences: false) {
            let directive = part.trimmingCharacters(in: .whitespaces)
            if directive.isEmpty { continue }
            let pieces = directive.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = pieces[0].trimmingCharacters(in: .whitespaces).lowercased()
            guard seen.insert(name).inserted else { return nil }
            var argument = pieces.count > 1 ? pieces[1].trimmingCharacters(in: .whitespaces) : nil
            if let a = argument, a.count >= 2, a.hasPrefix("\""), a.hasSuffix("\"") { argument = String(a.dropFirst().dropLast()) }
            switch name {
            case "max-age":
                guard let a = argument, !a.isEmpty, a.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
                // Digits beyond Int's range: as long as can be.
                maxAge = Int(a) ?? Int.max
            case "includesubdomains":
                guard argument == nil else { return nil }
                subdomains = true
            default:
                continue
            }
        }
        guard let maxAge else { return nil }
        return (maxAge, subdomains)
    }

    // MARK: - curl's file format

    /// Parses curl's HSTS cache file: `[.]host "YYYYMMDD HH:MM:SS"` (or `"unlimited"`)
    /// per line, `#` comments. Malformed lines are skipped.
    public static func parse(_ text: String) -> [HSTSEntry] {
        var out: [HSTSEntry] = []
        for raw in text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let space = line.firstIndex(where: { $0 == " " || $0 == "\t" }) else { continue }
            var host = String(line[..<space])
            var stamp = line[space...].trimmingCharacters(in: .whitespaces)
            guard stamp.count >= 2, stamp.hasPrefix("\""), stamp.hasSuffix("\"") else { continue }
            stamp = String(stamp.dropFirst().dropLast())
            let subdomains = host.hasPrefix(".")
            if subdomains { host.removeFirst() }
            guard let name = domainName(host), host.count <= 256 else { continue }
            let expires: Date?
            if stamp == "unlimited" {
                expires = nil
            } else {
                guard let date = parseStamp(stamp) else { continue }
                expires = date
            }
            out.append(HSTSEntry(host: name, includesSubdomains: subdomains, expires: expires))
        }
        return out
    }

    /// curl's HSTS cache file for `entries`.
    public static func serialize(_ entries: [HSTSEntry]) -> String {
        var text = "# Your HSTS cache. https://curl.se/docs/hsts.html\n# This file was generated by Porter (curl's format). Edit at your own risk.\n"
        for e in entries.sorted(by: { $0.host < $1.host }) {
            text += (e.includesSubdomains ? "." : "") + e.host + " \"" + (e.expires.map(formatStamp) ?? "unlimited") + "\"\n"
        }
        return text
    }

    /// "YYYYMMDD HH:MM:SS" in UTC.
    static func parseStamp(_ s: String) -> Date? {
        let u = Array(s.utf8)
        guard u.count == 17, u[8] == 0x20, u[11] == 0x3A, u[14] == 0x3A else { return nil }
        func num(_ r: Range<Int>) -> Int? {
            var v = 0
            for i in r {
                guard u[i] >= 0x30, u[i] <= 0x39 else { return nil }
                v = v * 10 + Int(u[i] - 0x30)
            }
            return v
        }
        guard let y = num(0..<4), let mo = num(4..<6), let d = num(6..<8), let h = num(9..<11), let mi = num(12..<14),
              let sec = num(15..<17), (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, sec < 61, y >= 1970 else { return nil }
        var parts = DateComponents()
        parts.calendar = Calendar(identifier: .gregorian)
        parts.timeZone = TimeZone(identifier: "UTC")
        (parts.year, parts.month, parts.day, parts.hour, parts.minute, parts.second) = (y, mo, d, h, mi, sec)
        return parts.date
    }

    static func formatStamp(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        func two(_ v: Int?) -> String { let n = v ?? 0; return n < 10 ? "0\(n)" : "\(n)" }
        return String(format: "%04d", c.year ?? 1970) + two(c.month) + two(c.day) + " " + two(c.hour) + ":" + two(c.minute) + ":" + two(c.second)
    }

    // MARK: - the file

    private func change(_ edit: (inout [String: HSTSEntry]) -> Void) {
        state.withLock { s in
            // Read–modify–write: another process's entries written meanwhile are kept.
            try? reloadIfChanged(&s, force: false)
            edit(&s.entries)
            guard let path else { return }
            let now = clock()
            let live = s.entries.values.filter { $0.expires.map { $0 > now } ?? true }
            if PrivateFiles.writeAtomically(Data(HSTSStore.serialize(live).utf8), to: path) {
                s.fileStamp = HSTSStore.stamp(path)
            }
        }
    }

    private static func stamp(_ path: String) -> [Int] {
        var st = stat()
        guard stat(path, &st) == 0 else { return [] }
        return [Int(st.st_ino), Int(st.st_size), Int(st.st_mtim.tv_sec), Int(st.st_mtim.tv_nsec)]
    }

    private func reloadIfChanged(_ s: inout State, force: Bool) throws {
        guard let path else { return }
        let now = HSTSStore.stamp(path)
        guard force || now != s.fileStamp else { return }
        s.fileStamp = now
        guard !now.isEmpty else { s.entries = [:]; return }
        // At most 16 MiB: a planted endless file is not read whole.
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw PorterError(.noPermissionsToReadFile, "cannot read the HSTS store \(path)")
        }
        defer { try? handle.close() }
        let data = (try? handle.read(upToCount: 16 << 20)) ?? Data()
        var entries: [String: HSTSEntry] = [:]
        for e in HSTSStore.parse(String(decoding: data, as: UTF8.self)) { entries[e.host] = e }
        s.entries = entries
    }
}

/// The alternative-services cache (RFC 7838): where a server said it can also be reached
/// (`Alt-Svc: h2=":8443"`). libcurl keeps and uses it (CURLOPT_ALTSVC) in curl's alt-svc
/// cache file, shared with `curl --alt-svc` and `porter --alt-svc`; libcurl reads the
/// file when a load starts and writes it, whole, when a load that received an Alt-Svc
/// field ends. Alternatives are learned from and used for https origins only (libcurl's
/// rule), and an alternative's certificate must be valid for the origin's host.
public final class AltSvcCache: AlternativeServiceCache, Sendable {
    public let path: String

    /// A cache in `path`. `requirePrivate` (the default stores): the folder is made 0700
    /// and checked, and a file that is not this user's own regular file, or that others
    /// may read, is refused. Throws `PorterError`.
    public init(path: String, requirePrivate: Bool = true) throws {
        self.path = path
        if requirePrivate {
            try PrivateFiles.makeFolder(PathText.parent(of: path))
            try PrivateFiles.refuseIfOthersCanRead(path, what: "the alt-svc cache")
        }
    }

    /// `$XDG_CACHE_HOME/porter/alt-svc.txt` (or `~/.cache/porter/alt-svc.txt`).
    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        (XDG.cacheHome(environment: environment) ?? NSHomeDirectory() + "/.cache") + "/porter/alt-svc.txt"
    }

    /// The cache `.default` sessions share; nil (no alternative services), with a
    /// warning, when the file cannot be used.
    public static let shared: AltSvcCache? = {
        do {
            return try AltSvcCache(path: defaultPath())
        } catch {
            FileHandle.standardError.write(Data("porter: no alt-svc cache: \(error)\n".utf8))
            return nil
        }
    }()
}
