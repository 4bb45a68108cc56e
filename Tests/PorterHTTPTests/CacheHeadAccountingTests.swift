import XCTest
import PorterTestSupport
@testable import Porter

/// A server floods the cache with cacheable responses whose heads are large and whose
/// bodies are one byte (issue 21, item 12). Both tiers count the heads: the disk folder
/// and the statistics stay within the capacities, the statistics say what is stored, and
/// a head over `HTTPCache.maximumHeadBytes` is not stored at all. (Before: the caps
/// counted bodies only; 600 such responses took 24 MB of a 4 MiB tier and stats said 600
/// bytes.)
final class CacheHeadAccountingTests: XCTestCase {
    nonisolated(unsafe) static var server: MisbehavingServer?

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
        server = try? MisbehavingServer()
    }

    override class func tearDown() {
        server?.stop()
        super.tearDown()
    }

    var home = ""

    override func setUpWithError() throws {
        guard Self.server != nil else { throw NginxFixture.Failure.setup("the misbehaving server (python3 misbehave.py) did not start") }
        home = NSTemporaryDirectory() + "porter-cachehead-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: home)
        super.tearDown()
    }

    /// Bytes the folder's files take on disk (allocated blocks), every file included.
    private func onDisk(_ folder: String) -> Int {
        var total = 0
        for sub in FileManager.default.enumerator(atPath: folder)?.allObjects as? [String] ?? [] {
            var st = stat()
            if lstat(folder + "/" + sub, &st) == 0 { total += Int(st.st_blocks) * 512 }
        }
        return total
    }

    func testHeadsCountAgainstBothTiers() async throws {
        let folder = home + "/porter/http"
        let diskCap = 4 << 20, memoryCap = 1 << 20
        let cache = try HTTPCache(memoryCapacity: memoryCap, diskCapacity: diskCap, directory: folder)
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.responseCache = cache
        let session = Session(configuration: c)
        let base = Self.server!.base

        // 40 fields of 1,000 bytes: 40 KB heads, 1-byte bodies, 600 of them (24 MB of heads).
        let headSize = 40_000
        for i in 0..<600 {
            let (data, _) = try await session.data(from: URL(string: base + "/bighead?kb=40&n=\(i)")!)
            XCTAssertEqual(data, Data("x".utf8))
        }
        let s = cache.statistics
        XCTAssertGreaterThan(s.diskEntries, 0, "cacheable responses are stored")
        XCTAssertLessThanOrEqual(s.diskBytes, diskCap, "the disk tier's count stays within its capacity")
        XCTAssertGreaterThanOrEqual(s.diskBytes, s.diskEntries * headSize, "the disk statistics count the heads: \(s)")
        XCTAssertLessThanOrEqual(s.memoryBytes, memoryCap, "the memory tier's count stays within its capacity")
        XCTAssertGreaterThanOrEqual(s.memoryBytes, s.memoryEntries * headSize, "the memory statistics count the heads: \(s)")
        XCTAssertLessThan(s.diskEntries, 600 / 4, "most entries were evicted: \(s)")
        // What the files really take: the index, its WAL (SQLite bounds it to ~4 MB after a
        // checkpoint) and the bodies.
        XCTAssertLessThanOrEqual(onDisk(folder), diskCap + (6 << 20), "the folder stays near its capacity: \(onDisk(folder)) bytes")

        // `porter cache stats` reads the same folder and says the same.
        let cli = try runProcess(porterBinary, ["cache", "stats"], environment: ["XDG_CACHE_HOME": home])
        XCTAssertEqual(cli.status, 0, cli.stderr)
        XCTAssertTrue(cli.stdout.contains("\(s.diskEntries) entries, \(s.diskBytes) bytes on disk"), cli.stdout + "\n\(s)")

        // A head over the bound (about 100 KB, under libcurl's limits) is delivered, never stored.
        cache.removeAllCachedResponses()
        let (data, response) = try await session.data(from: URL(string: base + "/bighead?kb=100")!)
        XCTAssertEqual(data, Data("x".utf8))
        XCTAssertEqual(response.statusCode, 200)
        let after = cache.statistics
        XCTAssertEqual(after.diskEntries, 0, "a head over 64 KiB is not stored on disk: \(after)")
        XCTAssertEqual(after.memoryEntries, 0, "nor in memory: \(after)")
        session.finishTasksAndInvalidate()
    }
}
