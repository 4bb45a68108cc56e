import Foundation
import GRDB
import HTTPTypes
@testable import PorterCore
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials
@testable import PorterStorage
@testable import PorterSession
import XCTest

/// The store-folder rule, tried as a hostile local user would: a folder someone else owns,
/// a planted link for the folder or inside it, an index that names files outside it. The
/// stores refuse or ignore each; no file outside the store is read, served or removed.
final class StoreFolderTests: XCTestCase {
    var base = ""
    override func setUp() {
        base = NSTemporaryDirectory() + "porter-stores-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
    }
    override func tearDown() { try? FileManager.default.removeItem(atPath: base) }

    private func victim(_ name: String = "victim.txt") -> String {
        let path = base + "/" + name
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("precious".utf8)))
        return path
    }

    private func store(_ cache: HTTPCache, _ path: String, _ body: String) {
        let url = URL(string: "http://example.test\(path)")!
        var f = HTTPFields()
        f[.cacheControl] = "max-age=600"
        let r = Response(url: url, mimeType: "text/plain", expectedContentLength: Int64(body.utf8.count), statusCode: 200, headerFields: f)
        cache.storeCachedResponse(CachedResponse(response: r, data: Data(body.utf8), storagePolicy: .allowed), for: Request(url: url))
    }

    func testACacheFolderOwnedBySomeoneElseIsRefused() throws {
        guard geteuid() == 0 else { return XCTFail("this test must run as root to give a folder away (make test runs as root)") }
        let dir = base + "/http"
        try FileManager.default.createDirectory(atPath: dir + "/bodies", withIntermediateDirectories: true)
        XCTAssertEqual(chown(dir, 65534, 65534), 0)
        XCTAssertThrowsError(try HTTPCache(diskCapacity: 1 << 20, directory: dir)) { error in
            XCTAssertTrue("\(error)".contains("owned by uid 65534"), "\(error)")
        }
        XCTAssertEqual(chown(dir, 0, 0), 0)
        XCTAssertEqual(chown(dir + "/bodies", 65534, 65534), 0)
        XCTAssertThrowsError(try HTTPCache(diskCapacity: 1 << 20, directory: dir))
    }

    func testPlantedLinksForTheFolderOrItsBodiesAreRefused() throws {
        let elsewhere = base + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        let precious = victim("elsewhere/keep.txt")
        // The whole cache folder is a link.
        XCTAssertEqual(symlink(elsewhere, base + "/linked"), 0)
        XCTAssertThrowsError(try HTTPCache(diskCapacity: 1 << 20, directory: base + "/linked"))
        // Its bodies folder is a link: the orphan sweep once deleted the victim's files through it.
        try FileManager.default.createDirectory(atPath: base + "/http", withIntermediateDirectories: true)
        XCTAssertEqual(symlink(elsewhere, base + "/http/bodies"), 0)
        XCTAssertThrowsError(try HTTPCache(diskCapacity: 1 << 20, directory: base + "/http"))
        XCTAssertEqual(try String(contentsOfFile: precious, encoding: .utf8), "precious")
        // The index is a link to someone's file.
        let dir2 = base + "/http2"
        try FileManager.default.createDirectory(atPath: dir2 + "/bodies", withIntermediateDirectories: true)
        XCTAssertEqual(symlink(precious, dir2 + "/index.sqlite"), 0)
        XCTAssertThrowsError(try HTTPCache(diskCapacity: 1 << 20, directory: dir2))
        XCTAssertEqual(try String(contentsOfFile: precious, encoding: .utf8), "precious")
    }

    /// An index naming "../victim.txt" (or an absolute path) is never served and never
    /// removed; a link planted in the bodies folder under a body's name is not followed,
    /// and the orphan sweep does not delete what it points to.
    func testTheIndexNamesOnlyFilesTheCacheMade() throws {
        let dir = base + "/http"
        let outside = victim()
        do {
            let cache = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
            store(cache, "/a", "alpha")
        }
        let db = try DatabaseQueue(path: dir + "/index.sqlite")
        try db.write { db in
            try db.execute(sql: "UPDATE entry SET body = ?, size = 8, digest = ?", arguments: ["../../victim.txt",
                                                                                              HTTPDiskCache.digest(Data("precious".utf8))])
        }
        let planted = UUID().uuidString
        XCTAssertEqual(symlink(outside, dir + "/bodies/" + planted), 0)
        let old = "touch -h -d '2 hours ago' '\(dir)/bodies/\(planted)'"
        XCTAssertEqual(system(old), 0)
        let cache = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
        XCTAssertNil(cache.cachedResponse(for: Request(url: URL(string: "http://example.test/a")!)), "served a file outside the cache")
        cache.removeAllCachedResponses()
        XCTAssertEqual(try String(contentsOfFile: outside, encoding: .utf8), "precious")
        var st = stat()
        XCTAssertEqual(lstat(dir + "/bodies/" + planted, &st), 0, "the planted link is left alone, not followed")
        // A body name of the cache's own making but a link: not served either.
        try db.write { db in try db.execute(sql: "DELETE FROM entry") }
        store(cache, "/b", "bravo")
        let name = try db.read { db in try String.fetchOne(db, sql: "SELECT body FROM entry") } ?? ""
        XCTAssertTrue(HTTPDiskCache.isBodyName(name), name)
        XCTAssertEqual(unlink(dir + "/bodies/" + name), 0)
        XCTAssertEqual(symlink(outside, dir + "/bodies/" + name), 0)
        let reopened = try HTTPCache(diskCapacity: 1 << 20, directory: dir)
        XCTAssertNil(reopened.cachedResponse(for: Request(url: URL(string: "http://example.test/b")!)))
        XCTAssertFalse(HTTPDiskCache.isBodyName("../x"))
        XCTAssertFalse(HTTPDiskCache.isBodyName("/etc/passwd"))
    }

    func testCookieAndCredentialStoresRefuseLinksAndForeignFolders() throws {
        let precious = victim()
        let cookies = base + "/cookies"
        try FileManager.default.createDirectory(atPath: cookies, withIntermediateDirectories: true)
        XCTAssertEqual(symlink(precious, cookies + "/cookies.sqlite"), 0)
        XCTAssertThrowsError(try PersistentCookieStore(path: cookies + "/cookies.sqlite")) { error in
            XCTAssertTrue("\(error)".contains("symbolic link"), "\(error)")
        }
        let credentials = base + "/credentials"
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: true)
        XCTAssertEqual(symlink(precious, credentials + "/credentials.json"), 0)
        XCTAssertThrowsError(try CredentialStore(path: credentials + "/credentials.json"))
        XCTAssertEqual(try String(contentsOfFile: precious, encoding: .utf8), "precious")
        let linkedFolder = base + "/linked-folder"
        XCTAssertEqual(symlink(cookies, linkedFolder), 0)
        XCTAssertThrowsError(try PersistentCookieStore(path: linkedFolder + "/c.sqlite"))
        if geteuid() == 0 {
            let foreign = base + "/foreign"
            try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
            XCTAssertEqual(chown(foreign, 65534, 65534), 0)
            XCTAssertThrowsError(try PersistentCookieStore(path: foreign + "/c.sqlite"))
            XCTAssertThrowsError(try CredentialStore(path: foreign + "/c.json"))
        }
    }
}
