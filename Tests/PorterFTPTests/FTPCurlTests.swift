import Foundation
import Porter
import PorterTestSupport
import XCTest

/// porter's ftp command lines against curl's on the same pyftpdlib server.
extension FTPTests {
    private func porter(_ args: [String], cwd: String? = nil) throws -> ProcessResult {
        try runProcess(porterBinary, args, environment: withoutProxies, currentDirectory: cwd)
    }
    private func curl(_ args: [String], cwd: String? = nil) throws -> ProcessResult {
        try runProcess("/usr/bin/curl", args, environment: withoutProxies, currentDirectory: cwd)
    }
    private var implicitPort: Int {
        Int((try? String(contentsOfFile: dir + "/implicit.port", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0
    }

    /// `-u USER:PW -T FILE ftp://host/dir/` logs in as USER (not anonymous) and stores
    /// dir/FILE; a refusal is what the server said (550 to STOR: curl's 25; a folder it
    /// cannot make or enter: 9; a wrong password: 67), each as curl exits.
    func testUploadToAFolderLogsInAndRefusalsAreCurls() throws {
        let local = dir + "/report.txt"
        try "quarterly\n".write(toFile: local, atomically: true, encoding: .utf8)
        let base = "ftp://127.0.0.1:\(port)"
        let r = try porter(["-u", "alice:secret", "-T", local, base + "/upload/"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/files/upload/report.txt", encoding: .utf8), "quarterly\n")
        let log = (try? String(contentsOfFile: dir + "/ftp.log", encoding: .utf8)) ?? ""
        XCTAssertTrue(log.contains("alice") && log.contains("STOR report.txt"), log.suffix(1500).description)
        for args in [["-T", local, base + "/"], ["-T", local, base + "/upload/"], ["-u", "alice:wrong", "-T", local, base + "/upload/"]] {
            let reference = try curl(["-s"] + args)
            let mine = try porter(["-s"] + args)
            XCTAssertEqual(mine.status, reference.status, "\(args): \(mine.stderr)")
            XCTAssertTrue([25, 9, 67].contains(mine.status), "\(args): \(mine.status)")
        }
    }

    /// ftps:// is implicit TLS (curl's meaning): it works against an implicit-TLS
    /// listener and fails (35, as curl) against a plain one; explicit TLS is ftp:// with
    /// --ssl-reqd (AUTH SSL / TLS in -v) or --ssl.
    func testFTPSIsImplicitAndSSLReqdIsExplicit() throws {
        let ca = dir + "/tls/ca.pem"
        XCTAssertGreaterThan(implicitPort, 0)
        let implicit = "ftps://alice:secret@127.0.0.1:\(implicitPort)/docs/b.txt"
        let r = try porter(["--cacert", ca, implicit])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "beta beta\n")
        XCTAssertEqual(try curl(["-s", "--cacert", ca, implicit]).stdout, "beta beta\n")
        let onPlain = "ftps://alice:secret@127.0.0.1:\(port)/docs/b.txt"
        XCTAssertEqual(try porter(["-s", "--cacert", ca, "-m", "20", onPlain]).status, try curl(["-s", "--cacert", ca, "-m", "20", onPlain]).status)
        XCTAssertEqual(try porter(["-s", "--cacert", ca, "-m", "20", onPlain]).status, 35)
        // An unknown CA: 60, as curl.
        XCTAssertEqual(try porter(["-s", implicit]).status, 60)

        let explicit = "ftp://legacy:secret@127.0.0.1:\(port)/docs/a.txt"   // legacy logs in over TLS only
        let reqd = try porter(["-v", "--ssl-reqd", "--cacert", ca, explicit])
        XCTAssertEqual(reqd.status, 0, reqd.stderr)
        XCTAssertEqual(reqd.stdout, "alpha\n")
        XCTAssertTrue(reqd.stderr.contains("> AUTH "), reqd.stderr)
        XCTAssertTrue(reqd.stderr.contains("> PASS ***"), reqd.stderr)
        XCTAssertFalse(reqd.stderr.contains("secret"), reqd.stderr)
        XCTAssertEqual(try porter(["--ssl", "--cacert", ca, explicit]).stdout, "alpha\n")
        XCTAssertEqual(try porter(["-s", explicit]).status, try curl(["-s", explicit]).status, "without TLS legacy's login is refused")
    }

    func testFTPSDefaultPortIs990() {
        let registry = HandlerRegistry()
        registry.register(FTPHandler.self)
        XCTAssertEqual(registry.defaultPort(forScheme: "ftps"), 990, "declared by the handler, read through the registry")
        XCTAssertEqual(registry.defaultPort(forScheme: "FTP"), 21)
        XCTAssertNil(HandlerRegistry().defaultPort(forScheme: "ftp"), "no handler, no port")
        Porter.bootstrap()
        XCTAssertEqual(ProtectionSpace.defaultPort(for: "ftps"), 990)
    }
}
