import XCTest
import PorterTestSupport
@testable import Porter
@testable import PorterHTTP
@testable import PorterCurl

/// The libcurl handlers honour a request's `BodyDestination`: each chunk goes from
/// libcurl's buffer to the descriptor (no copy, no hand-over), byte-exact, and the task
/// gets no data — against a real nginx, over http/1.1 and h2 over TLS.
final class BodyDestinationTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap()
        super.setUp()
    }

    private func session(_ change: (inout SessionConfiguration) -> Void = { _ in }) -> Session {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.caCertificateFile = nginx.caFile
        c.responseCache = nil
        change(&c)
        return Session(configuration: c)
    }

    private var dir: String { nginx.dir }

    /// Loads `url` with its body going to a new file; returns the task's data, the
    /// destination's count and the file's bytes.
    private func loadIntoFile(_ url: String, in s: Session? = nil) async throws -> (Data, Int64, Data) {
        let path = dir + "/destination-\(UUID().uuidString).bin"
        defer { unlink(path) }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let destination = BodyDestination(fd: fd)
        var request = Request(url: URL(string: url)!)
        request.setProperty(destination, forKey: BodyDestination.property)
        let (data, _) = try await (s ?? session()).data(for: request)
        close(fd)
        return (data, destination.written, FileManager.default.contents(atPath: path) ?? Data())
    }

    private var big: Data { Data((0..<NginxFixture.bigSize).map(NginxFixture.bigByte)) }

    /// A large body (32 MiB: some two thousand write callbacks) over http into a pipe and
    /// over https (h2) into a file, and a small one: every byte, in order, in the
    /// destination; none through the task.
    func testLargeAndSmallBodiesGoToTheDestinationByteExact() async throws {
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        let received = drainPipe(ends[0])
        let toPipe = BodyDestination(fd: ends[1])
        var request = Request(url: URL(string: nginx.http + "/big.bin")!)
        request.setProperty(toPipe, forKey: BodyDestination.property)
        let (piped, response) = try await session().data(for: request)
        close(ends[1])
        let got = received()
        close(ends[0])
        XCTAssertEqual(response.expectedContentLength, Int64(NginxFixture.bigSize))
        XCTAssertEqual(piped.count, 0, "the body went to the destination, not to the task")
        XCTAssertEqual(toPipe.written, Int64(NginxFixture.bigSize))
        XCTAssertTrue(got == big, "the piped body differs (\(got.count) bytes)")

        let (overTLS, tlsWritten, tlsFile) = try await loadIntoFile(nginx.https + "/big.bin")
        XCTAssertEqual(overTLS.count, 0)
        XCTAssertEqual(tlsWritten, Int64(NginxFixture.bigSize))
        XCTAssertTrue(tlsFile == big, "the https body differs (\(tlsFile.count) bytes)")

        let (small, smallWritten, smallFile) = try await loadIntoFile(nginx.http + "/index.html")
        XCTAssertEqual(small.count, 0)
        XCTAssertEqual(smallWritten, 17)
        XCTAssertEqual(String(decoding: smallFile, as: UTF8.self), "hello from nginx\n")
    }

    /// A gzip body is decoded on its way to the destination.
    func testADecodedBodyGoesToTheDestination() async throws {
        let (data, written, file) = try await loadIntoFile(nginx.http + "/text.txt")
        XCTAssertEqual(data.count, 0)
        XCTAssertEqual(written, 24 * 4000)
        XCTAssertEqual(file.count, 24 * 4000)
        XCTAssertTrue(String(decoding: file, as: UTF8.self).hasPrefix("Porter compresses well. Porter"))
    }

    /// A response the session's cache stores comes through the task (the cache needs its
    /// copy), and the destination is left alone.
    func testAResponseTheCacheStoresComesAsData() async throws {
        let s = session { $0.responseCache = HTTPCache() }
        let (data, written, file) = try await loadIntoFile(nginx.http + "/cache/fresh.txt", in: s)
        XCTAssertFalse(data.isEmpty)
        XCTAssertEqual(written, 0)
        XCTAssertTrue(file.isEmpty)
    }

    /// A destination that refuses the write (a pipe nobody reads any more) fails the load
    /// with cannotWriteToFile, the request's URL and the errno; it does not trap.
    func testAFailedWriteFailsTheLoad() async throws {
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        close(ends[0])
        defer { close(ends[1]) }
        var request = Request(url: URL(string: nginx.http + "/big.bin")!)
        request.setProperty(BodyDestination(fd: ends[1]), forKey: BodyDestination.property)
        do {
            _ = try await session().data(for: request)
            XCTFail("the load succeeded with nowhere to write")
        } catch let error as PorterError {
            XCTAssertEqual(error.code, .cannotWriteToFile, "\(error)")
            XCTAssertEqual(error.url?.path, "/big.bin")
        }
    }

    /// A load that ends early (here cancelled mid-body) has counted what it wrote when its
    /// completion comes: the CLI's -w size_download reads that count (it read 0 when the
    /// count was only added at hand-overs, which a destination load never makes).
    func testWhatWasWrittenIsCountedWhenTheLoadEndsEarly() async throws {
        let path = dir + "/early-\(UUID().uuidString).bin"
        defer { unlink(path) }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer { close(fd) }
        let destination = BodyDestination(fd: fd)
        var request = Request(url: URL(string: nginx.http + "/slow/medium.bin")!)
        request.setProperty(destination, forKey: BodyDestination.property)
        let s = session()
        let load = Task { try await s.data(for: request) }
        let size = { (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0 }
        let started = await eventuallyAsync { size() > 0 }
        XCTAssertTrue(started, "no body bytes came")
        load.cancel()
        do {
            _ = try await load.value
            XCTFail("the slow load finished before its cancel")
        } catch {}
        let counted = destination.written
        XCTAssertGreaterThan(counted, 0, "the bytes written before the cancel are counted by its completion")
        XCTAssertLessThanOrEqual(counted, Int64(size()))
    }

    /// The CLI: a body to stdout (written by the handler) is byte-exact, with the size
    /// -w reports; a stdout that refuses writes is curl's exit 23.
    func testCLIBodyToStdoutIsByteExact() throws {
        let out = dir + "/cli-stdout.bin"
        defer { unlink(out) }
        let r = try runProcess("/bin/sh", ["-c", "\"$0\" -s -w '%{size_download}' -o - \"$1\" > \"$2\"",
                                           porterBinary, nginx.http + "/big.bin", out], environment: withoutProxies)
        XCTAssertEqual(r.status, 0, r.stderr)
        let written = FileManager.default.contents(atPath: out) ?? Data()
        XCTAssertTrue(written.prefix(NginxFixture.bigSize) == big, "stdout differs (\(written.count) bytes)")
        XCTAssertEqual(String(decoding: written.dropFirst(NginxFixture.bigSize), as: UTF8.self), "\(NginxFixture.bigSize)")
        let refused = try runProcess("/bin/sh", ["-c", "\"$0\" -s \"$1\" 1</dev/null", porterBinary, nginx.http + "/big.bin"],
                                     environment: withoutProxies)
        XCTAssertEqual(refused.status, 23, refused.stderr)
    }

}
