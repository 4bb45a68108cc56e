import Foundation
import HTTPTypes
import PorterCore

/// RFC 9111 as a private cache: responses to GET keyed by URL (no fragment) and the
/// request's values of the response's `Vary` fields; HEAD answered from a stored GET.
/// A memory tier of `memoryCapacity` bytes in front of an optional disk tier of
/// `diskCapacity` bytes (`HTTPDiskCache`), each evicting the least recently used first;
/// both count an entry's head as well as its body (`headBytes`), and a response whose
/// head is over `maximumHeadBytes` is not stored;
/// `.allowedInMemoryOnly` responses stay off the disk. Storing follows
/// `HTTPCacheRules.isStorable`; a part (206) is combined with the part stored for the
/// same variant by `HTTPCacheRules.combine` (RFC 9111 §3.4); the request values Vary
/// names are compared as `HTTPCacheRules.varyValue` normalises them (§4.1); freshness
/// and revalidation are the handler's (the HTTP handler asks `HTTPCacheRules.answer`).
public final class HTTPCache: ResponseCache, @unchecked Sendable {
    private struct Variant {
        var cached: CachedResponse
        var varyValues: [String: String]   // header name (lower case) -> request value ("" when absent)
        var lastUsed: UInt64
        var size: Int
        /// Its key is in `usedSinceFlush` (so a hit does not hash it again).
        var awaitsFlush = false
    }
    private let lock = NSLock()
    private var entries: [String: [Variant]] = [:]
    private var bytes = 0
    private var tick: UInt64 = 0
    /// Keys the memory tier answered since the disk tier last heard of it: their use is
    /// written to the disk index in one transaction (`flushRecency`), at most every
    /// `recencyInterval` or `recencyBatch` keys, never once per hit. A process killed
    /// before a flush loses only that recency, never an entry.
    private var usedSinceFlush: [String] = []
    private var lastFlush = DispatchTime.now()
    static let recencyInterval: UInt64 = 1_000_000_000   // ns
    static let recencyBatch = 256
    public let memoryCapacity: Int
    private let disk: HTTPDiskCache?

    /// A memory-only cache (what `.ephemeral` sessions get).
    public init(memoryCapacity: Int = 16 << 20) {
        self.memoryCapacity = memoryCapacity
        self.disk = nil
    }

    /// A cache with a disk tier in `directory` (created 0700).
    public init(memoryCapacity: Int = 16 << 20, diskCapacity: Int, directory: String) throws {
        self.memoryCapacity = memoryCapacity
        self.disk = try HTTPDiskCache(directory: directory, capacity: diskCapacity)
    }

    /// The cache `.default` sessions share: 16 MiB in memory, 256 MiB in
    /// `$XDG_CACHE_HOME/porter/http` (or `~/.cache/porter/http`); memory only, with a
    /// warning, when that folder cannot be used.
    public static let shared: HTTPCache = {
        do {
            return try HTTPCache(diskCapacity: 256 << 20, directory: defaultDirectory())
        } catch {
            FileHandle.standardError.write(Data("porter: the HTTP cache stays in memory: \(error)\n".utf8))
            return HTTPCache()
        }
    }()

    public static func defaultDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        (XDG.cacheHome(environment: environment) ?? NSHomeDirectory() + "/.cache") + "/porter/http"
    }

    /// Where the disk tier lives, if there is one.
    public var directory: String? { disk?.directory }

    /// Bytes and entries in each tier.
    public var statistics: (memoryBytes: Int, memoryEntries: Int, diskBytes: Int, diskEntries: Int) {
        let (mb, me) = lock.withLock { (bytes, entries.values.reduce(0) { $0 + $1.count }) }
        let (db, de) = disk?.usage ?? (0, 0)
        return (mb, me, db, de)
    }

    public var currentMemoryUsage: Int { lock.withLock { bytes } }

    /// The largest stored head an entry may have: its status line, its fields and the
    /// request values its `Vary` names, counted as `headBytes` counts them. A response
    /// with a bigger head is not stored (browsers and curl bound heads too; libcurl takes
    /// up to 300 KiB, and a cache holding thousands of such heads would dwarf its bodies).
    public static let maximumHeadBytes = 64 << 10

    /// What an entry's head costs, in bytes of text: the status line, each field's name
    /// and value (with ": " and CR LF), the URL, and the request's Vary values with their
    /// names. Both tiers count it besides the body; `maximumHeadBytes` bounds it.
    public static func headBytes(_ response: Response, vary: [String: String]) -> Int {
        var n = response.url.absoluteString.utf8.count + (response.statusLine?.utf8.count ?? 0) + 2
            + (response.mimeType?.utf8.count ?? 0) + (response.textEncodingName?.utf8.count ?? 0)
        for f in response.headerFields { n += f.name.rawName.utf8.count + f.value.utf8.count + 4 }
        for (k, v) in vary { n += k.utf8.count + v.utf8.count + 2 }
        return n
    }

    /// An entry's cost in the memory tier: its body, its head, and a fixed 512 bytes plus
    /// 64 a field for the values that hold them.
    static func memoryCost(_ c: CachedResponse, vary: [String: String]) -> Int {
        c.data.count + headBytes(c.response, vary: vary) + 512 + 64 * c.response.headerFields.count
    }
    public var count: Int { lock.withLock { entries.values.reduce(0) { $0 + $1.count } } }

    static func key(_ url: URL) -> String { HTTPCacheRules.withoutFragment(url) }

    /// The pseudo-field every stored variant carries: the partition it was fetched under.
    /// Its name holds a space, so no real header field can be called that.
    static let partitionField = " porter-trust"

    private static func value(_ request: Request, _ name: String) -> String {
        if name == partitionField { return request.cachePartition }
        guard let n = HTTPField.Name(name) else { return "" }
        return HTTPCacheRules.varyValue(name, request.headerFields[values: n])
    }

    public func cachedResponse(for request: Request) -> CachedResponse? {
        guard request.method == "GET" || request.method == "HEAD" else { return nil }
        let key = Self.key(request.url)
        if let (hit, flushDue) = memoryLookup(key, request) {
            if flushDue { flushRecency() }
            return hit
        }
        guard let disk else { return nil }
        for (vary, cached) in disk.lookup(key: key) where Self.matches(vary, request) {
            insertInMemory(key: key, vary: vary, cached: cached)
            return cached
        }
        return nil
    }

    /// The variant that answers `request`, marked used; and whether the recency the
    /// disk index is owed should be written now.
    private func memoryLookup(_ key: String, _ request: Request) -> (CachedResponse, flushDue: Bool)? {
        lock.withLock {
            // In place: a copy of the variant list taken out and written back would be
            // copied again, on every hit.
            guard let slot = entries.index(forKey: key),
                  let i = entries.values[slot].firstIndex(where: { Self.matches($0.varyValues, request) }) else { return nil }
            tick += 1
            entries.values[slot][i].lastUsed = tick
            guard disk != nil else { return (entries.values[slot][i].cached, false) }
            if !entries.values[slot][i].awaitsFlush {
                entries.values[slot][i].awaitsFlush = true
                usedSinceFlush.append(key)
            }
            let due = usedSinceFlush.count >= Self.recencyBatch
                || DispatchTime.now().uptimeNanoseconds - lastFlush.uptimeNanoseconds >= Self.recencyInterval
            return (entries.values[slot][i].cached, due)
        }
    }

    /// Writes to the disk index when the memory tier last answered for each key it
    /// answered since the last flush (for the disk tier's least-recently-used order,
    /// which another process, or this one after a restart, evicts by). Called every
    /// second or so while hits come, and when the cache goes; a program that ends
    /// without letting it go (the CLI, a shared cache) calls it before it exits.
    public func flushRecency() {
        guard let disk else { return }
        let keys = lock.withLock { () -> [String] in
            lastFlush = DispatchTime.now()
            defer { usedSinceFlush = [] }
            for key in usedSinceFlush {
                guard let slot = entries.index(forKey: key) else { continue }
                for i in entries.values[slot].indices { entries.values[slot][i].awaitsFlush = false }
            }
            return usedSinceFlush
        }
        if !keys.isEmpty { disk.touch(keys: keys) }
    }

    deinit { flushRecency() }

    /// A stored variant answers `request` when its Vary values and its partition match;
    /// `Vary: *` never matches, nor does an entry stored without a partition.
    private static func matches(_ vary: [String: String], _ request: Request) -> Bool {
        guard vary[partitionField] != nil, vary["*"] == nil else { return false }
        return vary.allSatisfy { value(request, $0.key) == $0.value }
    }

    public func storeCachedResponse(_ cached: CachedResponse, for request: Request) {
        guard cached.storagePolicy != .notAllowed, HTTPCacheRules.isStorable(request: request, response: cached.response) else {
            return
        }
        var c = cached
        c.response = HTTPCacheRules.storable(c.response)
        if c.storedDate == nil { c.storedDate = Date() }
        // A part (206) combines with what the variant holds (§3.4), or is not kept.
        if c.response.statusCode == 206 {
            guard let kept = HTTPCacheRules.combine(stored: cachedResponse(for: request), with: c) else { return }
            c = kept
        }
        let names = HTTPCacheRules.varyNames(c.response)
        var vary: [String: String] = [:]
        for n in names { vary[n] = Self.value(request, n) }
        vary[Self.partitionField] = request.cachePartition
        guard Self.headBytes(c.response, vary: vary) <= Self.maximumHeadBytes else { return }
        let key = Self.key(request.url)
        insertInMemory(key: key, vary: vary, cached: c)
        if c.storagePolicy == .allowed { disk?.store(key: key, vary: vary, cached: c) }
    }

    private func insertInMemory(key: String, vary: [String: String], cached c: CachedResponse) {
        let size = Self.memoryCost(c, vary: vary)
        guard size <= memoryCapacity / 4 else { return }   // one entry never takes over the memory tier
        lock.withLock {
            tick += 1
            var list = entries[key] ?? []
            if let i = list.firstIndex(where: { $0.varyValues == vary }) {
                bytes -= list[i].size
                list.remove(at: i)
            }
            list.append(Variant(cached: c, varyValues: vary, lastUsed: tick, size: size))
            bytes += size
            entries[key] = list
            while bytes > memoryCapacity, let victim = leastRecentlyUsed() {
                bytes -= entries[victim.0]![victim.1].size
                entries[victim.0]!.remove(at: victim.1)
                if entries[victim.0]!.isEmpty { entries[victim.0] = nil }
            }
        }
    }

    /// Under the lock.
    private func leastRecentlyUsed() -> (String, Int)? {
        var best: (String, Int, UInt64)?
        for (k, list) in entries {
            for (i, v) in list.enumerated() where best == nil || v.lastUsed < best!.2 { best = (k, i, v.lastUsed) }
        }
        return best.map { ($0.0, $0.1) }
    }

    public func removeCachedResponse(for request: Request) {
        let key = Self.key(request.url)
        lock.withLock {
            if let list = entries.removeValue(forKey: key) { bytes -= list.reduce(0) { $0 + $1.size } }
        }
        disk?.remove(key: key)
    }

    public func removeAllCachedResponses() {
        lock.withLock { entries.removeAll(); bytes = 0 }
        disk?.removeAll()
    }
}
