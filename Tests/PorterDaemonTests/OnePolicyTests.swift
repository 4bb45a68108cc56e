import Foundation
import Porter
import PorterTestSupport
import XCTest
import PorterStorage

/// The rules every writer shares (issue: a rule fixed in one place came back through a
/// copy): the resume rule (ResumeCheck) and the partial-file rule (PartialFile) in the
/// in-process download task and in porterd, and the output rule (OutputFile) in porterd.
final class OnePolicyTests: DaemonTestCase {
    nonisolated(unsafe) static var liar: Process?
    nonisolated(unsafe) static var liarPort = 0

    override class func setUp() {
        super.setUp()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("lyingserver.py").path
        if let (p, port) = try? startReadyServer("/usr/bin/env", ["python3", script]) {
            liar = p
            liarPort = port
        }
    }

    override class func tearDown() {
        liar?.terminate()
        liar?.waitUntilExit()
        super.tearDown()
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        guard Self.liarPort > 0 else { throw NginxFixture.Failure.setup("the lying server (python3 lyingserver.py) did not start") }
        daemonHome.install()
    }

    var liar: String { "http://127.0.0.1:\(Self.liarPort)" }

    func counts(_ tag: String) throws -> String {
        try String(contentsOf: URL(string: liar + "/count?" + tag)!, encoding: .utf8)
    }

    /// A partial file as a download task makes it, in `folder`.
    func partialFile(in folder: String, bytes: Data) throws -> String {
        var template = Array((folder + "/.porter-download-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        XCTAssertGreaterThanOrEqual(fd, 0)
        close(fd)
        let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        try bytes.write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Resumes `resume` in an ephemeral session downloading into `folder`: the file's
    /// bytes, or the error.
    func resumeInProcess(_ resume: ResumeData, folder: String) -> (Data?, PorterError?) {
        var config = SessionConfiguration.ephemeral
        config.proxies = .none
        config.downloadDirectory = folder
        let session = Session(configuration: config)
        let done = DispatchSemaphore(value: 0)
        let result = Locked<(Data?, PorterError?)>((nil, nil))
        session.downloadTask(withResumeData: resume.encoded()) { url, _, error in
            result.withLock { $0 = (url.flatMap { try? Data(contentsOf: $0) }, error) }
            done.signal()
        }.resume()
        XCTAssertEqual(done.wait(timeout: .now() + 120), .success, "the resumed download ends")
        session.finishTasksAndInvalidate()
        return result.current
    }

    // MARK: - the resume rule, in process

    /// If-Range "v1" is answered 206 with ETag "v2" (a server that ignores If-Range): the
    /// part of the other version is not appended; resumeFailed, the partial file kept.
    func testAPartOfAnotherVersionIsNotAppendedInProcess() throws {
        let folder = home + "/dl"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let first = Data(repeating: UInt8(ascii: "a"), count: 1000)
        let partial = try partialFile(in: folder, bytes: first)
        let resume = ResumeData(url: URL(string: liar + "/v?inproc")!, method: "GET", headers: [], validator: "\"v1\"",
                                bytesReceived: 1000, expectedTotalBytes: 2000, partialFilePath: partial)
        let (data, error) = resumeInProcess(resume, folder: folder)
        XCTAssertNil(data, "no file from two versions")
        XCTAssertEqual(error?.code, .resumeFailed, "\(String(describing: error))")
        XCTAssertTrue(error?.message.contains("changed") == true, "\(String(describing: error))")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: partial)), first, "the partial file is kept as it was")
        XCTAssertNotNil(error?.resumeData, "resume data is handed back")
    }

    /// The same ETag, but the Content-Range total differs from the known length.
    func testAPartOfAResourceThatGrewIsNotAppendedInProcess() throws {
        let folder = home + "/dl"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let first = Data(repeating: UInt8(ascii: "a"), count: 1000)
        let partial = try partialFile(in: folder, bytes: first)
        let resume = ResumeData(url: URL(string: liar + "/grown?inproc")!, method: "GET", headers: [], validator: "\"v1\"",
                                bytesReceived: 1000, expectedTotalBytes: 2000, partialFilePath: partial)
        let (data, error) = resumeInProcess(resume, folder: folder)
        XCTAssertNil(data)
        XCTAssertEqual(error?.code, .resumeFailed, "\(String(describing: error))")
        XCTAssertTrue(error?.message.contains("3000") == true, "\(String(describing: error))")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: partial)), first)
    }

    // MARK: - the partial-file rule

    /// Forged resume data naming a file of the user's with its size: nothing is appended
    /// to it (the download starts over into a file of its own).
    func testForgedResumeDataCannotNameAnotherFile() throws {
        let folder = home + "/dl"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let victim = home + "/bashrc"
        let original = Data(repeating: UInt8(ascii: "X"), count: 1000)
        try original.write(to: URL(fileURLWithPath: victim))
        let resume = ResumeData(url: URL(string: liar + "/v?forged")!, method: "GET", headers: [], validator: "\"v2\"",
                                bytesReceived: 1000, expectedTotalBytes: 2000, partialFilePath: victim)
        let (data, error) = resumeInProcess(resume, folder: folder)
        XCTAssertNil(error, "the download starts over")
        XCTAssertEqual(data, Data(repeating: UInt8(ascii: "a"), count: 2000), "the whole resource, from its start")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: victim)), original, "the named file is untouched")
        XCTAssertEqual(try counts("forged"), "full=1 range=0", "no Range was asked for a file Porter did not make")
    }

    /// A link with a partial file's name, in the download folder, to a file of the user's:
    /// not followed.
    func testAPartialFileThatIsALinkIsNotFollowed() throws {
        let folder = home + "/dl"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let victim = home + "/profile"
        let original = Data(repeating: UInt8(ascii: "X"), count: 1000)
        try original.write(to: URL(fileURLWithPath: victim))
        let link = folder + "/.porter-download-AbC123"
        XCTAssertEqual(symlink(victim, link), 0)
        let resume = ResumeData(url: URL(string: liar + "/v?link")!, method: "GET", headers: [], validator: "\"v2\"",
                                bytesReceived: 1000, expectedTotalBytes: 2000, partialFilePath: link)
        let (data, error) = resumeInProcess(resume, folder: folder)
        XCTAssertNil(error)
        XCTAssertEqual(data, Data(repeating: UInt8(ascii: "a"), count: 2000))
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: victim)), original, "the link's target is untouched")
    }

    // MARK: - the resume rule, in porterd

    /// porterd resumes after a suspend with If-Range "v1"; the server answers 206 with ETag
    /// "v2": porterd starts over without a range instead of splicing the two versions.
    func testPorterdDoesNotSpliceTwoVersions() throws {
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: "splice"), delegate: recorder)
        let task = session.downloadTask(with: URL(string: liar + "/v?stall-daemon")!)
        task.resume()
        XCTAssertTrue(eventually { recorder.received(task.taskIdentifier) >= 1000 }, "porterd has the first 1000 bytes")
        task.suspend()
        task.resume()
        while recorder.completions[task.taskIdentifier] == nil {
            XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success, "\(recorder.order)")
        }
        XCTAssertEqual(recorder.completions[task.taskIdentifier].map { $0 == nil }, true, "\(recorder.completions)")
        XCTAssertEqual(recorder.files[task.taskIdentifier], Data(repeating: UInt8(ascii: "a"), count: 2000),
                       "one version, whole: never 1000 bytes of v1 and 1000 of v2")
        XCTAssertEqual(try counts("stall-daemon"), "full=2 range=1", "asked with a range once, then without")
        session.finishTasksAndInvalidate()
    }

    // MARK: - the output rule, in porterd

    var cliEnv: [String: String?] {
        var env = daemonHome.environment.mapValues { Optional($0) }
        env.merge(withoutProxies) { a, _ in a }
        return env
    }

    func background(_ session: String, _ output: String, _ url: String) throws -> (ProcessResult, Int?) {
        let queued = try runProcess(porterBinary, ["--background", session, "-o", output, url], environment: cliEnv)
        return (queued, queued.stdout.split(separator: "\t").first.flatMap { Int($0) })
    }

    /// `porter --background -o FIFO`: written through, the FIFO stays a FIFO (porterd once
    /// renamed a 0600 file over it; as root, over /dev/null).
    func testBackgroundOutputIntoAFIFOIsWrittenThrough() throws {
        let fifo = home + "/pipe"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        // Held open for reading and writing: porterd's open finds a reader, and what it
        // writes waits in the pipe.
        let reader = open(fifo, O_RDWR | O_NONBLOCK)
        XCTAssertGreaterThanOrEqual(reader, 0)
        defer { close(reader) }
        let (queued, id) = try background("fifo", fifo, nginx.http + "/index.html")
        XCTAssertEqual(queued.status, 0, queued.stderr)
        let waited = try runProcess(porterBinary, ["jobs", "fifo", "wait", String(try XCTUnwrap(id))], environment: cliEnv)
        XCTAssertEqual(waited.status, 0, waited.stderr + waited.stdout)
        var st = stat()
        XCTAssertEqual(lstat(fifo, &st), 0)
        XCTAssertEqual(st.st_mode & S_IFMT, S_IFIFO, "still a FIFO")
        var got = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(reader, &buffer, buffer.count)
            if n <= 0 { break }
            got.append(contentsOf: buffer[0..<n])
        }
        XCTAssertEqual(got, try Data(contentsOf: URL(fileURLWithPath: nginx.dir + "/www/index.html")), "the body went through it")
    }

    /// An existing output keeps its mode; a new one gets 0666 less the umask (porterd's
    /// were always 0600).
    func testBackgroundOutputModesFollowTheRule() throws {
        let existing = home + "/existing.html"
        try Data("old".utf8).write(to: URL(fileURLWithPath: existing))
        XCTAssertEqual(chmod(existing, 0o640), 0)
        let fresh = home + "/fresh.html"
        for output in [existing, fresh] {
            let (queued, id) = try background("modes", output, nginx.http + "/index.html")
            XCTAssertEqual(queued.status, 0, queued.stderr)
            let waited = try runProcess(porterBinary, ["jobs", "modes", "wait", String(try XCTUnwrap(id))], environment: cliEnv)
            XCTAssertEqual(waited.status, 0, waited.stderr + waited.stdout)
        }
        let body = try Data(contentsOf: URL(fileURLWithPath: nginx.dir + "/www/index.html"))
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: existing)), body)
        var st = stat()
        XCTAssertEqual(stat(existing, &st), 0)
        XCTAssertEqual(st.st_mode & 0o7777, 0o640, "the existing file keeps its mode")
        XCTAssertEqual(stat(fresh, &st), 0)
        XCTAssertEqual(st.st_mode & 0o7777, 0o666 & ~FileCreationMask.current, "a new file: 0666 less the umask")
    }

    /// A folder as the output is refused when the task is queued, not at its end.
    func testBackgroundOutputIntoAFolderIsRefusedWhenQueued() throws {
        let folder = home + "/folder"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let (queued, _) = try background("folder", folder, nginx.http + "/index.html")
        XCTAssertNotEqual(queued.status, 0, queued.stdout)
        XCTAssertTrue(queued.stderr.contains("folder"), queued.stderr)
    }
}
