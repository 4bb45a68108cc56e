import XCTest
import PorterTestSupport
@testable import Porter

/// A server (and a caller) that tries to get bytes where they do not belong: a method that
/// smuggles a second request, escape sequences for the user's terminal, file names that
/// climb out or carry control characters, heads too big for libcurl or for the cache.
/// Issue 21, items 12, 13, 15, 17, 18, 19.
final class HostileServerTextTests: XCTestCase {
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

    var server: MisbehavingServer { Self.server! }
    var dir = ""

    override func setUpWithError() throws {
        guard Self.server != nil else { throw NginxFixture.Failure.setup("the misbehaving server (python3 misbehave.py) did not start") }
        dir = NSTemporaryDirectory() + "porter-hostile-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
        super.tearDown()
    }

    private func session(_ change: (inout SessionConfiguration) -> Void = { _ in }) -> Session {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        change(&c)
        return Session(configuration: c)
    }

    private func load(_ request: Request, in s: Session? = nil) async -> Result<(Data, Response), PorterError> {
        do {
            return .success(try await (s ?? session()).data(for: request))
        } catch let e as PorterError {
            return .failure(e)
        } catch {
            return .failure(PorterError(.unknown, "\(error)"))
        }
    }

    private static let controls: [Character] = ["\u{1B}", "\u{07}", "\u{9B}", "\r"]

    // MARK: - 13: a method that is not a token

    /// The method carries CR LF and a second request behind it. It fails with badURL before
    /// any byte is sent: the recording server never sees the smuggled request (before the
    /// fix it did: libcurl wrote the method into the request line as it was).
    func testAMethodWithCRLFNeverReachesTheServer() async throws {
        let good = await load(Request(url: URL(string: server.base + "/record?id=first-good")!))
        XCTAssertNoThrow(try good.get())
        let smuggling = "GET /record?id=smuggler HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\nDELETE /SMUGGLED"
        for method in [smuggling, "GET\n", "GE T", "GET\u{0}", ""] {
            let r = await load(Request(url: URL(string: server.base + "/record?id=bad")!, method: method))
            guard case .failure(let e) = r else { return XCTFail("the method \(method.debugDescription) was sent") }
            XCTAssertEqual(e.code, .badURL, "\(e)")
        }
        _ = await load(Request(url: URL(string: server.base + "/record?id=last-good")!))
        let seen = server.waitForRecorded("id=last-good")
        XCTAssertTrue(seen.contains("id=first-good"), seen)
        XCTAssertFalse(seen.contains("SMUGGLED"), "the smuggled request arrived:\n\(seen)")
        XCTAssertFalse(seen.contains("id=bad"), seen)
        XCTAssertFalse(seen.contains("smuggler"), seen)

        // The CLI refuses it the same way (its check is the same function).
        let cli = try runProcess(porterBinary, ["-X", "GET /x HTTP/1.1\r\n\r\nDELETE /SMUGGLED", server.base + "/record?id=cli"],
                                 environment: ["http_proxy": nil])
        XCTAssertNotEqual(cli.status, 0)
        XCTAssertFalse(server.waitForRecorded("id=last-good").contains("id=cli"))
    }

    // MARK: - 18: a head over libcurl's limit

    /// Six 52 KiB fields: over libcurl's 300 KiB for a whole head (each field is under its
    /// 100 KiB for one). A bad response (exit 11), not "cannot connect" (5) that porterd
    /// would retry for days.
    func testAHeadOverLibcurlsLimitIsABadResponse() async throws {
        let r = await load(Request(url: URL(string: server.base + "/many-headers")!))
        guard case .failure(let e) = r else { return XCTFail("a 312 KiB head was accepted") }
        XCTAssertEqual(e.code, .badServerResponse, "\(e)")
        XCTAssertEqual(e.cause?.domain, "curl")
        let cli = try runProcess(porterBinary, [server.base + "/many-headers"], environment: ["http_proxy": nil])
        // The exit code is curl's own on the same URL (libcurl's code for the failure).
        let curlStatus = try runProcess("/usr/bin/curl", ["-s", server.base + "/many-headers"], environment: ["http_proxy": nil]).status
        XCTAssertEqual(cli.status, curlStatus, cli.stderr)
        // One field over 100 KiB stays a bad response too.
        let one = try runProcess(porterBinary, [server.base + "/huge-header"], environment: ["http_proxy": nil])
        XCTAssertEqual(one.status, try runProcess("/usr/bin/curl", ["-s", server.base + "/huge-header"], environment: ["http_proxy": nil]).status,
                       one.stderr)
    }

    // MARK: - 15: escape sequences in the status line

    /// The reason phrase carries ESC ] (set the window title), BEL and ESC [ 2J (clear the
    /// screen); a field carries a C1 CSI. -i (stdout), -v and -D - print none of them.
    func testTheStatusLineReachesTheTerminalCleaned() throws {
        let url = server.base + "/escape-status"
        for args in [["-i", url], ["-v", "-o", dir + "/out", url], ["-D", "-", "-o", dir + "/out2", url], ["-I", url]] {
            let r = try runProcess(porterBinary, args, environment: ["http_proxy": nil])
            XCTAssertEqual(r.status, 0, "\(args) \(r.stderr)")
            for c in Self.controls where c != "\r" {
                XCTAssertFalse(r.stdout.contains(c), "\(args): \(c.unicodeScalars.first!.value) on stdout: \(r.stdout.debugDescription)")
                XCTAssertFalse(r.stderr.contains(c), "\(args): \(c.unicodeScalars.first!.value) on stderr: \(r.stderr.debugDescription)")
            }
            XCTAssertTrue((r.stdout + r.stderr).contains("200 OK"), r.stdout + r.stderr)
        }
    }

    // MARK: - 17 and 19: file names from the server and the URL

    private func disposition(_ value: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-_.")
        let bytes = Array(value.utf8).map { b -> String in
            let c = Character(Unicode.Scalar(b))
            return b < 0x80 && String(c).unicodeScalars.allSatisfy(allowed.contains) ? String(c) : String(format: "%%%02X", b)
        }
        return server.base + "/disposition?cd=" + bytes.joined()
    }

    /// suggestedFilename reads the server's Content-Disposition through the one name rule:
    /// its last component (a backslash is a separator too), control characters replaced,
    /// a quoted ";" kept, filename* (RFC 6266) first; "", ".", ".." and "/" fall back to
    /// the URL's name. None of it goes through Foundation's path methods.
    func testSuggestedFilenameFromAHostileServer() async throws {
        let cases: [(String, String)] = [
            ("attachment; filename=\"a\"", "a"),
            ("attachment; filename=b", "b"),
            ("attachment; filename=\"..\\\\..\\\\evil.txt\"", "evil.txt"),
            ("attachment; filename=\"../../etc/passwd\"", "passwd"),
            ("attachment; filename=\"a;b.txt\"", "a;b.txt"),
            ("attachment; filename=\"x\u{9B}2J.txt\"", "x_2J.txt"),
            ("attachment; filename*=UTF-8''%E2%82%AC%20rates.txt; filename=\"fallback.txt\"", "€ rates.txt"),
            ("attachment; filename*=UTF-8''%1B%5B2Jx", "_[2Jx"),
            ("attachment; filename=\"a/\"", "a"),
            ("attachment; filename=\"/\"", "disposition"),
            ("attachment; filename=\".\"", "disposition"),
            ("attachment; filename=\"..\"", "disposition"),
            ("attachment; filename=\"\"", "disposition"),
            ("attachment; filename=\"\\\"quoted\\\".txt\"", "\"quoted\".txt"),
        ]
        for (value, expected) in cases {
            let r = await load(Request(url: URL(string: disposition(value))!))
            let response = try r.get().1
            XCTAssertEqual(response.suggestedFilename, expected, "Content-Disposition: \(value.debugDescription)")
        }
        // Without a Content-Disposition: the URL's last segment, decoded, through the same rule.
        let plain = try await load(Request(url: URL(string: server.base + "/ok/a%1B%5B2Jb%07.txt")!)).get().1
        XCTAssertEqual(plain.suggestedFilename, "a_[2Jb_.txt")
        let one = try await load(Request(url: URL(string: server.base + "/ok/z")!)).get().1
        XCTAssertEqual(one.suggestedFilename, "z")
        let none = try await load(Request(url: URL(string: server.base + "/")!)).get().1
        XCTAssertEqual(none.suggestedFilename, "Unknown")
    }

    /// -O names the file by the URL's last segment and -J by the server's name: one rule,
    /// so neither writes a name holding ESC, BEL or a C1 control.
    func testRemoteNamesHoldNoControlCharacters() throws {
        let o = try runProcess(porterBinary, ["-O", server.base + "/ok/a%1B%5B2Jb%07.txt"], environment: ["http_proxy": nil],
                               currentDirectory: dir)
        XCTAssertEqual(o.status, 0, o.stderr)
        let j = try runProcess(porterBinary, ["-O", "-J", disposition("attachment; filename=\"x\u{9B}31my.txt\"")],
                               environment: ["http_proxy": nil], currentDirectory: dir)
        XCTAssertEqual(j.status, 0, j.stderr)
        let names = try FileManager.default.contentsOfDirectory(atPath: dir).sorted()
        XCTAssertEqual(names, ["a_[2Jb_.txt", "x_31my.txt"])
        for name in names {
            XCTAssertFalse(name.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }, name.debugDescription)
        }
    }
}
