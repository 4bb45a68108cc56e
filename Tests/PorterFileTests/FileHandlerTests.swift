import XCTest
import PorterTestSupport
@testable import Porter
@testable import PorterFile
import PorterStorage

final class FileHandlerTests: XCTestCase {
    private var dir: String!
    private var session: Session!

    override func setUp() {
        dir = NSTemporaryDirectory() + "porter-file-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        Porter.bootstrap()
        session = Session(configuration: .ephemeral)
    }
    override func tearDown() { try? FileManager.default.removeItem(atPath: dir) }

    private func write(_ name: String, _ data: Data) -> URL {
        let url = URL(fileURLWithPath: dir + "/" + name)
        XCTAssertTrue(FileManager.default.createFile(atPath: url.path, contents: data))
        return url
    }

    func testReadsWithMIMETypeFromTheSystemTable() async throws {
        XCTAssertTrue(MediaTypes.isAvailable, "/etc/mime.types (media-types) must be installed")
        let url = write("hello.txt", Data("hello\n".utf8))
        let (data, response) = try await session.data(from: url)
        XCTAssertEqual(data, Data("hello\n".utf8))
        XCTAssertEqual(response.mimeType, "text/plain")
        XCTAssertEqual(response.expectedContentLength, 6)
        XCTAssertEqual(response.suggestedFilename, "hello.txt")
        XCTAssertNil(response.statusCode)
        XCTAssertEqual(MediaTypes.mimeType(forPath: "/a/b.JSON"), "application/json")
        XCTAssertEqual(MediaTypes.mimeType(forPath: "/a/page.html"), "text/html")
        XCTAssertEqual(MediaTypes.mimeType(forPath: "/a/noext"), "application/octet-stream")
        XCTAssertEqual(MediaTypes.mimeType(forPath: "/a/.hidden"), "application/octet-stream")
    }

    func testPercentEncodedPathsAndLocalhost() async throws {
        _ = write("a file %.txt", Data("odd name".utf8))
        let encoded = URL(string: "file://localhost" + (dir + "/a%20file%20%25.txt"))!
        let (data, _) = try await session.data(from: encoded)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "odd name")
    }

    func testErrors() async throws {
        let cases: [(String, PorterError.Code)] = [
            ("file://remote.example.com/etc/hostname", .unsupportedURL),
            ("file://" + dir + "/missing.txt", .fileDoesNotExist),
            ("file://" + dir + "/missing/deeper.txt", .fileDoesNotExist),
        ]
        for (text, code) in cases {
            do {
                _ = try await session.data(from: URL(string: text)!)
                XCTFail(text)
            } catch let e as PorterError {
                XCTAssertEqual(e.code, code, text)
                XCTAssertEqual(e.url?.absoluteString, text)
            }
        }
        // A path through a regular file.
        let f = write("plain", Data("x".utf8))
        do {
            _ = try await session.data(from: f.appendingPathComponent("child"))
            XCTFail()
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .fileDoesNotExist)
            XCTAssertEqual(e.cause?.domain, "errno")
            XCTAssertEqual(e.cause?.code, Int(ENOTDIR))
        }
        // A FIFO must not hang the handler.
        let fifo = dir + "/fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        do {
            _ = try await session.data(from: URL(fileURLWithPath: fifo))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .resourceUnavailable) }
    }

    func testPermissionDenied() async throws {
        let url = write("secret", Data("x".utf8))
        chmod(url.path, 0)
        if geteuid() == 0 {
            // Root reads anything; the CLI test runs this case as an unprivileged user.
            // Here check the mapping the handler applies to the errno it would get.
            XCTAssertEqual(PorterError.fromErrno(EACCES, url: url, doing: "open").code, .noPermissionsToReadFile)
            return
        }
        do {
            _ = try await session.data(from: url)
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .noPermissionsToReadFile) }
    }

    func testDirectoryListing() async throws {
        _ = write("b.txt", Data("12345".utf8))
        _ = write("a\nnewline", Data())
        try FileManager.default.createDirectory(atPath: dir + "/sub", withIntermediateDirectories: false)
        symlink("b.txt", dir + "/link")
        let (data, response) = try await session.data(from: URL(fileURLWithPath: dir + "/"))
        XCTAssertEqual(response.mimeType, DirectoryListing.mimeType)
        let listing = try DirectoryListing.parse(data)
        XCTAssertEqual(listing.entries.map(\.name), ["a\nnewline", "b.txt", "link", "sub"])
        XCTAssertEqual(listing.entries.map(\.kind), [.file, .file, .symlink, .directory])
        XCTAssertEqual(listing.entries[1].size, 5)
        XCTAssertNotNil(listing.entries[1].modified)
        XCTAssertTrue(String(decoding: data, as: UTF8.self).contains(" a%0Anewline\n"))
        XCTAssertEqual(try DirectoryListing.parse(listing.serialized()), listing, "round trip")
        XCTAssertThrowsError(try DirectoryListing.parse(Data("garbage\n".utf8)))
    }

    /// Found by Fuzz/FuzzDirectoryListing: a date part too long for `tm`'s Int32 fields
    /// trapped; such a date is unknown, the entry still parses.
    func testDirectoryListingDateTooLargeForTmIsUnknown() throws {
        let listing = try DirectoryListing.parse(Data("f 148 9999-12-88888888888888831T23:59:59Z big\nf 1 2024-05-06T07:08:09Z ok\n".utf8))
        XCTAssertEqual(listing.entries.map(\.name), ["big", "ok"])
        XCTAssertNil(listing.entries[0].modified)
        XCTAssertEqual(listing.entries[0].size, 148)
        XCTAssertEqual(listing.entries[1].modified, Date(timeIntervalSince1970: 1_714_979_289))
    }

    func testHeadGivesTheResponseOnly() async throws {
        let url = write("h.bin", Data(count: 1000))
        var r = Request(url: url)
        r.method = "HEAD"
        let (data, response) = try await session.data(for: r)
        XCTAssertEqual(data.count, 0)
        XCTAssertEqual(response.expectedContentLength, 1000)
    }

    /// A file larger than the back-pressure limit streams through in chunks, all bytes in order.
    func testLargeFileStreamsInChunks() async throws {
        var bytes = [UInt8](repeating: 0, count: 24 << 20)
        for i in stride(from: 0, to: bytes.count, by: 4096) { bytes[i] = UInt8(truncatingIfNeeded: i / 4096) }
        let original = Data(bytes)
        let url = write("big.bin", original)
        var config = SessionConfiguration.ephemeral
        config.receiveBufferLimit = 2 << 20
        let (stream, response) = try await Session(configuration: config).bytes(from: url)
        XCTAssertEqual(response.expectedContentLength, Int64(original.count))
        var received = Data()
        var largest = 0
        for try await chunk in stream.chunks {
            largest = max(largest, chunk.count)
            received.append(chunk)
            XCTAssertLessThanOrEqual(stream.task.bufferedByteCount, (2 << 20) + 2 * FileHandler.chunkSize)
        }
        XCTAssertEqual(received, original)
        XCTAssertLessThanOrEqual(largest, FileHandler.chunkSize)
    }

    func testDownloadResumesFromTheOffset() throws {
        var bytes = [UInt8](repeating: 0, count: 8 << 20)
        for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i * 31) }
        let original = Data(bytes)
        let url = write("resume.bin", original)
        var config = SessionConfiguration.ephemeral
        config.downloadDirectory = dir
        let first = ResumeRecorder(cancelAt: 2 << 20)
        Session(configuration: config, delegate: first).downloadTask(with: url).resume()
        XCTAssertEqual(first.done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(first.error?.code, .cancelled)
        let resumeData = try XCTUnwrap(first.resumeData)
        let info = try ResumeData(data: resumeData)
        XCTAssertGreaterThanOrEqual(info.bytesReceived, 2 << 20)
        XCTAssertLessThan(info.bytesReceived, Int64(original.count))

        let second = ResumeRecorder(cancelAt: nil)
        Session(configuration: config, delegate: second).downloadTask(withResumeData: resumeData).resume()
        XCTAssertEqual(second.done.wait(timeout: .now() + 120), .success)
        XCTAssertNil(second.error)
        XCTAssertEqual(second.resumedAt, info.bytesReceived, "the file handler honoured the offset")
        XCTAssertEqual(second.file, original)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), ["resume.bin"], "no partial file left")

        // The file changes: the validator no longer matches and the download starts over.
        let third = ResumeRecorder(cancelAt: 1 << 20)
        Session(configuration: config, delegate: third).downloadTask(with: url).resume()
        XCTAssertEqual(third.done.wait(timeout: .now() + 120), .success)
        let changed = Data(repeating: 9, count: 3 << 20)
        try changed.write(to: url)
        let fourth = ResumeRecorder(cancelAt: nil)
        Session(configuration: config, delegate: fourth).downloadTask(withResumeData: try XCTUnwrap(third.resumeData)).resume()
        XCTAssertEqual(fourth.done.wait(timeout: .now() + 120), .success)
        XCTAssertNil(fourth.resumedAt)
        XCTAssertEqual(fourth.file, changed)
    }

    func testUploadWritesAtomically() async throws {
        let target = write("target.txt", Data("old contents".utf8))
        chmod(target.path, 0o640)
        let (_, response) = try await session.upload(for: Request(url: target), from: Data("new contents".utf8))
        XCTAssertEqual(response.expectedContentLength, 0)
        XCTAssertEqual(try Data(contentsOf: target), Data("new contents".utf8))
        var st = stat()
        stat(target.path, &st)
        XCTAssertEqual(st.st_mode & 0o777, 0o640, "the target's permissions are kept")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), ["target.txt"], "no temporary file left")

        let fresh = URL(fileURLWithPath: dir + "/fresh.bin")
        let big = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0) })
        let source = write("source.bin", big)
        _ = try await session.upload(for: Request(url: fresh), fromFile: source)
        XCTAssertEqual(try Data(contentsOf: fresh), big)

        do {
            _ = try await session.upload(for: Request(url: URL(fileURLWithPath: dir + "/no/such/dir/x")), from: Data("x".utf8))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .fileDoesNotExist) }
        do {
            _ = try await session.upload(for: Request(url: URL(fileURLWithPath: dir + "/")), from: Data("x".utf8))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .cannotCreateFile) }
        XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: dir)), ["target.txt", "fresh.bin", "source.bin"])
    }

    /// procfs and sysfs files say size 0 (or 4096) and hold something else: they are read
    /// to their end (the body was empty, or "file shrank").
    func testProcAndSysFilesAreReadToTheirEnd() async throws {
        let (status, response) = try await session.data(from: URL(fileURLWithPath: "/proc/self/status"))
        let text = String(decoding: status, as: UTF8.self)
        XCTAssertTrue(text.contains("Name:") && text.contains("Pid:"), text)
        XCTAssertEqual(response.expectedContentLength, -1, "no length is promised for a procfs file")
        let (kernel, _) = try await session.data(from: URL(fileURLWithPath: "/sys/kernel/uevent_seqnum"))
        XCTAssertFalse(kernel.isEmpty)
        XCTAssertNotNil(Int(String(decoding: kernel, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
        // An empty regular file is still an empty body.
        let (empty, _) = try await session.data(from: write("empty", Data()))
        XCTAssertEqual(empty, Data())
    }

    /// An upload onto a device or a FIFO writes through it: the rename would have replaced
    /// the device with a regular file. The device is made here (never the real /dev/null).
    func testUploadOntoADeviceOrFIFOWritesThrough() async throws {
        let fifo = dir + "/fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let received = readFIFOInBackground(fifo)
        _ = try await session.upload(for: Request(url: URL(fileURLWithPath: fifo)), from: Data("into the fifo".utf8))
        _ = eventually { received.current.count >= 13 }
        XCTAssertEqual(received.current, Data("into the fifo".utf8))
        var st = stat()
        XCTAssertEqual(lstat(fifo, &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFIFO)
        if geteuid() == 0 {
            let device = dir + "/null-device"
            XCTAssertEqual(mknod(device, S_IFCHR | 0o666, (1 << 8) | 3), 0)
            _ = try await session.upload(for: Request(url: URL(fileURLWithPath: device)), from: Data("gone".utf8))
            XCTAssertEqual(lstat(device, &st), 0)
            XCTAssertEqual(st.st_mode & S_IFMT, S_IFCHR, "still a character device")
        }
        XCTAssertFalse(try FileManager.default.contentsOfDirectory(atPath: dir).contains { $0.contains(".porter-") })
    }

    /// Bytes no compressor or cache would take for a pattern.
    private func noise(_ count: Int) -> Data {
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        var bytes = [UInt8](repeating: 0, count: count)
        for i in bytes.indices {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            bytes[i] = UInt8(truncatingIfNeeded: x)
        }
        return Data(bytes)
    }


    /// A request carrying a `BodyDestination` gets the file written there whole and
    /// byte-exact — into a regular file and into a pipe, for a file of several copy
    /// chunks — and the task gets no data; the destination counts every byte.
    func testBodyDestinationGetsTheWholeFileInAFileAndInAPipe() async throws {
        let size = Int(FileHandler.directChunkSize) * 2 + FileHandler.chunkSize + 7
        let body = noise(size)
        let url = write("big.bin", body)

        let outPath = dir + "/out.bin"
        let out = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        XCTAssertGreaterThanOrEqual(out, 0)
        let toFile = BodyDestination(fd: out)
        var request = Request(url: url)
        request.setProperty(toFile, forKey: BodyDestination.property)
        let (data, response) = try await session.data(for: request)
        close(out)
        XCTAssertEqual(data.count, 0, "the body went to the destination, not to the task")
        XCTAssertEqual(response.expectedContentLength, Int64(size))
        XCTAssertEqual(toFile.written, Int64(size))
        XCTAssertEqual(FileManager.default.contents(atPath: outPath), body)

        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        let received = drainPipe(ends[0])
        let toPipe = BodyDestination(fd: ends[1])
        var piped = Request(url: url)
        piped.setProperty(toPipe, forKey: BodyDestination.property)
        let (pipedData, _) = try await session.data(for: piped)
        close(ends[1])
        let got = received()
        close(ends[0])
        XCTAssertEqual(pipedData.count, 0)
        XCTAssertEqual(toPipe.written, Int64(size))
        XCTAssertEqual(got, body)
    }

    /// FileCopy from a source the kernel cannot copy from (a pipe) steps down to read and
    /// write, byte-exact; from a regular file it honours `limit` and the offsets advance.
    func testFileCopyFromAPipeAndWithALimit() throws {
        let body = noise(FileHandler.chunkSize * 3 + 5)
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&ends), 0)
        let writer = ends[1]
        Thread.detachNewThread {
            body.withUnsafeBytes { raw in
                var off = 0
                while off < raw.count {
                    let n = Glibc.write(writer, raw.baseAddress! + off, raw.count - off)
                    if n <= 0 { break }
                    off += n
                }
            }
            close(writer)
        }
        let outPath = dir + "/from-pipe.bin"
        let out = open(outPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        XCTAssertEqual(try FileCopy.copy(from: ends[0], to: out), Int64(body.count))
        close(out)
        close(ends[0])
        XCTAssertEqual(FileManager.default.contents(atPath: outPath), body)

        let src = open(outPath, O_RDONLY | O_CLOEXEC)
        let halfPath = dir + "/halves.bin"
        let halves = open(halfPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        XCTAssertEqual(try FileCopy.copy(from: src, to: halves, limit: 1000), 1000)
        XCTAssertEqual(try FileCopy.copy(from: src, to: halves, limit: Int64(body.count)), Int64(body.count - 1000))
        XCTAssertEqual(try FileCopy.copy(from: src, to: halves), 0)
        close(src)
        close(halves)
        XCTAssertEqual(FileManager.default.contents(atPath: halfPath), body)
    }

    func testBootstrapIsIdempotentAndThreadSafe() {
        let registry = HandlerRegistry()
        DispatchQueue.concurrentPerform(iterations: 50) { _ in Porter.bootstrap(registry: registry) }
        XCTAssertEqual(registry.registrations.map(\.name), ["DataHandler", "FileHandler", "HTTPHandler", "FTPHandler"])
        XCTAssertEqual(registry.registrations.map(\.origin), [.builtIn, .builtIn, .builtIn, .builtIn])
        XCTAssertEqual(registry.schemes, ["data", "file", "ftp", "ftps", "http", "https"])
    }
}
