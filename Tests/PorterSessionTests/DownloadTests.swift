import XCTest
@testable import PorterCore
@testable import PorterSession
import Porter
import PorterTestSupport

final class DownloadTests: XCTestCase {
    /// The stores `.default` and `.ephemeral` configurations get come from the `Porter` module.
    override class func setUp() { Porter.installDefaultStores() }

    private var dir: String!

    override func setUp() {
        dir = NSTemporaryDirectory() + "porter-dl-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    }
    override func tearDown() { try? FileManager.default.removeItem(atPath: dir) }

    private func config() -> SessionConfiguration {
        testConfiguration { $0.downloadDirectory = self.dir }
    }
    private var leftovers: [String] { (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] }

    func testDelegateDownloadWithProgressAndTheFileRemovedAfterwards() {
        let d = RecordingDelegate()
        let session = Session(configuration: config(), delegate: d)
        let t = session.downloadTask(with: URL(string: "chunks://h/64/4096")!)
        XCTAssertTrue(d.run(t))
        XCTAssertEqual(d.file(t), patternBytes(from: 0, count: 64 * 4096))
        XCTAssertEqual(d.events.filter { $0 == "wrote" }.count, 64)
        XCTAssertEqual(leftovers, [], "the temporary file is removed after didFinishDownloadingTo returns")
        XCTAssertEqual(d.downloadLocations.count, 1)
        XCTAssertFalse(FileManager.default.fileExists(atPath: d.downloadLocations[0].path))
        XCTAssertEqual(t.progress.fractionCompleted, 1)
    }

    func testCompletionHandlerAndAsyncDownloads() async throws {
        let session = Session(configuration: config())
        let done = Completion<(Data?, String?)>()
        session.downloadTask(with: Request(url: URL(string: "chunks://h/10/100")!)) { url, _, _ in
            done.fulfil((url.flatMap { try? Data(contentsOf: $0) }, url?.path))
        }.resume()
        let (contents, path) = try XCTUnwrap(done.wait())
        XCTAssertEqual(contents, patternBytes(from: 0, count: 1000))
        let temporary = try XCTUnwrap(path)
        XCTAssertTrue(eventually { !FileManager.default.fileExists(atPath: temporary) }, "the temporary file is removed")

        let (owned, response) = try await session.download(from: URL(string: "chunks://h/20/100")!)
        XCTAssertEqual(response.expectedContentLength, 2000)
        XCTAssertEqual(try Data(contentsOf: owned), patternBytes(from: 0, count: 2000), "the caller owns the file")
        try FileManager.default.removeItem(at: owned)
    }

    func testFailedAndCancelledDownloadsLeaveNothing() async throws {
        let session = Session(configuration: config())
        do {
            _ = try await session.download(from: URL(string: "bad://h/data-before-response")!)
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .protocolViolation) }
        do {
            _ = try await session.download(from: URL(string: "bad://h/fail-after-finish")!)
        } catch { XCTFail("finish came first: \(error)") }
        let d = RecordingDelegate()
        let s2 = Session(configuration: config(), delegate: d)
        let t = s2.downloadTask(with: URL(string: "chunks://h/100000/1000")!)
        d.onWrite = { task, total in if total >= 5000 { task.cancel() } }
        XCTAssertTrue(d.run(t))
        XCTAssertEqual(d.error(t)?.code, .cancelled)
        XCTAssertNil(d.error(t)?.resumeData, "plain cancel gives no resume data")
        XCTAssertEqual(leftovers.filter { !$0.hasPrefix("porter-") }, [], "no temporary file is left behind")
    }

    func testFailureMidBodyLeavesResumeDataWithThePartialFile() throws {
        let d = RecordingDelegate()
        let session = Session(configuration: config(), delegate: d)
        let t = session.downloadTask(with: URL(string: "bad://h/fail-mid-body")!)
        XCTAssertTrue(d.run(t))
        let error = try XCTUnwrap(d.error(t))
        XCTAssertEqual(error.code, .networkConnectionLost)
        let resume = try ResumeData(data: try XCTUnwrap(error.resumeData))
        XCTAssertEqual(resume.bytesReceived, 10)
        XCTAssertEqual(resume.validator, "bad-v1")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: resume.partialFilePath)), Data("0123456789".utf8))
        try FileManager.default.removeItem(atPath: resume.partialFilePath)
    }

    /// cancel(byProducingResumeData:) from a progress callback, while the handler has
    /// already handed over its end (a whole FTP body in one libcurl perform did so): the
    /// end is taken after cancel() returned, so the task is cancelled, with resume data,
    /// not completed as a success with the callback answered nil (FTPTests'
    /// testResumeWithREST lost its resume data so, about 1 run in 20 under load).
    func testACancelAskedBeforeTheEndIsTakenWins() throws {
        MisbehavingHandler.race = MisbehavingHandler.Race()
        let race = MisbehavingHandler.race
        let d = RecordingDelegate()
        let session = Session(configuration: config(), delegate: d)
        let t = session.downloadTask(with: URL(string: "bad://h/finish-behind-cancel")!)
        let resumeBox = Completion<Data?>()
        d.onWrite = { task, _ in
            race.sawData.signal()
            _ = race.mayCancel.wait(timeout: .now() + 120)
            task.cancel(byProducingResumeData: { resumeBox.fulfil($0) })
            race.cancelled.signal()
        }
        XCTAssertTrue(d.run(t, timeout: 120))
        XCTAssertEqual(d.error(t)?.code, .cancelled, "cancel() returned before the end was taken")
        let data = try XCTUnwrap(try XCTUnwrap(resumeBox.wait(120)), "resume data, as asked")
        XCTAssertEqual(try ResumeData(data: data).bytesReceived, 10)
    }

    func testCancelProducingResumeDataThenResume() throws {
        let d = RecordingDelegate()
        let session = Session(configuration: config(), delegate: d)
        let t = session.downloadTask(with: URL(string: "chunks://h/2000/1000")!)
        let resumeBox = Completion<Data?>()
        d.onWrite = { task, total in
            if total >= 20_000 { task.cancel(byProducingResumeData: { resumeBox.fulfil($0) }) }
        }
        XCTAssertTrue(d.run(t))
        let data = try XCTUnwrap(try XCTUnwrap(resumeBox.wait()))
        let resume = try ResumeData(data: data)
        XCTAssertGreaterThanOrEqual(resume.bytesReceived, 20_000)
        XCTAssertTrue(FileManager.default.fileExists(atPath: resume.partialFilePath), "the partial file is kept for resuming")
        XCTAssertEqual(d.error(t)?.resumeData, data, "the completion's error carries the same resume data")

        // ChunkHandler cannot resume, so the resumed task starts over into the same file
        // and still ends with the whole body.
        let d2 = RecordingDelegate()
        let s2 = Session(configuration: config(), delegate: d2)
        let r = s2.downloadTask(withResumeData: data)
        XCTAssertEqual(r.currentRequest?.resumeRange?.offset, resume.bytesReceived)
        XCTAssertTrue(d2.run(r))
        XCTAssertNil(d2.error(r))
        XCTAssertEqual(d2.file(r), patternBytes(from: 0, count: 2_000_000))
        XCTAssertEqual(leftovers, [])
    }

    /// Resume data holds no secret: no Authorization, Proxy-Authorization or Cookie
    /// field and no password in the URL; the resumed request carries none of them (it
    /// asks the stores and the delegate again), and other fields travel on.
    func testResumeDataHoldsNoCredentialsOrCookies() throws {
        let d = RecordingDelegate()
        let session = Session(configuration: config(), delegate: d)
        var request = Request(url: URL(string: "chunks://h/2000/1000")!)
        request.setValue("Bearer s3cret-token", forHeader: "Authorization")
        request.setValue("Basic cHJveHk6cHc=", forHeader: "Proxy-Authorization")
        request.setValue("session=c00kie-value", forHeader: "Cookie")
        request.setValue("kept", forHeader: "X-Keep")
        let t = session.downloadTask(with: request)
        let resumeBox = Completion<Data?>()
        d.onWrite = { task, total in
            if total >= 20_000 { task.cancel(byProducingResumeData: { resumeBox.fulfil($0) }) }
        }
        XCTAssertTrue(d.run(t))
        let data = try XCTUnwrap(try XCTUnwrap(resumeBox.wait()))
        let text = String(decoding: data, as: UTF8.self)
        for secret in ["s3cret-token", "cHJveHk6cHc=", "c00kie-value", "Authorization", "Cookie"] {
            XCTAssertFalse(text.contains(secret), "resume data holds \(secret): \(text)")
        }
        XCTAssertTrue(text.contains("X-Keep"), text)
        let r = Session(configuration: config()).downloadTask(withResumeData: data)
        XCTAssertNil(r.currentRequest?.value(forHeader: "Authorization"))
        XCTAssertNil(r.currentRequest?.value(forHeader: "Cookie"))
        XCTAssertEqual(r.currentRequest?.value(forHeader: "X-Keep"), "kept")
        r.cancel()
        if let partial = try? ResumeData(data: data).partialFilePath { unlink(partial) }
    }

    func testBadResumeDataFailsClearly() {
        let d = RecordingDelegate()
        let session = Session(configuration: config(), delegate: d)
        let t = session.downloadTask(withResumeData: Data("not json".utf8))
        XCTAssertTrue(d.run(t))
        XCTAssertEqual(d.error(t)?.code, .resumeFailed)
    }
}

final class BackPressureTests: XCTestCase {
    /// The stores `.default` and `.ephemeral` configurations get come from the `Porter` module.
    override class func setUp() { Porter.installDefaultStores() }

    /// A slow consumer of `bytes(for:)` holds the producer back: it never gets more
    /// than the buffer limit (plus a chunk in flight) ahead.
    func testSlowConsumerDoesNotBufferTheWholeBody() async throws {
        let limit = 256 * 1024
        let chunk = 16 * 1024
        let session = Session(configuration: testConfiguration { $0.receiveBufferLimit = limit })
        ChunkHandler.produced.reset()
        let (bytes, response) = try await session.bytes(from: URL(string: "chunks://h/2048/\(chunk)")!)  // 32 MiB
        XCTAssertEqual(response.expectedContentLength, 32 << 20)
        var consumed = 0
        var maxAhead = 0
        var next = 0
        for try await piece in bytes.chunks {
            XCTAssertEqual(piece, patternBytes(from: next, count: piece.count))
            next += piece.count
            consumed += piece.count
            maxAhead = max(maxAhead, ChunkHandler.produced.current - consumed)
            if consumed < 4 << 20 { try await Task.sleep(nanoseconds: 200_000) }
        }
        XCTAssertEqual(consumed, 32 << 20)
        XCTAssertLessThanOrEqual(maxAhead, limit + 4 * chunk, "the producer ran \(maxAhead) bytes ahead")
        XCTAssertGreaterThan(maxAhead, 0)
    }

    func testCancellingTheConsumerCancelsTheTransfer() async throws {
        let session = Session(configuration: testConfiguration())
        let (bytes, _) = try await session.bytes(from: URL(string: "bad://h/response-then-silent")!)
        let job = Task { try await bytes.collect() }
        try await Task.sleep(nanoseconds: 50_000_000)
        job.cancel()
        do {
            _ = try await job.value
            XCTFail("a cancelled consumer must not wait for data that never comes")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cancelled)
        }
        XCTAssertEqual(bytes.task.state, .completed)
    }

    func testByteByByteAndEarlyStopCancels() async throws {
        let session = Session(configuration: testConfiguration())
        let (bytes, _) = try await session.bytes(from: URL(string: "chunks://h/3/5")!)
        var all: [UInt8] = []
        for try await b in bytes { all.append(b) }
        XCTAssertEqual(Data(all), patternBytes(from: 0, count: 15))

        var task: SessionTask?
        do {
            let (big, _) = try await session.bytes(from: URL(string: "chunks://h/100000/1000")!)
            task = big.task
            var it = big.makeAsyncIterator()
            let first = try await it.next()
            XCTAssertEqual(first, 0)
        }
        // The sequence and its iterator are gone: the transfer must stop.
        _ = await eventuallyAsync { task?.state == .completed }
        XCTAssertEqual(task?.state, .completed)
        XCTAssertEqual(task?.error?.code, .cancelled)
    }
}
