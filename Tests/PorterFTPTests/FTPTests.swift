import XCTest
import PorterTestSupport
@testable import Porter

/// ftp, explicit FTPS (ftp:// with AUTH TLS) and ftps:// (implicit TLS, curl's meaning)
/// against pyftpdlib on loopback.
final class FTPTests: XCTestCase {
    nonisolated(unsafe) static var setup: Result<(Process, Int, String), Error>?

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let bigSize = 4 << 20
    static func bigByte(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: i &* 31 &+ 7) }

    override class func setUp() {
        super.setUp()
        Porter.bootstrap()
        setup = Result {
            let python = root.appendingPathComponent(".build/ftp-venv/bin/python").path
            guard FileManager.default.isExecutableFile(atPath: python) else {
                throw NginxFixture.Failure.setup("no pyftpdlib venv at \(python): run `make test` (scripts/install-deps.sh makes it)")
            }
            var template = Array((NSTemporaryDirectory() + "porter-ftp-XXXXXX").utf8CString)
            guard let made = mkdtemp(&template) else { throw NginxFixture.Failure.setup("mkdtemp") }
            let dir = String(cString: made)
            let files = dir + "/files"
            for sub in ["files/pub", "files/docs", "files/upload", "tls"] {
                try FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
            }
            try "readme for everyone\n".write(toFile: files + "/pub/readme.txt", atomically: true, encoding: .utf8)
            try "alpha\n".write(toFile: files + "/docs/a.txt", atomically: true, encoding: .utf8)
            try "beta beta\n".write(toFile: files + "/docs/b.txt", atomically: true, encoding: .utf8)
            try FileManager.default.createDirectory(atPath: files + "/docs/sub", withIntermediateDirectories: true)
            try Data((0..<bigSize).map(bigByte)).write(to: URL(fileURLWithPath: files + "/big.bin"))
            try NginxFixture.makeCertificates(in: dir + "/tls")
            let (p, port) = try startReadyServer(python, [root.appendingPathComponent("Tests/PorterFTPTests/ftpserver.py").path,
                                                          files, dir + "/tls/leaf.pem", dir + "/tls/leaf.key",
                                                          dir + "/ftp.log", dir + "/implicit.port"])
            guard port > 0 else { throw NginxFixture.Failure.setup("the FTP server did not start") }
            return (p, port, dir)
        }
    }

    override class func tearDown() {
        if case .success(let (p, _, dir))? = setup {
            p.terminate()
            p.waitUntilExit()
            try? FileManager.default.removeItem(atPath: dir)
        }
        super.tearDown()
    }

    private(set) var port = 0
    private(set) var dir = ""
    override func setUpWithError() throws {
        let (_, p, d) = try XCTUnwrap(FTPTests.setup).get()
        port = p
        dir = d
    }

    private func session(_ delegate: (any SessionDelegate)? = nil, _ change: (inout SessionConfiguration) -> Void = { _ in }) -> Session {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.caCertificateFile = dir + "/tls/ca.pem"
        change(&c)
        return Session(configuration: c, delegate: delegate)
    }
    func url(_ path: String, user: String = "alice:secret@", scheme: String = "ftp") -> URL {
        URL(string: "\(scheme)://\(user)127.0.0.1:\(port)\(path)")!
    }

    /// pyftpdlib answers RETR with 125 ("data connection already open") when the
    /// passive data connection is up first, as it is with libcurl: the reply that crashes
    /// Foundation's URLSession on Linux. The transcript proves the 125 was sent.
    func test125ReplyToRETR() async throws {
        let (data, _) = try await session().data(from: url("/docs/b.txt"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "beta beta\n")
        let log = (try? String(contentsOfFile: dir + "/ftp.log", encoding: .utf8)) ?? ""
        let lines = log.split(separator: "\n")
        guard let retr = lines.lastIndex(where: { $0.contains("<- RETR b.txt") }) else {
            return XCTFail("no RETR in the server's transcript:\n\(log.suffix(2000))")
        }
        XCTAssertTrue(lines[retr...].prefix(4).contains { $0.contains("125 Data connection already open") },
                      "the server did not answer 125:\n\(lines[retr...].prefix(4).joined(separator: "\n"))")
    }

    func testDownloadWithSizeUpFrontAndAnonymous() async throws {
        // Delegate style: the data delegate sees the response before the body (the async
        // API, like URLSession's, does not ask it).
        final class Head: DataDelegate, @unchecked Sendable {
            let lock = NSLock()
            var length: Int64?
            var bytesBeforeResponse = 0
            var received = 0
            let done = DispatchSemaphore(value: 0)
            func dataTask(_ task: DataTask, didReceive response: Response, completion: @escaping @Sendable (ResponseDisposition) -> Void) {
                lock.withLock { length = response.expectedContentLength; bytesBeforeResponse = received }
                completion(.allow)
            }
            func dataTask(_ task: DataTask, didReceive data: Data) { lock.withLock { received += data.count } }
            func task(_ task: SessionTask, didCompleteWithError error: PorterError?) { done.signal() }
        }
        let head = Head()
        session(head).dataTask(with: url("/big.bin")).resume()
        XCTAssertEqual(head.done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(head.lock.withLock { head.length }, Int64(FTPTests.bigSize), "the size is known up front")
        XCTAssertEqual(head.lock.withLock { head.bytesBeforeResponse }, 0)
        XCTAssertEqual(head.lock.withLock { head.received }, FTPTests.bigSize)
        let (data, response) = try await session().data(from: url("/big.bin"))
        XCTAssertEqual(data.count, FTPTests.bigSize)
        XCTAssertEqual(data.suffix(3), Data((FTPTests.bigSize - 3..<FTPTests.bigSize).map(FTPTests.bigByte)))
        XCTAssertEqual(response.expectedContentLength, Int64(FTPTests.bigSize))
        // Anonymous users are rooted in pub/.
        let (readme, r2) = try await session().data(from: url("/readme.txt", user: ""))
        XCTAssertEqual(String(decoding: readme, as: UTF8.self), "readme for everyone\n")
        XCTAssertEqual(r2.mimeType, "text/plain")
    }

    func testListingInPortersFormat() async throws {
        let (data, response) = try await session().data(from: url("/docs/"))
        XCTAssertEqual(response.mimeType, DirectoryListing.mimeType)
        let listing = try DirectoryListing.parse(data)
        XCTAssertEqual(listing.entries.map(\.name), ["a.txt", "b.txt", "sub"])
        XCTAssertEqual(listing.entries.map(\.kind), [.file, .file, .directory])
        XCTAssertEqual(listing.entries[1].size, 10)
        XCTAssertNotNil(listing.entries[0].modified)
    }

    func testUploadAndErrors() async throws {
        let payload = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0) })
        _ = try await session().upload(for: Request(url: url("/upload/new/deep.bin")), from: payload)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dir + "/files/upload/new/deep.bin")), payload, "STOR, folders made")

        do {
            _ = try await session().data(from: url("/no-such-file.txt"))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .fileDoesNotExist) }
        let closed = try NginxFixture.freePort()
        do {
            _ = try await session().data(from: URL(string: "ftp://127.0.0.1:\(closed)/x")!)
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .cannotConnectToHost) }
    }

    func testRefusedLoginBecomesAChallenge() async throws {
        final class Answer: TaskDelegate, @unchecked Sendable {
            let lock = NSLock()
            var asked: [Int] = []
            func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                      completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
                lock.withLock { asked.append(challenge.previousFailureCount) }
                completion(.useCredential(Credential(user: "alice", password: "secret")))
            }
        }
        let d = Answer()
        let (data, _) = try await session(d).data(from: url("/docs/a.txt", user: "alice:wrong@"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "alpha\n")
        XCTAssertEqual(d.lock.withLock { d.asked }, [0])
        do {
            _ = try await session().data(from: url("/docs/a.txt", user: "alice:wrong@"))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .userAuthenticationRequired) }
    }

    func testResumeWithREST() throws {
        let first = ResumeRecorder(cancelAt: 512 * 1024)
        session(first) { $0.receiveBufferLimit = 256 * 1024 }.downloadTask(with: url("/big.bin")).resume()
        // Generous: only a hang may end these waits (4 MiB at 256 KiB of credit took 26 s on a loaded 2-core machine).
        XCTAssertEqual(first.done.wait(timeout: .now() + 120), .success)
        let data = try XCTUnwrap(first.lock.withLock { first.resumeData },
                                 "the size is the validator, so FTP downloads resume (the download ended with \(String(describing: first.lock.withLock { first.error })); written \(first.lock.withLock { first.writes }), cancelled at \(String(describing: first.lock.withLock { first.cancelledAt })))")
        let second = ResumeRecorder(cancelAt: nil)
        session(second).downloadTask(withResumeData: data).resume()
        XCTAssertEqual(second.done.wait(timeout: .now() + 120), .success)
        XCTAssertNotNil(second.lock.withLock { second.resumedAt },
                        "the resumed download ended with \(String(describing: second.lock.withLock { second.error })) (resume data at \(String(describing: first.lock.withLock { first.cancelledAt })))")
        let file = try XCTUnwrap(second.lock.withLock { second.file })
        XCTAssertEqual(file, Data((0..<FTPTests.bigSize).map(FTPTests.bigByte)))
    }

    /// Resume data that already holds the whole file (the cancel came as the last bytes
    /// were written): libcurl sends no RETR and reports the file's size as the length
    /// left; the size validator must still be the file's, and the download yields it.
    func testResumeDataCoveringTheWholeFileYieldsTheFile() throws {
        let first = ResumeRecorder(cancelAt: 512 * 1024)
        session(first) { $0.receiveBufferLimit = 256 * 1024 }.downloadTask(with: url("/big.bin")).resume()
        XCTAssertEqual(first.done.wait(timeout: .now() + 120), .success)
        let data = try XCTUnwrap(first.lock.withLock { first.resumeData })
        var resume = try JSONDecoder().decode(ResumeData.self, from: data)
        let whole = Data((0..<FTPTests.bigSize).map(FTPTests.bigByte))
        // The partial file, completed as if the cancel had come after the last byte.
        try whole.write(to: URL(fileURLWithPath: resume.partialFilePath))
        resume.bytesReceived = Int64(whole.count)
        let second = ResumeRecorder(cancelAt: nil)
        session(second).downloadTask(withResumeData: resume.encoded()).resume()
        XCTAssertEqual(second.done.wait(timeout: .now() + 120), .success)
        XCTAssertNil(second.lock.withLock { second.error }, "a whole file resumed at its end is the file, not a mismatch")
        XCTAssertEqual(try XCTUnwrap(second.lock.withLock { second.file }), whole)
    }

    /// A server without MLSD: the listing falls back to LIST on a handle built by the same
    /// option builder, so ftps stays ftps (the fallback once logged in without TLS; this
    /// user's logins are refused without it) and the CA is still checked.
    func testFTPSListingFallbackKeepsTLS() async throws {
        let (data, response) = try await session().data(for: explicitTLS(url("/docs/", user: "legacy:secret@")))
        XCTAssertEqual(response.mimeType, "text/plain")
        let text = String(decoding: data, as: UTF8.self)
        XCTAssertTrue(text.contains("a.txt") && text.contains("b.txt"), text)
        let log = (try? String(contentsOfFile: dir + "/ftp.log", encoding: .utf8)) ?? ""
        XCTAssertTrue(log.contains("legacy") && log.contains("LIST"), "no LIST fallback in the transcript:\n\(log.suffix(1500))")
        do {
            _ = try await session(nil) { $0.caCertificateFile = nil }.data(for: explicitTLS(url("/docs/", user: "legacy:secret@")))
            XCTFail("an unknown CA must fail the listing too")
        } catch let e as PorterError { XCTAssertEqual(e.code, .serverCertificateUntrusted) }
    }

    /// `porter -u` logs in to an ftp server with the user at once, as curl does: a server
    /// that also takes anonymous logins does not get the anonymous account (which cannot
    /// read docs/, so the load failed). The password never shows in -v output or logs.
    func testCLIUserLogsInAtOnce() throws {
        let url = "ftp://127.0.0.1:\(port)/docs/a.txt"
        let r = try runProcess(porterBinary, ["-v", "-u", "alice:secret", url], environment: withoutProxies)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stdout, "alpha\n")
        XCTAssertFalse(r.stderr.contains("secret"), r.stderr)
        XCTAssertNotEqual(try runProcess(porterBinary, [url], environment: withoutProxies).status, 0, "anonymous cannot read docs/")
    }

    /// ftp:// with explicit TLS required (`FTPHandler.tlsProperty`, curl's --ssl-reqd).
    func explicitTLS(_ url: URL, _ mode: String = "required") -> Request {
        var r = Request(url: url)
        r.setProperty(mode, forKey: FTPHandler.tlsProperty)
        return r
    }

    func testExplicitTLS() async throws {
        let (data, _) = try await session().data(for: explicitTLS(url("/docs/b.txt")))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "beta beta\n")
        do {
            _ = try await session(nil) { $0.caCertificateFile = nil }.data(for: explicitTLS(url("/docs/b.txt")))
            XCTFail("an unknown CA must fail")
        } catch let e as PorterError { XCTAssertEqual(e.code, .serverCertificateUntrusted) }
    }
}
