import Foundation
import HTTPTypes
import PorterCore
import PorterCache
import PorterCookies
import PorterCredentials
import PorterStorage
import PorterSession
import XCTest

/// The disk tier: reopen, damaged bodies, modes, capacity.
final class HTTPDiskCacheTests: XCTestCase {
    var dir = ""
    override func setUp() { dir = NSTemporaryDirectory() + "porter-cache-\(UUID().uuidString)/http" }
    override func tearDown() { try? FileManager.default.removeItem(atPath: (dir as NSString).deletingLastPathComponent) }

    func entry(_ path: String, _ body: String, policy: CacheStoragePolicy = .allowed) -> (Request, CachedResponse) {
        let url = URL(string: "http://example.test\(path)")!
        var f = HTTPFields()
        f[.cacheControl] = "max-age=600"
        f[.eTag] = "\"\(body.count)\""
        var r = Response(url: url, mimeType: "text/plain", expectedContentLength: Int64(body.utf8.count), statusCode: 200, headerFields: f)
        r.statusLine = "HTTP/1.1 200 OK"
        return (Request(url: url), CachedResponse(response: r, data: Data(body.utf8), storagePolicy: policy))
    }

    func testEntriesSurviveAReopenAndMemoryOnlyOnesDoNot() throws {
        do {
            let cache = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
            let (r1, c1) = entry("/a", "alpha")
            cache.storeCachedResponse(c1, for: r1)
            let (r2, c2) = entry("/b", "memory only", policy: .allowedInMemoryOnly)
            cache.storeCachedResponse(c2, for: r2)
            XCTAssertEqual(cache.statistics.diskEntries, 1)
        }
        let reopened = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
        let hit = try XCTUnwrap(reopened.cachedResponse(for: Request(url: URL(string: "http://example.test/a")!)))
        XCTAssertEqual(hit.data, Data("alpha".utf8))
        XCTAssertEqual(hit.response.statusCode, 200)
        XCTAssertEqual(hit.response.statusLine, "HTTP/1.1 200 OK")
        XCTAssertEqual(hit.response.value(forHeader: "Cache-Control"), "max-age=600")
        XCTAssertNotNil(hit.storedDate)
        XCTAssertNil(reopened.cachedResponse(for: Request(url: URL(string: "http://example.test/b")!)))
    }

    /// The disk tier evicts the least recently used entry, and an entry the memory tier
    /// kept answering counts as used: its recency reaches the disk index (in batches,
    /// and when the cache goes), so a later process with a smaller tier keeps it and
    /// evicts the one stored later but never used.
    func testHitsFromTheMemoryTierCountInTheDiskTiersEvictionOrder() throws {
        let (ra, ca) = entry("/a", "alpha")
        let (rb, cb) = entry("/b", "bravo")
        let (rc, cc) = entry("/c", "charl")
        let two: Int
        do {
            let cache = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
            cache.storeCachedResponse(ca, for: ra)
            cache.storeCachedResponse(cb, for: rb)
            two = cache.statistics.diskBytes
            XCTAssertNotNil(cache.cachedResponse(for: ra), "a hit from the memory tier")
        }
        let smaller = try HTTPCache(diskCapacity: two + two / 4, directory: dir)
        smaller.storeCachedResponse(cc, for: rc)
        XCTAssertEqual(smaller.statistics.diskEntries, 2)
        XCTAssertNotNil(smaller.cachedResponse(for: ra), "the entry in use was evicted")
        XCTAssertNil(smaller.cachedResponse(for: rb), "the entry never used stayed")
        XCTAssertNotNil(smaller.cachedResponse(for: rc))
    }

    func testADamagedBodyIsDroppedNotServed() throws {
        do {
            let cache = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
            let (r, c) = entry("/a", "a body that will be cut short")
            cache.storeCachedResponse(c, for: r)
            let (r2, c2) = entry("/b", "a body that will be changed")
            cache.storeCachedResponse(c2, for: r2)
        }
        let bodies = try FileManager.default.contentsOfDirectory(atPath: dir + "/bodies").map { dir + "/bodies/" + $0 }
        XCTAssertEqual(bodies.count, 2)
        for path in bodies {
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            if String(decoding: data, as: UTF8.self).contains("cut") {
                try data.prefix(5).write(to: URL(fileURLWithPath: path))          // truncated
            } else {
                var flipped = data
                flipped[3] ^= 0xFF
                try flipped.write(to: URL(fileURLWithPath: path))                // same size, other bytes
            }
        }
        let reopened = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
        XCTAssertNil(reopened.cachedResponse(for: Request(url: URL(string: "http://example.test/a")!)))
        XCTAssertNil(reopened.cachedResponse(for: Request(url: URL(string: "http://example.test/b")!)))
        XCTAssertEqual(reopened.statistics.diskEntries, 0, "damaged entries are removed")
    }

    func testModesCapacityAndClear() throws {
        // An entry costs its body file in 4 KiB blocks plus its head and row (~4.7 KB here):
        // three fit in 16,000 bytes, four do not.
        let cache = try HTTPCache(memoryCapacity: 1 << 20, diskCapacity: 16_000, directory: dir)
        for i in 0..<10 {
            let (r, c) = entry("/e\(i)", String(repeating: "x", count: 3000))
            cache.storeCachedResponse(c, for: r)
        }
        XCTAssertLessThanOrEqual(cache.statistics.diskBytes, 16_000)
        XCTAssertEqual(cache.statistics.diskEntries, 3, "the least recently used went")
        func mode(_ p: String) -> Int { ((try? FileManager.default.attributesOfItem(atPath: p))?[.posixPermissions] as? NSNumber)?.intValue ?? -1 }
        XCTAssertEqual(mode(dir), 0o700)
        XCTAssertEqual(mode(dir + "/index.sqlite"), 0o600)
        for f in try FileManager.default.contentsOfDirectory(atPath: dir + "/bodies") {
            XCTAssertEqual(mode(dir + "/bodies/" + f), 0o600)
        }
        cache.removeAllCachedResponses()
        XCTAssertEqual(cache.statistics.diskEntries, 0)
        XCTAssertTrue(try FileManager.default.contentsOfDirectory(atPath: dir + "/bodies").isEmpty)
    }

    func testOldOrphansAreRemovedOnOpen() throws {
        _ = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
        // Orphans have the names the cache gives bodies (a UUID) and their temporary files (UUID.tmp).
        let orphan = dir + "/bodies/" + UUID().uuidString, partial = dir + "/bodies/\(UUID().uuidString).tmp"
        let young = dir + "/bodies/\(UUID().uuidString).tmp", foreign = dir + "/bodies/notes.txt"
        for p in [orphan, partial, young, foreign] { XCTAssertTrue(FileManager.default.createFile(atPath: p, contents: Data("o".utf8))) }
        let old = Date().addingTimeInterval(-3600)
        for p in [orphan, partial, foreign] { try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: p) }
        _ = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
        XCTAssertFalse(FileManager.default.fileExists(atPath: orphan))
        XCTAssertFalse(FileManager.default.fileExists(atPath: partial))
        XCTAssertTrue(FileManager.default.fileExists(atPath: young), "another process may be writing it")
        XCTAssertTrue(FileManager.default.fileExists(atPath: foreign), "only names the cache makes are ever removed")
    }
}
