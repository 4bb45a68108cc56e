import Foundation
import PorterCore
import PorterCache
import PorterCookies
import PorterCredentials
import PorterStorage
import PorterSession
import XCTest

final class CredentialStoreTests: XCTestCase {
    var dir = ""
    override func setUp() { dir = NSTemporaryDirectory() + "porter-creds-\(UUID().uuidString)" }
    override func tearDown() { try? FileManager.default.removeItem(atPath: dir) }

    let space = ProtectionSpace(host: "Example.test", port: 443, protocol: "https", realm: "r", authenticationMethod: .httpBasic)

    func testDefaultsAndPersistenceKinds() throws {
        let path = dir + "/store/credentials.json"
        let s = try CredentialStore(path: path)
        s.set(Credential(user: "none", password: "x", persistence: .none), for: space)
        XCTAssertNil(s.defaultCredential(for: space), ".none is never kept")
        s.set(Credential(user: "ann", password: "session-pw", persistence: .forSession), for: space)
        s.set(Credential(user: "bob", password: "permanent-pw", persistence: .permanent), for: space, asDefault: false)
        XCTAssertEqual(s.defaultCredential(for: space)?.user, "ann")
        XCTAssertEqual(Set(s.credentials(for: space).keys), ["ann", "bob"])
        let other = ProtectionSpace(host: "example.test", port: 443, protocol: "https", realm: "other", authenticationMethod: .httpBasic)
        XCTAssertNil(s.defaultCredential(for: other), "another realm is another space")

        let reopened = try CredentialStore(path: path)
        XCTAssertEqual(Array(reopened.credentials(for: space).keys), ["bob"], "only permanent credentials reach the file")
        XCTAssertEqual(reopened.defaultCredential(for: space)?.password, "permanent-pw", "a space's only credential is its default")
        reopened.remove(Credential(user: "bob", password: "", persistence: .permanent), for: space)
        XCTAssertTrue(try CredentialStore(path: path).credentials(for: space).isEmpty)
        XCTAssertFalse(String(describing: Credential(user: "bob", password: "permanent-pw")).contains("permanent-pw"))
    }

    func testFileModesAndRefusal() throws {
        let path = dir + "/private/credentials.json"
        let s = try CredentialStore(path: path)
        s.set(Credential(user: "bob", password: "pw", persistence: .permanent), for: space)
        func mode(_ p: String) -> Int { ((try? FileManager.default.attributesOfItem(atPath: p))?[.posixPermissions] as? NSNumber)?.intValue ?? -1 }
        XCTAssertEqual(mode(path), 0o600)
        XCTAssertEqual(mode(dir + "/private"), 0o700)
        chmod(path, 0o640)
        XCTAssertThrowsError(try CredentialStore(path: path)) { error in
            XCTAssertEqual((error as? PorterError)?.code, .noPermissionsToReadFile)
            XCTAssertFalse((error as? PorterError)?.message.contains("pw\"") == true)
        }
    }

    func testNetrc() throws {
        let n = Netrc(parsing: """
            # a comment
            machine Example.test login ann password "with space"
            macdef init
            machine evil.test login x password y

            machine other.test
                login bob
                password b\\"q
            default login anon password guest
            """)
        XCTAssertEqual(n.credential(for: "example.test")?.password, "with space")
        XCTAssertEqual(n.credential(for: "other.test")?.user, "bob")
        XCTAssertEqual(n.credential(for: "other.test")?.password, "b\\\"q", "unquoted tokens are taken as they are")
        XCTAssertEqual(n.credential(for: "evil.test")?.user, "anon", "lines of a macdef are not entries")
        XCTAssertEqual(n.credential(for: "anything.test")?.user, "anon")
        let path = dir + "/netrc"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try "machine a.test login u password p\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o644)
        XCTAssertThrowsError(try Netrc(contentsOf: path)) { XCTAssertEqual(($0 as? PorterError)?.code, .noPermissionsToReadFile) }
        chmod(path, 0o600)
        XCTAssertEqual(try Netrc(contentsOf: path).credential(for: "a.test")?.user, "u")
    }

    /// Seen in Fuzz/FuzzNetrc's CR LF seed: a .netrc written on Windows was one line to
    /// the parser, its tokens ending in CR LF, so no machine matched.
    func testNetrcWithCRLFLineEnds() {
        let n = Netrc(parsing: "machine a.test\r\n\tlogin u\r\n\tpassword p\r\nmacdef x\r\nmachine b.test login m password n\r\n\r\nmachine c.test login c password \"q\"\r\n")
        XCTAssertEqual(n.credential(for: "a.test")?.user, "u")
        XCTAssertEqual(n.credential(for: "a.test")?.password, "p")
        XCTAssertNil(n.credential(for: "b.test"), "inside the macdef")
        XCTAssertEqual(n.credential(for: "c.test")?.password, "q")
    }
}
