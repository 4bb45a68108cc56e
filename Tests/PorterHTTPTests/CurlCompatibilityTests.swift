import Foundation
import Porter
import PorterTestSupport
import XCTest

/// The porter command as a curl user types it, against nginx and the misbehaving server:
/// each flag with curl's documented meaning.
extension HTTPHandlerTests {
    private func porter(_ args: [String], env: [String: String?] = [:], cwd: String? = nil) throws -> ProcessResult {
        var environment = withoutProxies
        for (k, v) in env { environment[k] = v }
        return try runProcess(porterBinary, args, environment: environment, currentDirectory: cwd)
    }

    private func tempFolder() throws -> String {
        let dir = NSTemporaryDirectory() + "porter-curlflags-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }

    /// Thousands of small responses cost no more memory than a hundred: nothing is kept
    /// per response (a failed ContentDecoder init leaked 64 KiB of each: 190 MB for 3,000).
    func testManyResponsesKeepMemoryFlat() throws {
        let folder = try tempFolder()
        defer { try? FileManager.default.removeItem(atPath: folder) }
        func peakKiB(_ count: Int) throws -> Int {
            let list = folder + "/urls-\(count).txt"
            try String(repeating: nginx.http + "/index.html\n", count: count).write(toFile: list, atomically: true, encoding: .utf8)
            let rss = folder + "/rss"
            let r = try runProcess("/usr/bin/time", ["-f", "%M", "-o", rss, porterBinary, "-s", "--url-list", list, "--concurrency", "16"],
                                   environment: withoutProxies)
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertEqual(r.stdout.utf8.count, count * "hello from nginx\n".utf8.count)
            return Int(try String(contentsOfFile: rss, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
        }
        let few = try peakKiB(100)
        let many = try peakKiB(3000)
        XCTAssertGreaterThan(few, 0)
        // (The leak touched only the slices' first pages: 14 MB more for 3,000; flat now.)
        XCTAssertLessThan(many, few + 6 * 1024, "peak RSS \(many) KiB for 3,000 responses, \(few) KiB for 100")
    }

    /// -u sends Basic with the first request (curl's default), so a server that answers
    /// 404 until authorised is reached; --digest and --anyauth wait for a challenge.
    func testUserIsSentUpFrontWithBasic() throws {
        let hidden = nginx.http + "/hidden"
        let r = try porter(["-u", "alice:secret", hidden])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "found with Basic YWxpY2U6c2VjcmV0\n")
        XCTAssertEqual(try porter(["--basic", "-u", "alice:secret", hidden]).stdout, "found with Basic YWxpY2U6c2VjcmV0\n")
        XCTAssertEqual(try porter(["--anyauth", "-u", "alice:secret", hidden]).stdout, "nothing here\n", "challenge-driven: no header up front")
        XCTAssertEqual(try porter(["--digest", "-u", "alice:secret", hidden]).stdout, "nothing here\n")
        // The challenge-driven way still works where the server asks.
        XCTAssertEqual(try porter(["--anyauth", "-u", "alice:secret", nginx.http + "/basic/"]).stdout, "members only\n")
    }

    /// `porter -i URL-that-answers-401` prints the 401 (status line, headers, body).
    func testA401IsPrintedNotSwallowed() throws {
        let r = try porter(["-i", nginx.http + "/basic/"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stdout.hasPrefix("HTTP/1.1 401 Unauthorized\r\n"), r.stdout)
        XCTAssertTrue(r.stdout.contains("WWW-Authenticate: Basic realm=\"porter-test\""), r.stdout)
        XCTAssertTrue(r.stdout.contains("401 Authorization Required"), r.stdout)
        XCTAssertEqual(try porter(["-f", "-i", nginx.http + "/basic/"]).status, 22)
        // A wrong password: after the retry, the last 401 is the answer.
        let wrong = try porter(["--anyauth", "-u", "alice:wrong", "-w", "%{http_code}", nginx.http + "/basic/"])
        XCTAssertEqual(wrong.status, 0, wrong.stderr)
        XCTAssertTrue(wrong.stdout.hasSuffix("401"), wrong.stdout)
    }

    /// -i through redirects prints every hop's head, as curl -iL; --no-location -i prints
    /// the 3xx itself.
    func testIncludeShowsEveryHop() throws {
        let all = try porter(["-L", "-i", nginx.http + "/chain/2"])
        XCTAssertEqual(all.status, 0, all.stderr)
        XCTAssertEqual(all.stdout.components(separatedBy: "HTTP/1.1 302 Moved Temporarily\r\n").count - 1, 2, all.stdout)
        XCTAssertTrue(all.stdout.contains("HTTP/1.1 200 OK\r\n"), all.stdout)
        let stay = try porter(["-i", "--no-location", nginx.http + "/chain/1"])
        XCTAssertEqual(stay.status, 0, stay.stderr)
        XCTAssertTrue(stay.stdout.hasPrefix("HTTP/1.1 302 Moved Temporarily\r\n"), stay.stdout)
        XCTAssertTrue(stay.stdout.contains("Location: "), stay.stdout)
        XCTAssertFalse(stay.stdout.contains("HTTP/1.1 200"), stay.stdout)
    }

    /// -w with curl's variables, and -w json with all of them.
    func testWriteOutVariables() throws {
        let r = try porter(["-L", "-s", "-o", "/dev/null", "-w",
                            "%{url_effective} %{num_redirects} %{http_code} %{http_version} %{remote_ip} %{remote_port} %{content_type} %{size_download} %{exitcode}\\n",
                            nginx.http + "/chain/3"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "\(nginx.http)/index.html 3 200 1.1 127.0.0.1 \(nginx.httpPort) text/html 17 0\n")
        let times = try porter(["-s", "-o", "/dev/null", "-w",
                                "%{time_namelookup} %{time_connect} %{time_appconnect} %{time_starttransfer} %{time_total} %{speed_download}",
                                "--cacert", nginx.caFile, nginx.https + "/index.html"])
        let t = times.stdout.split(separator: " ").compactMap { Double($0) }
        XCTAssertEqual(t.count, 6, times.stdout)
        if t.count == 6 {
            XCTAssertGreaterThan(t[2], 0, "TLS took some time: \(times.stdout)")
            XCTAssertLessThanOrEqual(t[1], t[2])
            XCTAssertLessThanOrEqual(t[2], t[3] + 0.000001)
            XCTAssertLessThanOrEqual(t[3], t[4] + 0.000001)
        }
        let json = try porter(["-s", "-o", "/dev/null", "-w", "json", nginx.http + "/missing-page"])
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any], json.stdout)
        XCTAssertEqual(object["http_code"] as? String, "404")
        XCTAssertEqual(object["response_code"] as? Int, 404)
        XCTAssertEqual(object["num_redirects"] as? Int, 0)
        XCTAssertNotNil(object["time_total"])
        XCTAssertEqual(object["exitcode"] as? Int, 0)
    }

    /// -A, -e, -G with -d and --data-urlencode, --json, -F, -r, -D, -O, -J, --create-dirs.
    func testEverydayFlags() throws {
        let dir = try tempFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let req = nginx.http + "/request"
        let a = try porter(["-A", "agent/1", "-e", "http://from.test/", req])
        XCTAssertTrue(a.stdout.contains("ua=agent/1 referer=http://from.test/"), a.stdout)
        let g = try porter(["-G", "-d", "a=1", "--data-urlencode", "q=x y&z", req])
        XCTAssertTrue(g.stdout.hasPrefix("method=GET args=a=1&q=x+y%26z "), g.stdout)  // curl's encoding: a space is "+"
        let post = try porter(["--data-urlencode", "name=a b", "-d", "c=d", req])
        XCTAssertTrue(post.stdout.hasPrefix("method=POST"), post.stdout)
        XCTAssertTrue(post.stdout.contains("ct=application/x-www-form-urlencoded"), post.stdout)
        XCTAssertTrue(post.stdout.hasSuffix("c=d&name=a+b"), post.stdout)
        let json = try porter(["--json", "{\"k\":1}", req])
        XCTAssertTrue(json.stdout.contains("method=POST") && json.stdout.contains("ct=application/json accept=application/json"), json.stdout)
        XCTAssertTrue(json.stdout.hasSuffix("{\"k\":1}"), json.stdout)
        let upload = dir + "/up.txt"
        try "file body".write(toFile: upload, atomically: true, encoding: .utf8)
        let form = try porter(["-F", "field=value", "-F", "file=@\(upload);type=text/x-test", req])
        XCTAssertTrue(form.stdout.contains("ct=multipart/form-data; boundary="), form.stdout)
        XCTAssertTrue(form.stdout.contains("Content-Disposition: form-data; name=\"field\"\r\n\r\nvalue\r\n"), form.stdout)
        XCTAssertTrue(form.stdout.contains("Content-Disposition: form-data; name=\"file\"; filename=\"up.txt\"\r\nContent-Type: text/x-test\r\n\r\nfile body\r\n"), form.stdout)

        let range = try porter(["-r", "0-4", "-D", dir + "/head.txt", nginx.http + "/index.html"])
        XCTAssertEqual(range.stdout, "hello")
        let head = try String(contentsOfFile: dir + "/head.txt", encoding: .utf8)
        XCTAssertTrue(head.hasPrefix("HTTP/1.1 206 Partial Content\r\n"), head)

        let o = try porter(["-O", nginx.http + "/index.html"], cwd: dir)
        XCTAssertEqual(o.status, 0, o.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/index.html", encoding: .utf8), "hello from nginx\n")
        // -J takes the last component of the server's name only: no "../".
        let j = try porter(["-O", "-J", nginx.http + "/attachment"], cwd: dir)
        XCTAssertEqual(j.status, 0, j.stderr)
        XCTAssertEqual(try String(contentsOfFile: dir + "/evil name.txt", encoding: .utf8), "attached\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/attachment"))

        let deep = dir + "/a/b/c/out.txt"
        XCTAssertNotEqual(try porter(["-o", deep, nginx.http + "/index.html"]).status, 0, "no folders without --create-dirs")
        XCTAssertEqual(try porter(["--create-dirs", "-o", deep, nginx.http + "/index.html"]).status, 0)
        XCTAssertEqual(try String(contentsOfFile: deep, encoding: .utf8), "hello from nginx\n")
    }

    /// -C N continues from byte N; --limit-rate holds the rate down; --connect-timeout,
    /// -m, -L and -S are accepted with curl's meaning; -K reads options from a file.
    func testResumeRateConfigAndFriends() throws {
        let dir = try tempFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let out = dir + "/partial"
        try "hello XXXXXXXXX".write(toFile: out, atomically: true, encoding: .utf8)
        let cont = try porter(["-C", "6", "-o", out, nginx.http + "/index.html"])
        XCTAssertEqual(cont.status, 0, cont.stderr)
        XCTAssertEqual(try String(contentsOfFile: out, encoding: .utf8), "hello from nginx\n")
        XCTAssertEqual(try porter(["-C", "6", nginx.http + "/index.html"]).stdout, "from nginx\n")

        let start = Date()
        let slow = try porter(["--limit-rate", "1m", "-r", "0-2097151", "-o", "/dev/null", nginx.http + "/big.bin"])
        XCTAssertEqual(slow.status, 0, slow.stderr)
        XCTAssertGreaterThan(Date().timeIntervalSince(start), 1.2, "2 MiB at 1 MiB/s")

        XCTAssertEqual(try porter(["-L", "-S", "-m", "10", "--connect-timeout", "5", nginx.http + "/chain/1"]).stdout, "hello from nginx\n")
        let silentError = try porter(["-s", "-S", nginx.http.replacingOccurrences(of: "\(nginx.httpPort)", with: "1") + "/"])
        XCTAssertEqual(silentError.status, 7)
        XCTAssertTrue(silentError.stderr.contains("porter:"), "-S shows the error under -s")

        let config = dir + "/porter.config"
        try """
            # curl config syntax
            user-agent = "from a config file"
            --referer: http://config.test/
            silent
            url = \(nginx.http)/request
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let k = try porter(["-K", config])
        XCTAssertEqual(k.status, 0, k.stderr)
        XCTAssertTrue(k.stdout.contains("ua=from a config file referer=http://config.test/"), k.stdout)
        XCTAssertEqual(try porter(["-K", dir + "/missing.config"]).status, 26, "curl's 26: cannot read a file")
    }

    /// A URL without a scheme means http:// (ftp:// for a host named ftp.*), as in curl.
    func testURLsWithoutAScheme() throws {
        let plain = try porter(["127.0.0.1:\(nginx.httpPort)/index.html"])
        XCTAssertEqual(plain.status, 0, plain.stderr)
        XCTAssertEqual(plain.stdout, "hello from nginx\n")
        let local = try porter(["localhost:\(nginx.httpPort)/index.html"])
        XCTAssertEqual(local.status, 0, local.stderr)
        XCTAssertEqual(local.stdout, "hello from nginx\n")
        XCTAssertEqual(try porter(["data:,still%20data"]).stdout, "still data")
    }

    /// -v shows the request and response header lines and the connection, with
    /// passwords and cookie values masked.
    func testVerboseShowsHeadersMasked() throws {
        let r = try porter(["-v", "-u", "alice:secret", "-b", "session=s3cr3t", nginx.http + "/basic/"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stderr.contains("> Authorization: Basic ***"), r.stderr)
        XCTAssertTrue(r.stderr.contains("> Cookie: session=***"), r.stderr)
        XCTAssertTrue(r.stderr.contains("< HTTP/1.1 200 OK"), r.stderr)
        XCTAssertTrue(r.stderr.contains("< Content-Type: text/html"), r.stderr)
        XCTAssertTrue(r.stderr.contains("* Connected to 127.0.0.1 (127.0.0.1) port \(nginx.httpPort)"), r.stderr)
        XCTAssertFalse(r.stderr.contains("secret") || r.stderr.contains("YWxpY2U6c2VjcmV0") || r.stderr.contains("s3cr3t"), r.stderr)
        let tls = try porter(["-v", "--cacert", nginx.caFile, "-o", "/dev/null", nginx.https + "/index.html"])
        XCTAssertTrue(tls.stderr.contains("* TLS: TLSv1."), tls.stderr)
    }
}

extension MisbehavingServerTests {
    private var base: String { "http://127.0.0.1:\(MisbehavingServerTests.port)" }

    /// RFC 6265 §5.4: exactly one Cookie field, pairs joined by "; " (the user's -b, -H and
    /// the store's); -H 'Name:' removes even what libcurl adds; -H 'Name;' sends it empty;
    /// repeated -H send every value.
    func testRequestHeadLinesAsCurlWritesThem() throws {
        let r = try runProcess(porterBinary, ["-b", "a=1; b=2", "-H", "Accept:", "-H", "X-Empty;", "-H", "X-A: 1", "-H", "X-A: 2",
                                              base + "/echo-head"], environment: ["http_proxy": nil])
        XCTAssertEqual(r.status, 0, r.stderr)
        let lines = r.stdout.components(separatedBy: "\r\n")
        XCTAssertEqual(lines.filter { $0.lowercased().hasPrefix("cookie:") }, ["Cookie: a=1; b=2"], r.stdout)
        XCTAssertFalse(lines.contains { $0.lowercased().hasPrefix("accept:") }, r.stdout)
        XCTAssertTrue(lines.contains("X-Empty:") || lines.contains("X-Empty: "), r.stdout)
        XCTAssertEqual(lines.filter { $0.hasPrefix("X-A:") }, ["X-A: 1", "X-A: 2"], r.stdout)
        let own = try runProcess(porterBinary, ["-H", "Cookie: x=1; y=2", base + "/echo-head"], environment: ["http_proxy": nil])
        XCTAssertEqual(own.stdout.components(separatedBy: "\r\n").filter { $0.lowercased().hasPrefix("cookie:") }, ["Cookie: x=1; y=2"])
    }

    /// A plain GET's head on the wire has curl --compressed's fields in curl's order (Host,
    /// User-Agent, Accept, Accept-Encoding): the User-Agent is libcurl's own, not a custom
    /// line after Accept. -A replaces it and -H 'User-Agent:' removes it, as in curl.
    func testPlainGetHeadHasCurlsFieldsInCurlsOrder() throws {
        func fields(_ head: String) -> [(name: String, value: String)] {
            head.components(separatedBy: "\r\n").dropFirst().compactMap { line in
                guard let colon = line.firstIndex(of: ":") else { return nil }
                return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }
        }
        let porter = try runProcess(porterBinary, ["-s", base + "/echo-head"], environment: ["http_proxy": nil])
        XCTAssertEqual(porter.status, 0, porter.stderr)
        let curl = try runProcess("/usr/bin/curl", ["-s", "--compressed", base + "/echo-head"], environment: ["http_proxy": nil])
        XCTAssertEqual(fields(porter.stdout).map(\.name), fields(curl.stdout).map(\.name), porter.stdout + "\n" + curl.stdout)
        XCTAssertEqual(fields(porter.stdout).map(\.name), ["Host", "User-Agent", "Accept", "Accept-Encoding"], porter.stdout)
        XCTAssertEqual(fields(porter.stdout).first { $0.name == "User-Agent" }?.value, "Porter/\(porterVersion)")
        XCTAssertEqual(fields(porter.stdout).first { $0.name == "Accept-Encoding" }?.value, "gzip, deflate, br, zstd")

        let agent = try runProcess(porterBinary, ["-s", "-A", "mine/1", base + "/echo-head"], environment: ["http_proxy": nil])
        XCTAssertEqual(fields(agent.stdout).filter { $0.name.lowercased() == "user-agent" }.map(\.value), ["mine/1"], agent.stdout)
        let none = try runProcess(porterBinary, ["-s", "-H", "User-Agent:", base + "/echo-head"], environment: ["http_proxy": nil])
        XCTAssertFalse(none.stdout.lowercased().contains("user-agent"), none.stdout)
    }

    /// A proxy's CONNECT carries the User-Agent the request does, as curl's does: the
    /// default one, or -A's (libcurl sends CURLOPT_USERAGENT there; custom lines never go).
    func testAProxysConnectCarriesTheRequestsUserAgentAsCurlsDoes() throws {
        func connectHead(_ program: String, _ extra: [String]) throws -> String {
            let target = "t-\(UUID().uuidString.prefix(8).lowercased()).invalid:443"
            _ = try runProcess(program, ["-s", "-x", base] + extra + ["https://\(target)/"], environment: ["http_proxy": nil, "https_proxy": nil])
            return try runProcess(program, ["-s", base + "/connect-head?\(target)"], environment: ["http_proxy": nil]).stdout
        }
        func agents(_ head: String) -> [String] {
            head.components(separatedBy: "\r\n").filter { $0.lowercased().hasPrefix("user-agent:") }
        }
        let plain = try connectHead(porterBinary, [])
        XCTAssertTrue(plain.hasPrefix("CONNECT "), plain)
        XCTAssertEqual(agents(plain), ["User-Agent: Porter/\(porterVersion)"], plain)
        let mine = try connectHead(porterBinary, ["-A", "mine/1"])
        let curls = try connectHead("/usr/bin/curl", ["-A", "mine/1"])
        XCTAssertEqual(agents(curls), ["User-Agent: mine/1"], "curl's own CONNECT: \(curls)")
        XCTAssertEqual(agents(mine), agents(curls), mine)
    }

    /// -T asks "Expect: 100-continue" as curl does (any non-empty PUT over HTTP/1.1), and
    /// a server that never answers it still gets the body (after the library's 250 ms
    /// wait, not libcurl's second).
    func testSmallUploadsDoNotWaitForContinue() throws {
        let dir = NSTemporaryDirectory() + "porter-expect-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "abc".write(toFile: dir + "/small", atomically: true, encoding: .utf8)
        let r = try runProcess(porterBinary, ["-T", dir + "/small", base + "/ignore-expect"], environment: ["http_proxy": nil])
        XCTAssertEqual(r.stdout, "got 3\n", r.stderr)
        let head = try runProcess(porterBinary, ["-T", dir + "/small", base + "/echo-head"], environment: ["http_proxy": nil])
        XCTAssertTrue(head.stdout.lowercased().contains("content-length: 3"), head.stdout + head.stderr)
        let curlHead = try runProcess("/usr/bin/curl", ["-s", "-T", dir + "/small", base + "/echo-head"], environment: ["http_proxy": nil])
        XCTAssertEqual(head.stdout.lowercased().contains("expect: 100-continue"), curlHead.stdout.lowercased().contains("expect: 100-continue"),
                       head.stdout)
        // -H 'Expect:' takes it away, as in curl.
        let none = try runProcess(porterBinary, ["-H", "Expect:", "-T", dir + "/small", base + "/echo-head"], environment: ["http_proxy": nil])
        XCTAssertFalse(none.stdout.lowercased().contains("expect:"), none.stdout)
    }

    /// --retry N retries curl's transient failures (here two 503s with Retry-After: 1).
    func testRetryTransientFailures() throws {
        let key = UUID().uuidString
        let once = try runProcess(porterBinary, ["-s", "-w", "%{http_code}", base + "/retry-503?\(key)"], environment: ["http_proxy": nil])
        XCTAssertEqual(once.stdout, "busy\n503", "without --retry the 503 is the answer")
        let r = try runProcess(porterBinary, ["--retry", "3", base + "/retry-503?\(key)-b"], environment: ["http_proxy": nil])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "third time\n")
        XCTAssertEqual(r.stderr.components(separatedBy: "will retry").count - 1, 2, r.stderr)
    }
}

/// RFC 9111 behaviour of the cache against nginx, its access log counting what reached it.
extension HTTPHandlerTests {
    private func hits(_ path: String) -> Int {
        let text = (try? String(contentsOfFile: nginx.dir + "/logs/cache.log", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").filter { $0.contains(" \(path) ") }.count
    }

    private func cachedSession() -> Session {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.responseCache = HTTPCache()
        return Session(configuration: c)
    }

    /// only-if-cached gets 504 with nothing stored; a client's own matching ETag gets 304
    /// from the cache; a Range is cut from the stored response; none reach the server.
    func testRequestDirectivesAnsweredByTheCache() async throws {
        let s = cachedSession()
        let url = URL(string: nginx.http + "/cache/fresh.txt?directives")!
        var onlyIfCached = Request(url: url)
        onlyIfCached.setValue("only-if-cached", forHeader: "Cache-Control")
        let (_, miss) = try await s.data(for: onlyIfCached)
        XCTAssertEqual(miss.statusCode, 504)
        XCTAssertEqual(hits("/cache/fresh.txt?directives"), 0)
        let (body, first) = try await s.data(from: url)
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "cached fresh\n")
        let etag = try XCTUnwrap(first.value(forHeader: "ETag"))
        let (_, hit) = try await s.data(for: onlyIfCached)
        XCTAssertEqual(hit.statusCode, 200)
        var conditional = Request(url: url)
        conditional.setValue(etag, forHeader: "If-None-Match")
        let (empty, notModified) = try await s.data(for: conditional)
        XCTAssertEqual(notModified.statusCode, 304)
        XCTAssertTrue(empty.isEmpty)
        var ranged = Request(url: url)
        ranged.setValue("bytes=0-5", forHeader: "Range")
        let (part, partial) = try await s.data(for: ranged)
        XCTAssertEqual(partial.statusCode, 206)
        XCTAssertEqual(String(decoding: part, as: UTF8.self), "cached")
        XCTAssertEqual(hits("/cache/fresh.txt?directives"), 1, "only the first load reached nginx")
    }

    /// RFC 5861: a stale response inside its stale-while-revalidate window is served at
    /// once, and revalidated in the background (a 304 in nginx's log).
    func testStaleWhileRevalidate() async throws {
        let s = cachedSession()
        let url = URL(string: nginx.http + "/cache/swr.txt?w")!
        _ = try await s.data(from: url)
        try await Task.sleep(nanoseconds: 2_100_000_000)   // stale now (max-age=1), inside the window
        final class FetchTypes: TaskDelegate, @unchecked Sendable {
            let seen = Locked<[String]>([])
            func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
                seen.withLock { $0 += metrics.transactionMetrics.map(\.fetchType) }
            }
        }
        let own = FetchTypes()
        let (body, response) = try await s.data(for: Request(url: url), delegate: own)
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "cached swr\n")
        XCTAssertEqual(response.statusCode, 200)
        // Served at once: from the cache as it was, not after the revalidation (which
        // would make it "revalidated").
        XCTAssertEqual(own.seen.current, ["localCache"])
        var logged: [String] = []
        let end = Date().addingTimeInterval(60)
        while Date() < end {
            let text = (try? String(contentsOfFile: nginx.dir + "/logs/cache.log", encoding: .utf8)) ?? ""
            logged = text.split(separator: "\n").map(String.init).filter { $0.contains(" /cache/swr.txt?w ") }
            if logged.count >= 2 { break }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        XCTAssertEqual(logged.count, 2, "\(logged)")
        XCTAssertTrue(logged.last?.hasSuffix(" 304") == true, "revalidated in the background: \(logged)")
    }
}
