import Foundation
import PorterCore
import PorterCache
import PorterCookies
import PorterCredentials
import PorterStorage
import PorterSession
import XCTest

/// Cookies in SQLite: what survives a reopen, what never reaches the disk, file modes,
/// and two stores on one file.
final class PersistentCookieStoreTests: XCTestCase {
    var dir = ""
    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "porter-cookies-\(UUID().uuidString)"
    }
    override func tearDown() { try? FileManager.default.removeItem(atPath: dir) }
    func url(_ s: String) -> URL { URL(string: s)! }

    func testPersistentCookiesSurviveAndSessionCookiesDoNot() throws {
        let path = dir + "/store/cookies.sqlite"
        do {
            let s = try PersistentCookieStore(path: path)
            s.storeCookies(fromHeaders: ["keep=1; Max-Age=3600; Domain=example.test; Path=/docs; Secure; HttpOnly; SameSite=Lax",
                                         "session=2", "gone=3; Max-Age=3600"],
                           for: url("https://www.example.test/docs/x"), mainDocumentURL: nil)
            s.storeCookies(fromHeaders: ["gone=3; Max-Age=0"], for: url("https://www.example.test/docs/x"), mainDocumentURL: nil)
            XCTAssertEqual(s.allCookies.map(\.name).sorted(), ["keep", "session"])
        }
        let again = try PersistentCookieStore(path: path)
        let cookies = again.allCookies
        XCTAssertEqual(cookies.map(\.name), ["keep"], "session cookies are never written; deletions are")
        let c = try XCTUnwrap(cookies.first)
        XCTAssertEqual(c.domain, "example.test")
        XCTAssertFalse(c.hostOnly)
        XCTAssertEqual(c.path, "/docs")
        XCTAssertTrue(c.secure && c.httpOnly)
        XCTAssertEqual(c.sameSite, .lax)
        XCTAssertEqual(again.cookieHeader(for: url("https://api.example.test/docs/y"), mainDocumentURL: nil), "keep=1")
        // A session cookie of the same identity replaces the stored one, on disk too.
        again.storeCookies(fromHeaders: ["keep=now-session; Domain=example.test; Path=/docs; Secure"],
                           for: url("https://www.example.test/docs/x"), mainDocumentURL: nil)
        XCTAssertTrue(try PersistentCookieStore(path: path).allCookies.isEmpty)
    }

    func testFileModesAndRefusingAStoreOthersCanRead() throws {
        let path = dir + "/private/cookies.sqlite"
        let s = try PersistentCookieStore(path: path)
        s.storeCookies(fromHeaders: ["a=1; Max-Age=60"], for: url("http://example.test/"), mainDocumentURL: nil)
        func mode(_ p: String) -> Int { ((try? FileManager.default.attributesOfItem(atPath: p))?[.posixPermissions] as? NSNumber)?.intValue ?? -1 }
        XCTAssertEqual(mode(path), 0o600)
        XCTAssertEqual(mode(dir + "/private"), 0o700)
        for extra in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: path + extra) {
            XCTAssertEqual(mode(path + extra) & 0o077, 0, "\(extra) is readable by others")
        }
        chmod(path, 0o644)
        XCTAssertThrowsError(try PersistentCookieStore(path: path)) { error in
            XCTAssertEqual((error as? PorterError)?.code, .noPermissionsToReadFile)
            XCTAssertTrue((error as? PorterError)?.message.contains("chmod 600") == true)
        }
    }

    func testTwoStoresOnOneFile() throws {
        let path = dir + "/shared/cookies.sqlite"
        let a = try PersistentCookieStore(path: path)
        let b = try PersistentCookieStore(path: path)
        DispatchQueue.concurrentPerform(iterations: 200) { i in
            let store = i % 2 == 0 ? a : b
            store.storeCookies(fromHeaders: ["c\(i)=\(i); Max-Age=600"], for: URL(string: "http://s\(i % 7).example.test/")!,
                               mainDocumentURL: nil)
        }
        XCTAssertEqual(try PersistentCookieStore(path: path).allCookies.count, 200)
    }

    func testDefaultPathFollowsXDG() {
        XCTAssertEqual(PersistentCookieStore.defaultPath(environment: ["XDG_DATA_HOME": "/x", "HOME": "/h"]),
                       "/x/porter/cookies.sqlite")
        XCTAssertEqual(PersistentCookieStore.defaultPath(environment: ["HOME": "/h"]), "/h/.local/share/porter/cookies.sqlite")
    }
}
