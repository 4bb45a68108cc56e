import Foundation
import Porter
import PorterTestSupport
import XCTest

/// porter as a drop-in for curl scripts: the same command line run with curl 7.88 (the
/// reference) and porter against the same real server, exit codes and output compared.
extension HTTPHandlerTests {
    private func porter(_ args: [String], cwd: String? = nil) throws -> ProcessResult {
        try runProcess(porterBinary, args, environment: withoutProxies, currentDirectory: cwd)
    }

    private func curl(_ args: [String], cwd: String? = nil) throws -> ProcessResult {
        try runProcess("/usr/bin/curl", args, environment: withoutProxies, currentDirectory: cwd)
    }

    private func scratch() throws -> String {
        let dir = NSTemporaryDirectory() + "porter-dropin-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    /// Every failure a script tests exits with curl's number, checked against curl itself
    /// on the same command line (and against the number curl documents).
    func testExitCodesAreCurls() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let closedPort = try NginxFixture.freePort()
        let cases: [(Int32, [String])] = [
            (0, [nginx.http + "/missing"]),
            (22, ["-f", nginx.http + "/missing"]),
            (7, ["http://127.0.0.1:\(closedPort)/"]),
            (6, ["http://no-such-host.invalid/"]),
            (47, ["-L", "--max-redirs", "1", nginx.http + "/chain/3"]),
            (60, [nginx.https + "/index.html"]),
            (23, ["-o", dir + "/no/such/folder/x", nginx.http + "/index.html"]),
            (26, ["-T", dir + "/not-there", nginx.http + "/dav/x"]),
            (37, ["file://" + dir + "/not-there"]),
            (1, ["nosuchscheme://x/"]),
            (3, ["http://[::1"]),
            (2, ["--no-such-option", nginx.http + "/index.html"]),
            (2, ["--limit-rate", "fast", nginx.http + "/index.html"]),
            (28, ["-m", "1", nginx.http + "/slow"]),
            (1, ["--proto", "=https", nginx.http + "/index.html"]),
            (1, ["-L", "--proto-redir", "=https", nginx.http + "/chain/1"]),
            (26, ["-K", dir + "/no-config", nginx.http + "/index.html"]),
        ]
        for (expected, args) in cases {
            let reference = try curl(["-s"] + args)
            XCTAssertEqual(reference.status, expected, "curl \(args) (the reference)")
            let r = try porter(["-s"] + args)
            XCTAssertEqual(r.status, expected, "porter \(args): \(r.stderr)")
        }
    }

    /// Without -L a 3xx is the answer, body and all, as curl prints it; -L follows.
    func testRedirectsOnlyWithL() throws {
        for args in [[nginx.http + "/chain/1"], ["-i", nginx.http + "/chain/1"], ["--no-location", "-i", nginx.http + "/chain/1"],
                     ["-L", nginx.http + "/chain/2"], ["-L", "--no-location", nginx.http + "/chain/1"], [nginx.http + "/to-file"]] {
            let reference = try curl(["-s"] + args)
            let r = try porter(["-s"] + args)
            XCTAssertEqual(r.status, reference.status, "\(args): \(r.stderr)")
            // The body as curl prints it; heads compared by their status line.
            func body(_ s: String) -> String { s.components(separatedBy: "\r\n\r\n").last ?? s }
            func status(_ s: String) -> String { s.hasPrefix("HTTP/") ? s.components(separatedBy: "\r\n")[0] : "" }
            XCTAssertEqual(body(r.stdout), body(reference.stdout), "\(args)")
            XCTAssertEqual(status(r.stdout), status(reference.stdout), "\(args)")
        }
        XCTAssertTrue(try porter([nginx.http + "/chain/1"]).stdout.contains("302 Found"))
        XCTAssertEqual(try porter(["-L", nginx.http + "/chain/2"]).stdout, "hello from nginx\n")
    }

    /// -v shows the request head exactly as libcurl sent it (a -T upload is a PUT with its
    /// Content-Length, not "GET"), credentials masked, and each response line once.
    func testVerboseShowsTheRequestAsSent() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = dir + "/up.txt"
        try "uploaded\n".write(toFile: file, atomically: true, encoding: .utf8)
        let r = try porter(["-v", "-u", "alice:secret", "-T", file, nginx.http + "/dav/v.txt"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let sent = r.stderr.split(separator: "\n").filter { $0.hasPrefix("> ") }.map(String.init)
        XCTAssertEqual(sent.first, "> PUT /dav/v.txt HTTP/1.1", r.stderr)
        XCTAssertTrue(sent.contains("> Host: 127.0.0.1:\(nginx.httpPort)"), r.stderr)
        XCTAssertTrue(sent.contains("> Content-Length: 9"), r.stderr)
        XCTAssertTrue(sent.contains("> Authorization: Basic ***"), r.stderr)
        XCTAssertFalse(r.stderr.contains("YWxpY2U6c2VjcmV0"), "the credential is masked")
        XCTAssertFalse(r.stderr.contains("GET"), r.stderr)
        // curl sends the same request line and Content-Length.
        let reference = try curl(["-v", "-u", "alice:secret", "-T", file, nginx.http + "/dav/v.txt"])
        XCTAssertTrue(reference.stderr.contains("> PUT /dav/v.txt HTTP/1.1"))
        XCTAssertTrue(reference.stderr.contains("> Content-Length: 9"))
        // Each event once: one status line, no second (log) copy of it.
        let plain = try porter(["-v", nginx.http + "/index.html"])
        XCTAssertEqual(plain.stderr.components(separatedBy: "HTTP/1.1 200 OK").count - 1, 1, plain.stderr)
        XCTAssertEqual(plain.stderr.components(separatedBy: "> GET /index.html HTTP/1.1").count - 1, 1, plain.stderr)
    }

    /// Uploads ask `Expect: 100-continue` exactly when curl does (bodies over 1 MiB).
    func testExpectContinueAsCurl() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let small = dir + "/small.bin", large = dir + "/large.bin"
        try Data(count: 1000).write(to: URL(fileURLWithPath: small))
        try Data(count: (1 << 20) + 1).write(to: URL(fileURLWithPath: large))
        for file in [small, large] {
            let r = try porter(["-v", "-T", file, nginx.http + "/dav/e.bin"])
            let reference = try curl(["-v", "-T", file, nginx.http + "/dav/e.bin"])
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertEqual(r.stderr.contains("> Expect: 100-continue"), reference.stderr.contains("> Expect: 100-continue"), file)
        }
        XCTAssertTrue(try porter(["-v", "-T", large, nginx.http + "/dav/e.bin"]).stderr.contains("> Expect: 100-continue"))
    }

    /// Every --data-urlencode form encodes byte for byte as curl's (a file's bytes as they
    /// are, not UTF-8 repaired); --data-raw keeps a leading '@'.
    func testDataFormsAsCurl() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Data([0x61, 0x20, 0xFF, 0x0A, 0x26, 0x3D, 0x7E, 0xC3, 0xA9]).write(to: URL(fileURLWithPath: dir + "/f.bin"))
        let forms: [[String]] = [
            ["--data-urlencode", "hello world&x=y"], ["--data-urlencode", "=a b+c"], ["--data-urlencode", "name=a b/é"],
            ["--data-urlencode", "@f.bin"], ["--data-urlencode", "file@f.bin"], ["--data-raw", "@f.bin"],
            ["-d", "a=1", "--data-urlencode", "b=2 3"],
        ]
        for form in forms {
            let reference = try curl(["-s"] + form + [nginx.http + "/echo"], cwd: dir)
            let r = try porter(["-s"] + form + [nginx.http + "/echo"], cwd: dir)
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertEqual(r.stdout, reference.stdout, "\(form)")
        }
    }

    /// The everyday curl flags, each compared with curl where the output is the same.
    func testCurlFlagsScriptsUse() throws {
        let dir = try scratch()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let index = nginx.http + "/index.html"
        // --fail-with-body: the body, and exit 22.
        let fwb = try porter(["-s", "--fail-with-body", nginx.http + "/basic/"])
        XCTAssertEqual(fwb.status, 22)
        XCTAssertEqual(fwb.stdout, try curl(["-s", "--fail-with-body", nginx.http + "/basic/"]).stdout)
        // --oauth2-bearer
        XCTAssertEqual(try porter(["--oauth2-bearer", "tok", nginx.http + "/headers"]).stdout,
                       try curl(["-s", "--oauth2-bearer", "tok", "-A", "Porter/\(Porter.version)", nginx.http + "/headers"]).stdout)
        // --url, -Z / --parallel-max, --remote-name-all, --output-dir, -#
        let z = try porter(["-Z", "--parallel-max", "2", "--url", index, index])
        XCTAssertEqual(z.stdout, "hello from nginx\nhello from nginx\n", z.stderr)
        let o = try porter(["-#", "--create-dirs", "--output-dir", dir + "/out", "--remote-name-all", index])
        XCTAssertEqual(o.status, 0, o.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/out/index.html", encoding: .utf8), "hello from nginx\n")
        // --connect-to: the name in the URL, the connection to the fixture.
        let ct = try porter(["--connect-to", "porter.test:80:127.0.0.1:\(nginx.httpPort)", "http://porter.test/index.html"])
        XCTAssertEqual(ct.stdout, "hello from nginx\n", ct.stderr)
        // -4 reaches 127.0.0.1; -6 cannot, as curl.
        XCTAssertEqual(try porter(["-4", index]).stdout, "hello from nginx\n")
        XCTAssertEqual(try porter(["-s", "-6", index]).status, try curl(["-s", "-6", index]).status)
        // --noproxy '*' with a dead proxy: straight to the server.
        XCTAssertEqual(try porter(["-x", "http://127.0.0.1:1", "--noproxy", "*", index]).stdout, "hello from nginx\n")
        // --tlsv1.2 / --tlsv1.3 / --tls-max
        let tls = try porter(["--cacert", nginx.caFile, "--tlsv1.2", "--tls-max", "1.2", "-w", "%{http_code}", "-o", "/dev/null",
                              nginx.https + "/index.html"])
        XCTAssertEqual(tls.stdout, "200", tls.stderr)
        let mismatch = try porter(["-s", "--cacert", nginx.caFile, "--tlsv1.3", "--tls-max", "1.2", nginx.https + "/index.html"])
        XCTAssertEqual(mismatch.status, try curl(["-s", "--cacert", nginx.caFile, "--tlsv1.3", "--tls-max", "1.2", nginx.https + "/index.html"]).status)
        // --etag-save, then --etag-compare: a 304 with nothing to write.
        let etag = dir + "/etag"
        XCTAssertEqual(try porter(["--etag-save", etag, index]).stdout, "hello from nginx\n")
        XCTAssertEqual(try String(contentsOfFile: etag, encoding: .utf8), try curlETag(index, dir))
        let cmp = try porter(["--etag-compare", etag, "-w", "%{http_code}", index])
        XCTAssertEqual(cmp.stdout, "304", cmp.stderr)
        // -z with a file newer than the resource: 304; with '-': 412 unless unchanged.
        let newer = dir + "/newer"
        XCTAssertTrue(FileManager.default.createFile(atPath: newer, contents: Data()))
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(3600)], ofItemAtPath: newer)
        // (nginx compares If-Modified-Since exactly and sends the body: like curl, porter
        // writes nothing when Last-Modified does not meet the condition.)
        XCTAssertEqual(try porter(["-z", newer, index]).stdout, try curl(["-s", "-z", newer, index]).stdout)
        XCTAssertEqual(try porter(["-z", newer, index]).stdout, "")
        XCTAssertEqual(try porter(["-z", "-" + newer, index]).stdout, "hello from nginx\n")
        XCTAssertEqual(try porter(["-z", "Sun, 06 Nov 1994 08:49:37 GMT", "-w", "%{http_code}", "-o", "/dev/null", index]).stdout, "200")
        // --trace-ascii -: the request and the response as sent and received.
        let trace = try porter(["--trace-ascii", dir + "/trace", index])
        XCTAssertEqual(trace.status, 0, trace.stderr)
        let traced = try String(contentsOfFile: dir + "/trace", encoding: .utf8)
        XCTAssertTrue(traced.contains("=> Send header"), traced)
        XCTAssertTrue(traced.contains("0000: GET /index.html HTTP/1.1"), traced)
        XCTAssertTrue(traced.contains("<= Recv data"), traced)
        XCTAssertTrue(traced.contains("hello from nginx"), traced)
        let hex = try porter(["--trace", dir + "/trace.hex", index])
        XCTAssertEqual(hex.status, 0)
        XCTAssertTrue(try String(contentsOfFile: dir + "/trace.hex", encoding: .utf8).contains("0000: 47 45 54 20"))
    }

    private func curlETag(_ url: String, _ dir: String) throws -> String {
        _ = try curl(["-s", "-o", "/dev/null", "--etag-save", dir + "/curl-etag", url])
        return try String(contentsOfFile: dir + "/curl-etag", encoding: .utf8)
    }

    /// --limit-rate 200k holds within 10 % over every 2-second window, measured by the
    /// bytes porter wrote and when (not by the wall-clock length of the whole run).
    func testLimitRateHoldsOverEveryWindow() throws {
        let rate = 200 * 1024
        let total = rate * 9
        let p = Process()
        p.executableURL = URL(fileURLWithPath: porterBinary)
        p.arguments = ["-s", "--limit-rate", "200k", "-r", "0-\(total - 1)", nginx.http + "/big.bin"]
        p.environment = ProcessInfo.processInfo.environment.filter { !proxyVariables.contains($0.key) }
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let start = Date()
        var samples: [(TimeInterval, Int)] = [(0, 0)]  // (time, bytes so far), from the start
        var count = 0
        while true {
            let d = out.fileHandleForReading.availableData
            if d.isEmpty { break }
            count += d.count
            samples.append((Date().timeIntervalSince(start), count))
        }
        p.waitUntilExit()
        XCTAssertEqual(count, total)
        // For every sample, the bytes that had certainly arrived within the 2 s after it
        // (up to the last sample inside the window), over 2 s: a lower bound on the rate
        // of that window, so a burst cannot hide between coarse samples.
        var worst = 0.0
        for (i, (t0, b0)) in samples.enumerated() {
            guard samples.last.map({ $0.0 >= t0 + 2 }) == true else { break }
            let inside = samples[i...].last(where: { $0.0 <= t0 + 2 }) ?? (t0, b0)
            worst = max(worst, Double(inside.1 - b0) / 2 / Double(rate))
        }
        XCTAssertLessThan(worst, 1.10, "the fastest 2-second window ran at \(worst)x the limit")
        XCTAssertGreaterThan(samples.last?.0 ?? 0, 9 * 0.9 - 0.5, "9 seconds' worth at the limit took less")
    }

    /// countOfBytesSent counts the body's bytes, not a chunked upload's framing.
    func testBytesSentCountsTheBodyOnly() throws {
        let body = Data(repeating: 0x61, count: 300_000)
        var request = Request(url: URL(string: nginx.http + "/echo")!, method: "POST")
        request.body = .stream(DataBodyStream(body))  // no length: sent chunked
        let done = DispatchSemaphore(value: 0)
        let received = Locked(Data())
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        let task = Session(configuration: c).dataTask(with: request) { data, _, _ in
            received.withLock { $0 = data ?? Data() }
            done.signal()
        }
        task.resume()
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(received.current.count, "POST ".utf8.count + body.count)
        XCTAssertEqual(task.countOfBytesSent, Int64(body.count))
    }
}

/// A server that lies or breaks off: porter exits as curl does on the same URL.
extension MisbehavingServerTests {
    func testBrokenServersExitAsCurl() throws {
        let base = "http://127.0.0.1:\(MisbehavingServerTests.port)"
        let cases: [(String, Set<Int32>)] = [
            ("/empty", [52]), ("/truncated", [18]), ("/reset", [18, 56]), ("/malformed", [1, 8]),
            ("/weird-status", [0]), ("/junk-headers", [0, 8]),
        ]
        for (path, expected) in cases {
            let reference = try runProcess("/usr/bin/curl", ["-s", "-o", "/dev/null", base + path], environment: withoutProxies)
            let r = try runProcess(porterBinary, ["-s", "-o", "/dev/null", base + path], environment: withoutProxies)
            XCTAssertEqual(r.status, reference.status, "\(path): \(r.stderr)")
            XCTAssertTrue(expected.contains(r.status), "\(path): \(r.status)")
        }
    }
}
