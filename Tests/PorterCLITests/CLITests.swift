import XCTest
import Foundation
import PorterStorage
import PorterTestSupport

/// Runs the built `porter` (and the CustomScheme example's embedded CLI) as a user would.
final class CLITests: XCTestCase {
    struct Run {
        var status: Int32
        var stdout: Data
        var stderr: String
        var out: String { String(decoding: stdout, as: UTF8.self) }
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static func binary(_ env: String, _ name: String) -> String {
        ProcessInfo.processInfo.environment[env] ?? root.appendingPathComponent(".build/debug/\(name)").path
    }
    static let porter = binary("PORTER_BIN", "porter")
    static let customScheme = binary("CUSTOM_SCHEME_BIN", "CustomScheme")

    var dir: String!
    override func setUp() {
        dir = NSTemporaryDirectory() + "porter-cli-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: CLITests.porter),
                      "build the CLI first (make test does): \(CLITests.porter)")
    }
    override func tearDown() { try? FileManager.default.removeItem(atPath: dir) }

    @discardableResult
    func run(_ args: [String], executable: String = CLITests.porter, prefix: [String] = []) throws -> Run {
        let p = Process()
        if prefix.isEmpty {
            p.executableURL = URL(fileURLWithPath: executable)
            p.arguments = args
        } else {
            p.executableURL = URL(fileURLWithPath: prefix[0])
            p.arguments = Array(prefix.dropFirst()) + [executable] + args
        }
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return Run(status: p.terminationStatus, stdout: o, stderr: String(decoding: e, as: UTF8.self))
    }

    func file(_ name: String, _ data: Data) -> String {
        let path = dir + "/" + name
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: data))
        return path
    }
    var entries: Set<String> { Set((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []) }

    func testDataURLHelloWorld() throws {
        let r = try run(["data:,Hello%20World"])
        XCTAssertEqual(r.status, 0)
        XCTAssertEqual(r.out, "Hello World")
    }

    func testUnknownSchemeNamesTheRegisteredSchemes() throws {
        let r = try run(["nope://x"])
        XCTAssertEqual(r.status, 1, "curl's 1: unsupported protocol")
        XCTAssertTrue(r.stderr.contains("no handler for scheme 'nope'"), r.stderr)
        XCTAssertTrue(r.stderr.contains("registered schemes: data, file, ftp, ftps, http, https"), r.stderr)
        XCTAssertEqual(try run(["not a url at all"]).status, 3, "curl's 3: malformed URL")
    }

    func testOutputFileIsWrittenAtomically() throws {
        let payload = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let src = file("src.bin", payload)
        let dest = dir + "/dest.bin"
        let r = try run(["-s", "-o", dest, "file://" + src])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: dest), payload)
        XCTAssertEqual(entries, ["src.bin", "dest.bin"], "no temporary file left beside the output")

        // A failed download leaves no file at the destination, and no temporary file.
        let missing = try run(["-o", dir + "/never.bin", "file://" + dir + "/missing"])
        XCTAssertEqual(missing.status, 37, "curl's 37: cannot read a file: URL")
        XCTAssertEqual(entries, ["src.bin", "dest.bin"])
        // An existing destination stays as it was when the download fails.
        let kept = try run(["-o", dest, "data:;base64,!!!"])
        XCTAssertEqual(kept.status, 61, "curl's 61: bad content encoding")
        XCTAssertEqual(FileManager.default.contents(atPath: dest), payload)
        let nodir = try run(["-o", dir + "/no/such/dir/x", "data:,x"])
        XCTAssertEqual(nodir.status, 23, "curl's 23: write error")
    }

    func testIncludeHeadAndWriteOutJSON() throws {
        let i = try run(["-i", "data:text/html;base64,PGI+aGk8L2I+"])
        XCTAssertEqual(i.status, 0)
        XCTAssertTrue(i.out.hasPrefix("Content-Type: text/html\r\n"), i.out)
        XCTAssertTrue(i.out.hasSuffix("\r\n\r\n<b>hi</b>"), i.out)

        let src = file("page.html", Data("<p>x</p>".utf8))
        let head = try run(["-I", "file://" + src])
        XCTAssertEqual(head.status, 0)
        XCTAssertTrue(head.out.contains("Content-Type: text/html"), head.out)
        XCTAssertTrue(head.out.contains("Content-Length: 8"), head.out)
        XCTAssertFalse(head.out.contains("<p>"))

        let w = try run(["-s", "-w", "json", "file://" + src, "file://" + dir + "/missing"])
        XCTAssertEqual(w.status, 37)
        // Like curl's -w, the object follows the body directly.
        let lines = w.out.split(separator: "\n").compactMap { line in line.range(of: "{\"url\"").map { line[$0.lowerBound...] } }
        XCTAssertTrue(w.out.hasPrefix("<p>x</p>{"), w.out)
        guard lines.count == 2 else { return XCTFail("two JSON objects expected: \(w.out)") }
        let first = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        XCTAssertEqual(first["scheme"] as? String, "file")
        XCTAssertEqual(first["mime_type"] as? String, "text/html")
        XCTAssertEqual(first["bytes"] as? Int, 8)
        XCTAssertTrue(first["status"] is NSNull)
        XCTAssertTrue(first["error"] is NSNull)
        XCTAssertNotNil(first["elapsed"] as? Double)
        let second = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(lines[1].utf8)) as? [String: Any])
        XCTAssertEqual(second["error"] as? String, "fileDoesNotExist")
        XCTAssertEqual(second["error_code"] as? Int, 17)
    }

    func testUploadAndPostToFileURLs() throws {
        let src = file("report.txt", Data("uploaded body".utf8))
        try FileManager.default.createDirectory(atPath: dir + "/inbox", withIntermediateDirectories: false)
        let up = try run(["-T", src, "file://" + dir + "/inbox/"])
        XCTAssertEqual(up.status, 0, up.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/inbox/report.txt"), Data("uploaded body".utf8))
        let post = try run(["-d", "a=1", "-d", "b=2", "file://" + dir + "/inbox/form"])
        XCTAssertEqual(post.status, 0, post.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/inbox/form"), Data("a=1&b=2".utf8))
        let put = try run(["-X", "PUT", "-d", "via -X", "file://" + dir + "/inbox/put"])
        XCTAssertEqual(put.status, 0, put.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/inbox/put"), Data("via -X".utf8))
        let binary = try run(["--data-binary", "@" + src, "file://" + dir + "/inbox/copy"])
        XCTAssertEqual(binary.status, 0)
        XCTAssertEqual(FileManager.default.contents(atPath: dir + "/inbox/copy"), Data("uploaded body".utf8))
    }

    func testURLListWithConcurrency() throws {
        var list = ""
        for i in 0..<40 { list += "data:,line-\(i)%0A\n" }
        let path = file("urls.txt", Data(list.utf8))
        let r = try run(["--url-list", path, "--concurrency", "8"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let got = Set(r.out.split(separator: "\n").map(String.init))
        XCTAssertEqual(got, Set((0..<40).map { "line-\($0)" }))
    }

    func testVerboseShowsTheLifeCycle() throws {
        let r = try run(["-v", "data:,x"])
        XCTAssertEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("> GET data:,x"), r.stderr)
        XCTAssertTrue(r.stderr.contains("< data:,x text/plain"), r.stderr)
        XCTAssertTrue(r.stderr.contains("* done after 1 bytes"), r.stderr)
    }

    func testHandlersListing() throws {
        let r = try run(["handlers"])
        XCTAssertEqual(r.status, 0)
        let rows = r.out.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
        XCTAssertEqual(rows.first, ["SCHEME", "HANDLER", "ORIGIN", "VERSION"])
        XCTAssertTrue(rows.contains(["data", "DataHandler", "built-in", "0.1.0"]), r.out)
        XCTAssertTrue(rows.contains(["file", "FileHandler", "built-in", "0.1.0"]), r.out)
        XCTAssertTrue(rows.contains(["http,https", "HTTPHandler", "built-in", "0.1.0"]), r.out)
    }

    func testPermissionDeniedExitCode() throws {
        let secret = file("secret", Data("x".utf8))
        chmod(secret, 0o600)
        if geteuid() == 0 {
            // Run as nobody: root would read anything.
            chmod(dir, 0o755)
            chmod(NSTemporaryDirectory(), 0o1777)
            let r = try run(["file://" + secret], prefix: ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
            XCTAssertEqual(r.status, 37, r.stderr)
            XCTAssertTrue(r.stderr.contains("noPermissionsToReadFile"), r.stderr)
        } else {
            chmod(secret, 0)
            XCTAssertEqual(try run(["file://" + secret]).status, 37)
        }
    }

    /// The custom scheme example embeds the CLI: its in-process handler behaves like a built-in.
    func testCustomSchemeThroughTheCLI() throws {
        let cs = CLITests.customScheme
        XCTAssertEqual(try run(["cli", "fortune://any/1"], executable: cs).out, "Every task completes exactly once.\n")
        let auth = try run(["cli", "-u", "porter:demo", "fortune://private/0"], executable: cs)
        XCTAssertEqual(auth.status, 0, auth.stderr)
        XCTAssertEqual(try run(["cli", "-u", "porter:wrong", "fortune://private/0"], executable: cs).status, 67)
        XCTAssertEqual(try run(["cli", "fortune://private/0"], executable: cs).status, 67)
        let moved = try run(["cli", "-L", "-w", "json", "fortune://moved/3"], executable: cs)
        XCTAssertEqual(moved.status, 0)
        XCTAssertTrue(moved.out.contains("\"status\":200"), moved.out)
        // Without -L the redirect is the answer, as in curl.
        let stay = try run(["cli", "-w", "%{http_code}", "fortune://moved/3"], executable: cs)
        XCTAssertEqual(stay.status, 0, stay.stderr)
        XCTAssertTrue(stay.out.hasSuffix("301") || stay.out.hasSuffix("302") || stay.out.hasSuffix("307"), stay.out)
        XCTAssertEqual(try run(["cli", "-L", "--max-redirs", "0", "fortune://moved/3"], executable: cs).status, 47)
        let missing = try run(["cli", "-f", "fortune://missing/"], executable: cs)
        XCTAssertEqual(missing.status, 22)
        XCTAssertEqual(missing.out, "", "--fail prints no body")
        XCTAssertEqual(try run(["cli", "fortune://missing/"], executable: cs).out, "no such fortune\n")
        let listing = try run(["cli", "handlers"], executable: cs).out
        XCTAssertTrue(listing.split(separator: "\n").contains { $0.split(separator: " ").map(String.init) == ["fortune", "FortuneHandler", "in-process", "1.0"] }, listing)
        let demo = try run([], executable: cs)
        XCTAssertEqual(demo.status, 0, demo.stderr)
        XCTAssertTrue(demo.out.contains("landed on fortune://any/2"), demo.out)
        XCTAssertTrue(demo.out.contains("delegate: completed ok"), demo.out)
    }

    func testMaxTimeAndInterrupt() throws {
        let cs = CLITests.customScheme
        let start = Date()
        let timed = try run(["cli", "--max-time", "0.5", "fortune://slow/"], executable: cs)
        XCTAssertEqual(timed.status, 28, timed.stderr)
        XCTAssertEqual(timed.out, "line 0\n")
        // The behaviour is a time limit: not before it; the upper bound (60× the limit, a
        // loaded machine is slow) only tells it from the slow fortune's minute.
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(start), 0.45)
        XCTAssertLessThan(Date().timeIntervalSince(start), 30, "the slow fortune runs for a minute")

        let p = Process()
        p.executableURL = URL(fileURLWithPath: cs)
        p.arguments = ["cli", "-o", dir + "/slow.txt", "fortune://slow/"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        // Interrupted mid-download: once its first file is there, not after a fixed time.
        XCTAssertTrue(eventually { !self.entries.isEmpty }, "the download did not start")
        kill(p.processIdentifier, SIGINT)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationReason, .uncaughtSignal, "Ctrl-C cancels, cleans up and ends by SIGINT, as curl")
        XCTAssertEqual(p.terminationStatus, SIGINT)
        XCTAssertEqual(entries, [], "no output file and no temporary file after an interrupted download")
    }

    func testProgressBarOnATerminal() throws {
        let src = file("bar.bin", Data(count: 8 << 20))
        // `script` gives porter a pseudo-terminal; without one there is no bar.
        let cmd = "\(CLITests.porter) -o \(dir!)/bar.out file://\(src)"
        let tty = try run(["-qec", cmd, "/dev/null"], executable: "/usr/bin/script")
        XCTAssertEqual(tty.status, 0, tty.stderr)
        XCTAssertTrue(tty.out.contains("100.0%"), tty.out)
        XCTAssertTrue(tty.out.contains("MiB"), tty.out)
        let plain = try run(["-o", dir + "/bar2.out", "file://" + src])
        XCTAssertEqual(plain.stderr, "", "no bar when stderr is not a terminal")
    }

    /// `porter -o` on a large file keeps memory flat: the body streams through.
    func testLargeDownloadKeepsMemoryFlat() throws {
        let path = dir + "/big.bin"
        let fd = open(path, O_CREAT | O_WRONLY, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var block = [UInt8](repeating: 0xAB, count: 1 << 20)
        for i in 0..<256 {
            block[0] = UInt8(truncatingIfNeeded: i)
            XCTAssertEqual(block.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }, 1 << 20)
        }
        close(fd)
        // GNU time forks from a small process, so %M is porter's own peak RSS (a vfork
        // child of this big test process would report ours).
        let r = try run(["-f", "peak_rss_kib=%M", CLITests.porter, "-s", "-o", dir + "/copy.bin", "file://" + path],
                        executable: "/usr/bin/time")
        XCTAssertEqual(r.status, 0, r.stderr)
        let line = try XCTUnwrap(r.stderr.split(separator: "\n").last { $0.hasPrefix("peak_rss_kib=") })
        let peakKiB = try XCTUnwrap(Int(line.dropFirst("peak_rss_kib=".count)))
        XCTAssertGreaterThan(peakKiB, 1000)
        XCTAssertLessThan(peakKiB, 64 * 1024, "peak RSS of porter -o on 256 MiB: \(peakKiB) KiB")
        var a = stat(), b = stat()
        stat(path, &a); stat(dir + "/copy.bin", &b)
        XCTAssertEqual(b.st_size, 256 << 20)
        XCTAssertEqual(FileManager.default.contentsEqual(atPath: path, andPath: dir + "/copy.bin"), true)
    }

}
