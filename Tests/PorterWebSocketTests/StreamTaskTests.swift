import XCTest
import HTTPTypes
import PorterTestSupport
@testable import Porter
@testable import PorterWebSocket

final class StreamTaskTests: WSTestCase {

    private func text(_ r: (data: Data, atEOF: Bool)) -> String { String(decoding: r.data, as: UTF8.self) }

    func testEchoReadsQueuedBeforeResumeAndMinimumLength() async throws {
        let task = session().streamTask(withHostName: "127.0.0.1", port: ports.echo)
        async let first = task.read(minLength: 6, maxLength: 100, timeout: 10)   // asked before the connection
        try await Task.sleep(nanoseconds: 50_000_000)
        task.resume()
        try await task.write(Data("ab\n".utf8))
        try await task.write(Data("cd\n".utf8))
        let got10 = try await first
        XCTAssertEqual(text(got10), "ab\ncd\n")
        try await task.write(Data("0123456789\n".utf8))
        let got11 = try await task.read(minLength: 4, maxLength: 4)
        XCTAssertEqual(text(got11), "0123")
        let got12 = try await task.read(minLength: 7, maxLength: 100)
        XCTAssertEqual(text(got12), "456789\n")
        task.cancel()
    }

    func testHalfCloseThenEndOfStream() async throws {
        let task = session().streamTask(withHostName: "127.0.0.1", port: ports.echo)
        task.resume()
        try await task.write(Data("last\n".utf8))
        task.closeWrite()
        var all = Data()
        var eof = false
        while !eof {
            let r = try await task.read(minLength: 1, maxLength: 1024, timeout: 10)
            all.append(r.data)
            eof = r.atEOF || r.data.isEmpty
        }
        XCTAssertEqual(String(decoding: all, as: UTF8.self), "last\nbye\n")
        task.cancel()
    }

    /// A stream to the echo server that sent `command` (a STARTTLS variant), read its GO
    /// and started TLS.
    private func upgraded(_ command: String = "STARTTLS", _ change: (inout SessionConfiguration) -> Void = { _ in }) async throws -> StreamTask {
        let task = session(change).streamTask(withHostName: "localhost", port: ports.echo)
        task.resume()
        try await task.write(Data("\(command)\n".utf8))
        let go = try await task.read(minLength: 3, maxLength: 3, timeout: 10)
        XCTAssertEqual(text(go), "GO\n")
        task.startSecureConnection()
        return task
    }

    /// The error of the next read (of any number of reads until the end), nil when the
    /// stream ended cleanly.
    private func readError(_ task: StreamTask) async -> PorterError? {
        do {
            while true {
                let r = try await task.read(minLength: 1, maxLength: 100, timeout: 10)
                if r.atEOF || r.data.isEmpty { return nil }
            }
        } catch {
            return error as? PorterError ?? PorterError(.unknown, "\(error)")
        }
    }

    func testStartSecureConnectionVerifiesAndEncrypts() async throws {
        let task = try await upgraded()
        try await task.write(Data("secret\n".utf8))
        let got14 = try await task.read(minLength: 7, maxLength: 7, timeout: 10)
        XCTAssertEqual(text(got14), "secret\n")
        task.cancel()

        let untrusted = try await upgraded { $0.caCertificateFile = nil }
        let e = await readError(untrusted)
        XCTAssertEqual(e?.code, .serverCertificateUntrusted, "an untrusted server must fail the TLS start: \(String(describing: e))")
    }

    /// After STARTTLS, a forged record or a connection cut without close_notify is an
    /// error, never data and never a clean end of the stream (a truncation attack).
    func testTamperingAndTruncationAfterTLSAreErrors() async throws {
        for command in ["STARTTLS-TAMPER", "STARTTLS-CUT"] {
            let task = try await upgraded(command)
            try await task.write(Data("x\n".utf8))
            let e = await readError(task)
            XCTAssertEqual(e?.code, .networkConnectionLost, "\(command): \(String(describing: e)) (nil: a clean end)")
        }
    }

    /// The session's pinned key applies to STARTTLS as to https.
    func testStartTLSHonoursThePinnedKey() async throws {
        let pin = try NginxFixture.run("/bin/sh", ["-c",
            "openssl x509 -pubkey -noout -in leaf.pem | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64"],
            in: ports.dir).trimmingCharacters(in: .whitespacesAndNewlines)
        for (key, works) in [("sha256//\(pin)", true), ("sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", false)] {
            let task = try await upgraded { $0.pinnedPublicKey = key }
            try? await task.write(Data("pinned\n".utf8))
            do {
                let r = try await task.read(minLength: 7, maxLength: 7, timeout: 10)
                XCTAssertTrue(works, "a wrong pin was accepted")
                XCTAssertEqual(String(decoding: r.data, as: UTF8.self), "pinned\n")
            } catch let e as PorterError {
                XCTAssertFalse(works, "the right pin was refused: \(e)")
                XCTAssertEqual(e.code, .serverCertificateUntrusted, "\(e)")
            }
            task.cancel()
        }
    }

    /// Plain bytes that arrived and were not read when TLS is asked for are not let
    /// through as if they had come over TLS.
    func testUnreadPlainBytesStopStartTLS() async throws {
        let task = session().streamTask(withHostName: "localhost", port: ports.echo)
        task.resume()
        try await task.write(Data("injected\n".utf8))
        // A read that asks for more than arrives times out, keeping "injected\n".
        do { _ = try await task.read(minLength: 100, maxLength: 100, timeout: 0.5) } catch {}
        task.startSecureConnection()
        do {
            _ = try await task.read(minLength: 1, maxLength: 100, timeout: 10)
            XCTFail("plain bytes were served after startSecureConnection")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .secureConnectionFailed, "\(e)")
        }
    }

    func testReadTimeoutKeepsTheStream() async throws {
        let task = session().streamTask(withHostName: "127.0.0.1", port: ports.echo)
        task.resume()
        do {
            _ = try await task.read(minLength: 1, maxLength: 10, timeout: 0.3)
            XCTFail("nothing was sent: the read must time out")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .timedOut)
        }
        try await task.write(Data("after\n".utf8))
        let got15 = try await task.read(minLength: 6, maxLength: 6, timeout: 10)
        XCTAssertEqual(text(got15), "after\n")
        task.cancel()
    }

    /// A stream task let go without cancel() closes its connection: the server sees the end.
    func testAStreamLetGoClosesItsConnection() async throws {
        let log = ports.dir + "/closes.log"
        func closes() -> Int {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").components(separatedBy: "echo-closed").count - 1
        }
        var task: StreamTask? = session().streamTask(withHostName: "127.0.0.1", port: ports.echo)
        task?.resume()
        try await task?.write(Data("ping\n".utf8))
        let echoed = try await task?.read(minLength: 5, maxLength: 5, timeout: 10)
        XCTAssertEqual(echoed.map(text), "ping\n")
        let before = closes()
        task = nil
        XCTAssertTrue(eventually(5) { closes() == before + 1 }, "the connection of a task let go stays open")
    }

    /// A write's timeout does not keep a task alive: let go after a write and a read with
    /// long timeouts that completed, it closes its connection at once (its timers were
    /// cancelled with the operations they bounded).
    func testATimedWriteDoesNotHoldATaskLetGo() async throws {
        let log = ports.dir + "/closes.log"
        func closes() -> Int {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").components(separatedBy: "echo-closed").count - 1
        }
        var task: StreamTask? = session().streamTask(withHostName: "127.0.0.1", port: ports.echo)
        task?.resume()
        try await task?.write(Data("ping\n".utf8), timeout: 600)
        let echoed = try await task?.read(minLength: 5, maxLength: 5, timeout: 600)
        XCTAssertEqual(echoed.map(text), "ping\n")
        let before = closes()
        task = nil
        XCTAssertTrue(eventually(20) { closes() == before + 1 }, "a write's 600 s timeout keeps the connection of a task let go open")
    }

    func testRefusedConnectionFailsReadsAndWrites() async throws {
        let closed = try NginxFixture.freePort()
        let task = session().streamTask(withHostName: "127.0.0.1", port: closed)
        task.resume()
        do {
            _ = try await task.read(minLength: 1, maxLength: 10, timeout: 10)
            XCTFail("refused")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotConnectToHost)
        }
        XCTAssertEqual(task.state, .completed)
        do {
            try await task.write(Data("x".utf8))
            XCTFail("refused")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotConnectToHost)
        }
    }
}
