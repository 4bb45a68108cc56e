import Foundation
import Porter
import PorterTestSupport
import XCTest

/// The CLI as a careless or hostile user would drive it: odd output names, devices and
/// FIFOs, signals, absurd numbers. Nothing traps, nothing is destroyed, nothing leaks.
extension CLITests {
    /// A one-character name, "-" and a relative name with -C - once trapped inside
    /// Foundation's path code (SIGILL).
    func testShortRelativeOutputNamesAndDash() throws {
        let a = try runProcess(CLITests.porter, ["-o", "a", "data:,hello"], currentDirectory: dir)
        XCTAssertEqual(a.status, 0, a.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/a", encoding: .utf8), "hello")

        let dash = try runProcess(CLITests.porter, ["-o", "-", "data:,to%20stdout"], currentDirectory: dir)
        XCTAssertEqual(dash.status, 0, dash.stderr)
        XCTAssertEqual(dash.stdout, "to stdout")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/-"))

        let source = file("source.txt", Data("0123456789abcdef".utf8))
        XCTAssertTrue(FileManager.default.createFile(atPath: dir + "/r", contents: Data("01234567".utf8)))
        let cont = try runProcess(CLITests.porter, ["-C", "-", "-o", "r", "file://" + source], currentDirectory: dir)
        XCTAssertEqual(cont.status, 0, cont.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/r", encoding: .utf8), "0123456789abcdef")
    }

    /// -o onto a device or a FIFO writes through it; it is never replaced by a regular file
    /// (the rename once turned /dev/null into a 0600 file when root ran porter). The
    /// device is one made here with mknod, never the real /dev/null.
    func testOutputOntoADeviceOrAFIFOWritesThrough() throws {
        if geteuid() == 0 {
            let device = dir + "/null-device"
            XCTAssertEqual(mknod(device, S_IFCHR | 0o666, CLITests.nullDevice), 0, "mknod")
            let r = try run(["-o", device, "data:,discarded"])
            XCTAssertEqual(r.status, 0, r.stderr)
            var st = stat()
            XCTAssertEqual(lstat(device, &st), 0)
            XCTAssertEqual(st.st_mode & S_IFMT, S_IFCHR, "the device is still a character device")
            XCTAssertEqual(st.st_rdev, CLITests.nullDevice)
        }
        let fifo = dir + "/fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let received = readFIFOInBackground(fifo)
        let r = try run(["-o", fifo, "data:,through%20the%20fifo"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(eventually { received.current == Data("through the fifo".utf8) })
        var st = stat()
        XCTAssertEqual(lstat(fifo, &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFIFO, "the FIFO is still a FIFO")
        XCTAssertEqual(entries, Set(["fifo"] + (geteuid() == 0 ? ["null-device"] : [])), "no temporary file left behind")

        let folder = try run(["-o", dir, "data:,x"])
        XCTAssertEqual(folder.status, 23, folder.stderr)
        XCTAssertTrue(folder.stderr.contains("it is a folder"), folder.stderr)
    }

    /// A new -o file gets 0666 less the umask (as curl's); an existing file keeps its mode.
    func testOutputModeFollowsTheUmaskAndKeepsAnExistingMode() throws {
        let sh = "umask 022; exec \"$0\" \"$@\""
        let fresh = try runProcess("/bin/sh", ["-c", sh, CLITests.porter, "-o", dir + "/new", "data:,x"])
        XCTAssertEqual(fresh.status, 0, fresh.stderr)
        XCTAssertEqual(mode(dir + "/new"), 0o644)
        let existing = file("existing", Data("old".utf8))
        chmod(existing, 0o640)
        let again = try runProcess("/bin/sh", ["-c", sh, CLITests.porter, "-o", existing, "data:,new"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertEqual(mode(existing), 0o640)
        XCTAssertEqual(try String(contentsOfFile: existing, encoding: .utf8), "new")
    }

    /// SIGTERM and SIGHUP clean up as Ctrl-C does: no hidden .porter-download-* file stays,
    /// and the process ends by the signal.
    func testTermAndHangupRemoveTheTemporaryDownload() throws {
        for sig in [SIGTERM, SIGHUP] {
            let out = dir + "/slow-\(sig).txt"
            let p = try startProcess(CLITests.customScheme, ["cli", "-o", out, "fortune://slow/"])
            XCTAssertTrue(eventually(60) { entries.contains { $0.hasPrefix(".porter-download-") } }, "the download started")
            kill(p.processIdentifier, sig)
            p.waitUntilExit()
            XCTAssertEqual(p.terminationReason, .uncaughtSignal, "signal \(sig)")
            XCTAssertEqual(p.terminationStatus, sig)
            XCTAssertEqual(entries, [], "signal \(sig): no output and no temporary file")
        }
    }

    /// Numbers and methods that once trapped or spun are refused as bad command lines (2, as curl).
    func testBadNumbersAndMethodsAreRefused() throws {
        let cases: [[String]] = [
            ["--max-time", "nan"], ["--max-time", "inf"], ["--max-time=-1"], ["--max-time", "0"],
            ["--concurrency", "9223372036854775807"], ["--concurrency", "0"], ["--max-redirs=-5"],
            ["-X", "GET\r\nX-Injected: 1"], ["-X", "G ET"], ["-X", ""], ["-H", "X-A: 1\r\nX-B: 2"],
        ]
        for args in cases {
            // Refused as a bad command line (2): one that spun would never exit with it.
            let r = try run(args + ["data:,x"])
            XCTAssertEqual(r.status, 2, "\(args): \(r.stderr)")
        }
        XCTAssertEqual(try run(["--max-redirs=-1", "data:,x"]).status, 0)
    }

    /// --url-list is read as transfers need it and a finished transfer is forgotten: a
    /// list of 20,000 URLs costs what a list of ten does (each transfer once kept itself
    /// alive, and the list was read whole: 148 MB for 100,000 URLs).
    func testALongURLListIsReadLazily() throws {
        func peakKiB(urls: Int) throws -> Int {
            let list = dir + "/urls-\(urls).txt"
            var text = ""
            for i in 0..<urls { text += "data:,\(i % 10)\n" }
            try text.write(toFile: list, atomically: true, encoding: .utf8)
            let rss = dir + "/rss"
            let r = try runProcess("/usr/bin/time", ["-f", "%M", "-o", rss, CLITests.porter, "--url-list", list, "--concurrency", "8"])
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertEqual(r.stdout.utf8.count, urls)
            return Int(try String(contentsOfFile: rss, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        }
        let short = try peakKiB(urls: 10)
        let long = try peakKiB(urls: 20_000)
        XCTAssertGreaterThan(short, 0)
        // The debug build's heap grows a little with the count (about 0.35 KiB per
        // transfer, 0.12 KiB in release; memcheck finds nothing lost): far from the 1.5 KiB
        // per URL of a list read whole.
        XCTAssertLessThan(long, short + 16 * 1024, "peak RSS \(long) KiB for 20,000 URLs, \(short) KiB for 10")
    }

    /// With --concurrency, a body waiting for its turn on stdout is kept on disk, not in
    /// memory: two 256 MiB bodies at once stay far below their size (it took 1.06 GB).
    func testConcurrentBodiesDoNotGrowMemory() throws {
        let a = dir + "/a.bin", b = dir + "/b.bin"
        for p in [a, b] {
            let fd = open(p, O_CREAT | O_WRONLY, 0o644)
            XCTAssertEqual(ftruncate(fd, 256 << 20), 0)
            close(fd)
        }
        let rss = dir + "/rss"
        let script = "exec /usr/bin/time -f %M -o \"$0\" \"$@\" > /dev/null"
        let r = try runProcess("/bin/sh", ["-c", script, rss, CLITests.porter, "--concurrency", "2", "file://" + a, "file://" + b])
        XCTAssertEqual(r.status, 0, r.stderr)
        let kib = Int(try String(contentsOfFile: rss, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        XCTAssertGreaterThan(kib, 0)
        XCTAssertLessThan(kib, 96 * 1024, "peak RSS \(kib) KiB for two 256 MiB bodies")
    }

    /// The cookie jar is 0600 from its first byte: the temporary file is created with that
    /// mode (seen in the system calls), never created wider and narrowed afterwards.
    func testCookieJarIsPrivateFromTheFirstByte() throws {
        let cookies = file("in.txt", Data("127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\tsecret-value\n".utf8))
        let jar = dir + "/jar.txt"
        let trace = dir + "/trace"
        let sh = "umask 000; exec strace -f -qq -e trace=open,openat,creat,chmod,fchmod,fchmodat -o \"$0\" \"$@\""
        let r = try runProcess("/bin/sh", ["-c", sh, trace, CLITests.porter, "-b", cookies, "-c", jar, "data:,x"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(mode(jar), 0o600)
        XCTAssertTrue(try String(contentsOfFile: jar, encoding: .utf8).contains("secret-value"))
        let calls = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
        let creations = calls.filter { $0.contains(dir) && $0.contains("O_CREAT") && !$0.contains("in.txt") }
        XCTAssertFalse(creations.isEmpty, "no file created in \(dir!)?\n\(calls.joined(separator: "\n"))")
        // strace -f ends a call another thread interrupted with "<unfinished ...>" after its
        // arguments instead of ")": the mode is the last argument either way.
        for call in creations {
            XCTAssertTrue(call.contains(", 0600)") || call.contains(", 0600 <unfinished ...>"), "created wider than 0600: \(call)")
        }
        XCTAssertFalse(calls.contains { $0.contains(dir) && $0.contains("chmod") }, "no mode fixed up afterwards")
    }

    /// Major 1, minor 3 (what /dev/null is), as glibc's makedev encodes them.
    static let nullDevice: dev_t = (1 << 8) | 3

    private func mode(_ path: String) -> mode_t {
        var st = stat()
        return stat(path, &st) == 0 ? st.st_mode & 0o7777 : 0
    }
}
