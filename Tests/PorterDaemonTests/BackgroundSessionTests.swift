import Foundation
import Porter
import PorterTestSupport
import XCTest

/// Records what a background session's delegate hears.
final class BackgroundRecorder: DownloadDelegate, @unchecked Sendable {
    let lock = NSLock()
    private var _files: [Int: Data] = [:]
    private var _completions: [Int: PorterError?] = [:]
    private var _progress: [Int: Int64] = [:]
    private var _statuses: [Int: Int] = [:]
    private var _finishedEvents = 0
    private var _order: [String] = []
    let completed = DispatchSemaphore(value: 0)
    let eventsDone = DispatchSemaphore(value: 0)
    /// The answer to logins (nil: default handling).
    let login: Credential?
    private var _challenges: [String] = []

    // Read through the lock: the delegate writes these on the session's queue.
    var files: [Int: Data] { lock.withLock { _files } }
    var completions: [Int: PorterError?] { lock.withLock { _completions } }
    var progress: [Int: Int64] { lock.withLock { _progress } }
    var statuses: [Int: Int] { lock.withLock { _statuses } }
    var finishedEvents: Int { lock.withLock { _finishedEvents } }
    var order: [String] { lock.withLock { _order } }
    var challenges: [String] { lock.withLock { _challenges } }

    init(login: Credential? = nil) { self.login = login }

    func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
              completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        lock.withLock { _challenges.append("\(challenge.protectionSpace.realm ?? "") \(challenge.protectionSpace.authenticationMethod)") }
        completion(login.map { .useCredential($0) } ?? .performDefaultHandling)
    }

    func downloadTask(_ task: DownloadTask, didWriteData w: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        lock.withLock {
            if _progress[task.taskIdentifier] == nil { _order.append("progress \(task.taskIdentifier)") }
            _progress[task.taskIdentifier] = totalBytesWritten
        }
    }
    func downloadTask(_ task: DownloadTask, didFinishDownloadingTo location: URL) {
        let d = try? Data(contentsOf: location)
        lock.withLock {
            _files[task.taskIdentifier] = d
            _order.append("file \(task.taskIdentifier)")
        }
    }
    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        lock.withLock {
            _completions[task.taskIdentifier] = error
            _statuses[task.taskIdentifier] = task.response?.statusCode
            _order.append("complete \(task.taskIdentifier)")
        }
        completed.signal()
    }
    func sessionDidFinishEvents(forBackgroundSession session: Session) {
        lock.withLock {
            _finishedEvents += 1
            _order.append("events done")
        }
        eventsDone.signal()
    }
    func received(_ id: Int) -> Int64 { lock.withLock { _progress[id] ?? 0 } }
}

/// nginx for the class's tests; each test gets a `DaemonHome`.
class DaemonTestCase: NginxTestCase {
    var daemonHome: DaemonHome!
    var home: String { daemonHome.path }

    override class func setUp() {
        Porter.bootstrap()
        super.setUp()
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        daemonHome = try DaemonHome("porterd-test")
    }

    override func tearDown() {
        daemonHome?.remove()
        super.tearDown()
    }
}

final class BackgroundSessionTests: DaemonTestCase {
    /// Each test has its own daemon: its own runtime and state folders.
    override func setUpWithError() throws {
        try super.setUpWithError()
        daemonHome.install()
    }

    func daemonPID() -> pid_t? { daemonHome.daemonPID }

    func expectedMedium() -> Data {
        Data((0..<NginxFixture.mediumSize).map { NginxFixture.bigByte($0) })
    }

    /// The process that started a download lets go (as an app that exits); porterd
    /// finishes it; the next session with the identifier gets the file, the completion,
    /// then `sessionDidFinishEvents`, in that order, and the events are not sent again.
    func testEventsWaitForTheNextSessionWithTheIdentifier() throws {
        let id = "away-\(UUID().uuidString.prefix(6))"
        let first = Session(configuration: .background(identifier: id), delegate: BackgroundRecorder())
        let task = first.downloadTask(with: URL(string: nginx.http + "/medium.bin")!)
        task.taskDescription = "the medium file"
        task.resume()
        XCTAssertNotNil(daemonPID(), "porterd was started on demand")
        first.finishTasksAndInvalidate()
        let taskID = task.taskIdentifier

        // Give porterd time to finish while nobody holds the session.
        let journal = home + "/state/porter/finished"
        XCTAssertTrue(eventually {
            ((try? FileManager.default.subpathsOfDirectory(atPath: journal)) ?? []).contains { $0.hasSuffix("task-\(taskID)") }
        }, "porterd kept the finished file in its own area")

        let recorder = BackgroundRecorder()
        let second = Session(configuration: .background(identifier: id), delegate: recorder)
        XCTAssertEqual(recorder.eventsDone.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(recorder.files[taskID], expectedMedium(), "byte-exact")
        XCTAssertEqual(recorder.completions[taskID].map { $0 == nil }, true, "completed without an error")
        XCTAssertEqual(recorder.order.filter { !$0.hasPrefix("progress") }, ["file \(taskID)", "complete \(taskID)", "events done"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: journal + "/x"), "")
        second.finishTasksAndInvalidate()

        // Delivered once: a third session hears no file again.
        let third = BackgroundRecorder()
        let again = Session(configuration: .background(identifier: id), delegate: third)
        XCTAssertEqual(third.eventsDone.wait(timeout: .now() + 120), .success)
        XCTAssertTrue(third.files.isEmpty && third.completions.isEmpty, "\(third.order)")
        XCTAssertTrue(again.allTasks.isEmpty)
        again.finishTasksAndInvalidate()
    }

    /// porterd is killed (SIGKILL) mid-transfer; the session brings it back, and the
    /// download continues from its partial file with Range + If-Range: byte-exact.
    func testAKilledDaemonResumesFromItsPartialFile() throws {
        let id = "kill-\(UUID().uuidString.prefix(6))"
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: id), delegate: recorder)
        let task = session.downloadTask(with: URL(string: nginx.http + "/slow/medium.bin")!)
        task.resume()
        XCTAssertTrue(eventually { recorder.received(task.taskIdentifier) >= 2 << 20 }, "progress reaches the app")
        let first = try XCTUnwrap(daemonPID())
        XCTAssertEqual(kill(first, SIGKILL), 0)
        XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success, "the transfer ends after the restart")
        XCTAssertNotEqual(daemonPID(), first, "a new porterd")
        XCTAssertEqual(recorder.files[task.taskIdentifier], expectedMedium(), "byte-exact across the kill")
        XCTAssertEqual(recorder.completions[task.taskIdentifier].map { $0 == nil }, true)
        let log = try String(contentsOfFile: nginx.rangeLog, encoding: .utf8)
        let resumed = log.split(separator: "\n").filter { $0.contains("range=\"bytes=") && $0.contains(" 206 ") }
        XCTAssertFalse(resumed.isEmpty, "nginx saw a Range request answered with 206:\n\(log)")
        XCTAssertTrue(resumed.allSatisfy { !$0.contains("if-range=\"\"") }, "with If-Range")
        session.finishTasksAndInvalidate()
    }

    /// The resource changes while porterd is down: the If-Range check fails, nginx sends
    /// the whole new file, and porterd starts over (never a mix of the two versions).
    func testAChangedResourceStartsOverInsteadOfMixing() throws {
        let id = "changed-\(UUID().uuidString.prefix(6))"
        let path = nginx.dir + "/www/changing.bin"
        try Data((0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }).write(to: URL(fileURLWithPath: path))
        defer { unlink(path) }
        let first = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: id), delegate: first)
        let task = session.downloadTask(with: URL(string: nginx.http + "/slow/changing.bin")!)
        task.resume()
        // 2 MiB at 1 MiB/s: a progress checkpoint (every second) has recorded synced bytes.
        XCTAssertTrue(eventually { first.received(task.taskIdentifier) >= 2 << 20 })
        // The app lets go, porterd dies, the file changes (new bytes, new mtime: a new ETag).
        session.finishTasksAndInvalidate()
        kill(try XCTUnwrap(daemonPID()), SIGKILL)
        let changed = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) })
        try changed.write(to: URL(fileURLWithPath: path))
        var times = [timespec(tv_sec: time(nil) + 5, tv_nsec: 0), timespec(tv_sec: time(nil) + 5, tv_nsec: 0)]
        utimensat(AT_FDCWD, path, &times, 0)

        let second = BackgroundRecorder()
        let again = Session(configuration: .background(identifier: id), delegate: second)
        XCTAssertEqual(second.completed.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(second.files[task.taskIdentifier]?.count, changed.count)
        XCTAssertEqual(second.files[task.taskIdentifier], changed, "the new version whole, never a mix")
        let log = try String(contentsOfFile: nginx.rangeLog, encoding: .utf8)
        XCTAssertTrue(log.split(separator: "\n").contains { $0.hasPrefix("/slow/changing.bin 200 range=\"bytes=") },
                      "the resumed request asked for a range and got the whole file:\n\(log)")
        again.finishTasksAndInvalidate()
    }

    /// A later session sees the tasks an earlier process made, with their description,
    /// state and byte counts (so an app recognises its transfers).
    func testAllTasksAfterReconnectingShowWhatRuns() throws {
        let id = "list-\(UUID().uuidString.prefix(6))"
        let first = BackgroundRecorder()
        let a = Session(configuration: .background(identifier: id), delegate: first)
        let task = a.downloadTask(with: URL(string: nginx.http + "/slow/medium.bin")!)
        task.taskDescription = "nightly backup"
        task.resume()
        XCTAssertTrue(eventually { first.received(task.taskIdentifier) >= 1 << 20 })
        a.finishTasksAndInvalidate()

        let second = BackgroundRecorder()
        let b = Session(configuration: .background(identifier: id), delegate: second)
        let seen = try XCTUnwrap(b.allTasks.first { $0.taskIdentifier == task.taskIdentifier } as? SessionTask, "\(b.allTasks)")
        XCTAssertTrue(seen is DownloadTask)
        XCTAssertEqual(seen.taskDescription, "nightly backup")
        XCTAssertEqual(seen.state, .running)
        XCTAssertGreaterThanOrEqual(seen.countOfBytesReceived, 1 << 20)
        XCTAssertEqual(seen.countOfBytesExpectedToReceive, Int64(NginxFixture.mediumSize))
        XCTAssertEqual(seen.originalRequest.url.path, "/slow/medium.bin")
        // Controls travel to the daemon: cancel ends it, with the completion delivered here.
        seen.cancel()
        XCTAssertEqual(second.completed.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(second.completions[task.taskIdentifier]??.code, .cancelled)
        b.finishTasksAndInvalidate()
    }

    /// cancel(byProducingResumeData:) on a background download: the resume data continues
    /// in an ordinary in-process session, byte-exact.
    func testResumeDataFromABackgroundTaskContinuesInProcess() throws {
        let id = "resume-\(UUID().uuidString.prefix(6))"
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: id), delegate: recorder)
        let task = session.downloadTask(with: URL(string: nginx.http + "/slow/medium.bin")!)
        task.resume()
        XCTAssertTrue(eventually { recorder.received(task.taskIdentifier) >= 1 << 20 })
        let got = DispatchSemaphore(value: 0)
        let box = Locked<Data?>(nil)
        task.cancel(byProducingResumeData: { d in box.withLock { $0 = d }; got.signal() })
        XCTAssertEqual(got.wait(timeout: .now() + 120), .success)
        let data = try XCTUnwrap(box.current, "resume data")
        let resume = try ResumeData(data: data)
        XCTAssertGreaterThanOrEqual(resume.bytesReceived, 1 << 20)
        XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(recorder.completions[task.taskIdentifier]??.code, .cancelled)
        session.finishTasksAndInvalidate()

        let local = ResumeRecorder(cancelAt: nil)
        Session(configuration: .ephemeral, delegate: local).downloadTask(withResumeData: data).resume()
        XCTAssertEqual(local.done.wait(timeout: .now() + 120), .success)
        XCTAssertNil(local.error)
        XCTAssertEqual(local.resumedAt, resume.bytesReceived)
        XCTAssertEqual(local.file, expectedMedium())
    }

    /// A journal that is not a database is moved aside with a clear note; the daemon
    /// starts with a new one and works.
    func testACorruptJournalIsMovedAside() throws {
        let folder = home + "/state/porter"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try Data(repeating: 0x5A, count: 10_000).write(to: URL(fileURLWithPath: folder + "/porterd.sqlite"))
        chmod(folder + "/porterd.sqlite", 0o600)
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: "corrupt"), delegate: recorder)
        let task = session.downloadTask(with: URL(string: nginx.http + "/medium.bin")!)
        task.resume()
        XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(recorder.files[task.taskIdentifier], expectedMedium())
        let names = try FileManager.default.contentsOfDirectory(atPath: folder)
        XCTAssertTrue(names.contains { $0.hasPrefix("porterd.sqlite.corrupt-") }, "\(names)")
        let log = try String(contentsOfFile: folder + "/porterd.log", encoding: .utf8)
        XCTAssertTrue(log.contains("could not be read") && log.contains("moved to"), log)
        session.finishTasksAndInvalidate()
    }

    /// Another user reaching the socket (here the folder and socket are opened up on
    /// purpose) is refused by its credentials (SO_PEERCRED), not served.
    func testAnotherUserIsRefused() throws {
        guard geteuid() == 0 else { throw NginxFixture.Failure.setup("needs root to run a client as another user") }
        let session = Session(configuration: .background(identifier: "mine"), delegate: BackgroundRecorder())
        XCTAssertNotNil(daemonPID())
        chmod(home + "/run", 0o755)
        chmod(home + "/run/porter", 0o755)
        chmod(home + "/run/porter/porterd.sock", 0o666)
        let script = """
            import socket, struct, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[1])
            p = b"PORTER-IPC" + bytes([0, 1, 0, 1, 7]) + b"porterd"
            s.sendall(struct.pack(">I", len(p) + 1) + bytes([1]) + p)
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk: break
                data += chunk
            print(data[5:].decode("utf-8", "replace") if len(data) > 5 and data[4] == 4 else "NOT REFUSED: %r" % data)
            """
        let r = try runProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script,
                                                   home + "/run/porter/porterd.sock"])
        XCTAssertEqual(r.status, 0, r.stdout + r.stderr)
        XCTAssertTrue(r.stdout.contains("refused: porterd serves only uid 0"), r.stdout + r.stderr)
        session.finishTasksAndInvalidate()
    }

    /// Events wait and no process holds the session: porterd runs its launch command,
    /// once, with the session named in the environment; not while a process holds it.
    /// The launch command is the application's own program (BackgroundApp, which set it),
    /// as porterd requires.
    func testTheLaunchCommandRunsOnceForEventsNobodyHolds() throws {
        let marks = home + "/launched.txt"
        let app = try runProcess(backgroundApp, ["--wake", marks, "wake", nginx.http + "/slow/medium.bin", nginx.http + "/slow/medium.bin"])
        XCTAssertEqual(app.status, 0, app.stdout + app.stderr)
        XCTAssertTrue(eventually { (try? String(contentsOfFile: marks, encoding: .utf8)) != nil }, "launched")
        usleep(1_500_000)  // the second task ends too: no second launch before a process took the events
        XCTAssertEqual(try String(contentsOfFile: marks, encoding: .utf8), "wake\n")

        // A process holds the session while its task ends: no launch.
        let held = BackgroundRecorder()
        let b = Session(configuration: .background(identifier: "wake"), delegate: held)
        XCTAssertEqual(held.eventsDone.wait(timeout: .now() + 120), .success)
        let three = b.downloadTask(with: URL(string: nginx.http + "/medium.bin")!)
        three.resume()
        while held.completions[three.taskIdentifier] == nil {
            XCTAssertEqual(held.completed.wait(timeout: .now() + 120), .success)
        }
        usleep(300_000)
        XCTAssertEqual(try String(contentsOfFile: marks, encoding: .utf8), "wake\n")
        b.finishTasksAndInvalidate()
    }

    /// Under systemd's socket activation (systemd-socket-activate passes the listening
    /// socket as fd 3, as porterd.socket does), porterd serves on the socket it was given
    /// and leaves it in place when it exits.
    func testSocketActivation() throws {
        let socket = home + "/run/porter/porterd.sock"
        try FileManager.default.createDirectory(atPath: home + "/run/porter", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let activator = try startProcess("/usr/bin/systemd-socket-activate", ["-l", socket, "-E", "XDG_RUNTIME_DIR", "-E", "XDG_STATE_HOME", "-E", "PORTERD_IDLE_EXIT",
                                                                                         "-E", "XDG_CACHE_HOME", "-E", "XDG_DATA_HOME", "-E", "XDG_CONFIG_HOME",
                                                                                         ProcessInfo.processInfo.environment["PORTERD_PATH"]!])
        defer { activator.terminate() }
        XCTAssertTrue(eventually { FileManager.default.fileExists(atPath: socket) })
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: "activated"), delegate: recorder)
        let task = session.downloadTask(with: URL(string: nginx.http + "/medium.bin")!)
        task.resume()
        XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(recorder.files[task.taskIdentifier], expectedMedium())
        let log = try String(contentsOfFile: home + "/state/porter/porterd.log", encoding: .utf8)
        XCTAssertTrue(log.contains("socket activation"), log)
        session.finishTasksAndInvalidate()
    }

    /// The shipped user units pass `systemd-analyze verify`; a broken copy does not (so the
    /// check can fail).
    func testTheSystemdUnitsVerify() throws {
        let units = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Support/systemd").path
        let dir = home + "/units"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for name in ["porterd.socket", "porterd.service"] {
            var text = try String(contentsOfFile: units + "/" + name, encoding: .utf8)
            text = text.replacingOccurrences(of: "/usr/local/bin/porterd", with: ProcessInfo.processInfo.environment["PORTERD_PATH"]!)
            try text.write(toFile: dir + "/" + name, atomically: true, encoding: .utf8)
        }
        chmod(home + "/run", 0o700)
        let ok = try runProcess("/usr/bin/systemd-analyze", ["verify", "--user", dir + "/porterd.socket", dir + "/porterd.service"],
                                environment: ["XDG_RUNTIME_DIR": home + "/run"])
        XCTAssertEqual(ok.status, 0, ok.stdout + ok.stderr)
        try "[Socket]\nListenStream=\nBogus=1\n".write(toFile: dir + "/porterd.socket", atomically: true, encoding: .utf8)
        let bad = try runProcess("/usr/bin/systemd-analyze", ["verify", "--user", dir + "/porterd.socket", dir + "/porterd.service"],
                                 environment: ["XDG_RUNTIME_DIR": home + "/run"])
        XCTAssertNotEqual(bad.status, 0, "a broken unit is reported: \(bad.stdout)\(bad.stderr)")
    }

    /// An upload from a file: porterd reads the file itself, so the app may go at once;
    /// the next session hears the completion, and the server has the bytes.
    func testAnUploadFromAFileOutlivesTheApp() throws {
        let id = "upload-\(UUID().uuidString.prefix(6))"
        let source = home + "/payload.bin"
        let payload = Data((0..<(5 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        try payload.write(to: URL(fileURLWithPath: source))
        let name = "up-\(UUID().uuidString.prefix(6)).bin"
        let a = Session(configuration: .background(identifier: id), delegate: BackgroundRecorder())
        var request = Request(url: URL(string: nginx.http + "/dav/" + name)!)
        request.method = "PUT"
        let task = a.uploadTask(with: request, fromFile: URL(fileURLWithPath: source))
        task.resume()
        a.finishTasksAndInvalidate()

        let recorder = BackgroundRecorder()
        let b = Session(configuration: .background(identifier: id), delegate: recorder)
        while recorder.completions[task.taskIdentifier] == nil {
            XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        }
        XCTAssertEqual(recorder.completions[task.taskIdentifier].map { $0 == nil }, true, "\(recorder.completions)")
        XCTAssertEqual(recorder.statuses[task.taskIdentifier], 201, "the server's status reaches the task")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: nginx.dir + "/www/dav/" + name)), payload)
        b.finishTasksAndInvalidate()

        // Kinds porterd cannot run are refused with a clear error, as URLSession does.
        let refused = BackgroundRecorder()
        let c = Session(configuration: .background(identifier: id), delegate: refused)
        let data = c.dataTask(with: URL(string: nginx.http + "/medium.bin")!)
        data.resume()
        // The upload's completion may come to this session again (b's receipt for it can
        // still be on its way): wait for the refused task's own.
        while refused.completions[data.taskIdentifier] == nil {
            guard refused.completed.wait(timeout: .now() + 120) == .success else { return XCTFail("the refused task did not complete") }
        }
        let e = try XCTUnwrap(refused.completions[data.taskIdentifier] ?? nil)
        XCTAssertEqual(e.code, .unsupportedConfiguration)
        XCTAssertTrue(e.message.contains("download tasks and upload tasks from a file"), e.message)
        c.finishTasksAndInvalidate()
    }

    /// A background session's own tasks (a refused kind) never take an identifier porterd
    /// gave one of its tasks: porterd numbers from 1, and a completion it delivers again
    /// to a later session was taken for the refused task's (the upload test above failed
    /// so, once, on a loaded machine).
    func testARefusedTaskNeverSharesAnIdentifierWithAPorterdTask() throws {
        let a = Session(configuration: .background(identifier: "ids-\(UUID().uuidString.prefix(6))"), delegate: BackgroundRecorder())
        let download = a.downloadTask(with: URL(string: nginx.http + "/medium.bin")!)
        let refused = a.dataTask(with: URL(string: nginx.http + "/medium.bin")!)
        let stream = a.streamTask(withHostName: "127.0.0.1", port: 9)
        XCTAssertEqual(Set([download.taskIdentifier, refused.taskIdentifier, stream.taskIdentifier]).count, 3,
                       "download \(download.taskIdentifier), refused \(refused.taskIdentifier), stream \(stream.taskIdentifier)")
        a.invalidateAndCancel()
    }

    /// porterd slow to start (here a wrapper that waits before it runs porterd, as a
    /// loaded machine makes a start slow): the session's init stops waiting for it after
    /// 10 s, and a task made then waits for the connection instead of failing at once
    /// with "porterd is not reachable" (the app's upload was lost so).
    func testATaskWaitsForAPorterdSlowToStart() throws {
        let real = try XCTUnwrap(daemonHome.environment["PORTERD_PATH"])
        let wrapper = home + "/slow-porterd"
        try "#!/bin/sh\nsleep 15\nexec '\(real)' \"$@\"\n".write(toFile: wrapper, atomically: true, encoding: .utf8)
        chmod(wrapper, 0o755)
        setenv("PORTERD_PATH", wrapper, 1)
        defer { setenv("PORTERD_PATH", real, 1) }
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: "slow-\(UUID().uuidString.prefix(6))"), delegate: recorder)
        let task = session.downloadTask(with: URL(string: nginx.http + "/index.html")!)
        task.resume()
        while recorder.completions[task.taskIdentifier] == nil {
            guard recorder.completed.wait(timeout: .now() + 120) == .success else { return XCTFail("no completion") }
        }
        XCTAssertEqual(recorder.completions[task.taskIdentifier].map { $0 == nil }, true,
                       "\(recorder.completions)")
        XCTAssertEqual(recorder.files[task.taskIdentifier], Data("hello from nginx\n".utf8))
        session.finishTasksAndInvalidate()
    }

    /// earliestBeginDate holds a task back; the session's bytes-per-second cap applies in
    /// porterd too.
    func testEarliestBeginDateAndTheRateCap() throws {
        var config = SessionConfiguration.background(identifier: "timing")
        config.maximumBytesPerSecond = 2 << 20
        let recorder = BackgroundRecorder()
        let session = Session(configuration: config, delegate: recorder)
        let later = session.downloadTask(with: URL(string: nginx.http + "/index.html")!)
        later.earliestBeginDate = Date().addingTimeInterval(2)
        let started = Date()
        later.resume()
        while recorder.completions[later.taskIdentifier] == nil {
            XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        }
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 1.8, "not started before its date")
        XCTAssertEqual(recorder.completions[later.taskIdentifier].map { $0 == nil }, true)

        let capped = session.downloadTask(with: URL(string: nginx.http + "/medium.bin?capped")!)
        let t0 = Date()
        capped.resume()
        while recorder.completions[capped.taskIdentifier] == nil {
            XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        }
        XCTAssertEqual(recorder.files[capped.taskIdentifier], expectedMedium())
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(t0), 2.2, "6 MiB at 2 MiB/s takes about 3 s")
        session.finishTasksAndInvalidate()
    }

    /// A login porterd cannot answer from the credential store goes to the app that holds
    /// the session; its answer lets the download through.
    func testTheAttachedAppAnswersTheLogin() throws {
        let recorder = BackgroundRecorder(login: Credential(user: "alice", password: "secret"))
        let session = Session(configuration: .background(identifier: "login"), delegate: recorder)
        let task = session.downloadTask(with: URL(string: nginx.http + "/basic/index.html")!)
        task.resume()
        XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(recorder.challenges, ["porter-test basic"])
        XCTAssertEqual(recorder.files[task.taskIdentifier], Data("members only\n".utf8))
        XCTAssertEqual(recorder.statuses[task.taskIdentifier], 200)
        session.finishTasksAndInvalidate()
    }

    /// Nobody holds the session and the store has no login: the task waits the documented
    /// time for an app, then fails with userAuthenticationRequired (heard by the next one).
    func testALoginNobodyAnswersFailsTheTask() throws {
        setenv("PORTERD_CHALLENGE_WAIT", "1", 1)
        defer { unsetenv("PORTERD_CHALLENGE_WAIT") }
        let a = Session(configuration: .background(identifier: "nologin"), delegate: BackgroundRecorder())
        let task = a.downloadTask(with: URL(string: nginx.http + "/basic/index.html")!)
        task.resume()
        a.finishTasksAndInvalidate()
        XCTAssertTrue(eventually {
            ((try? String(contentsOfFile: self.home + "/state/porter/porterd.log", encoding: .utf8)) ?? "").contains("no app answered the login")
        })
        let recorder = BackgroundRecorder()
        let b = Session(configuration: .background(identifier: "nologin"), delegate: recorder)
        XCTAssertEqual(recorder.eventsDone.wait(timeout: .now() + 120), .success)
        let e = try XCTUnwrap(recorder.completions[task.taskIdentifier] ?? nil, "\(recorder.order)")
        XCTAssertEqual(e.code, .userAuthenticationRequired, "\(e)")
        XCTAssertTrue(recorder.files.isEmpty, "no 401 body handed over as the download")
        b.finishTasksAndInvalidate()
    }

    /// A discretionary session's transfers run one at a time, under the discretionary cap.
    func testDiscretionaryTransfersRunOneAtATimeUnderTheirCap() throws {
        var config = SessionConfiguration.background(identifier: "quiet")
        config.isDiscretionary = true
        config.discretionaryBytesPerSecond = 4 << 20
        let recorder = BackgroundRecorder()
        let session = Session(configuration: config, delegate: recorder)
        let one = session.downloadTask(with: URL(string: nginx.http + "/medium.bin?one")!)
        let two = session.downloadTask(with: URL(string: nginx.http + "/medium.bin?two")!)
        let t0 = Date()
        one.resume()
        two.resume()
        while recorder.completions.count < 2 {
            XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        }
        XCTAssertEqual(recorder.files[one.taskIdentifier], expectedMedium())
        XCTAssertEqual(recorder.files[two.taskIdentifier], expectedMedium())
        let order = recorder.order
        let firstDone = try XCTUnwrap(order.firstIndex(of: "complete \(one.taskIdentifier)"), "\(order)")
        let secondStarted = try XCTUnwrap(order.firstIndex(of: "progress \(two.taskIdentifier)"), "\(order)")
        XCTAssertGreaterThan(secondStarted, firstDone, "the second began after the first ended: \(order)")
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(t0), 2, "12 MiB at 4 MiB/s takes about 3 s")
        session.finishTasksAndInvalidate()
    }

    /// An application process starts a background download of a throttled file and is
    /// killed with SIGKILL; the transfer completes; a new process (here, this one) with the
    /// same identifier receives the byte-exact file, then sessionDidFinishEvents.
    func testAnAppKilledMidDownloadHearsOfItOnReturn() throws {
        let app = backgroundApp
        let p = Process()
        p.executableURL = URL(fileURLWithPath: app)
        p.arguments = ["killed", nginx.http + "/slow/medium.bin"]
        p.environment = ProcessInfo.processInfo.environment  // this test's XDG folders
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        var text = ""
        var taskID: Int?
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let d = out.fileHandleForReading.availableData
            if d.isEmpty { break }
            text += String(decoding: d, as: UTF8.self)
            let lines = text.split(separator: "\n")
            if taskID == nil { taskID = lines.first { $0.hasPrefix("STARTED ") }.flatMap { Int($0.dropFirst(8)) } }
            if let last = lines.last(where: { $0.hasPrefix("PROGRESS ") }), let n = Int64(last.split(separator: " ")[2]), n >= 1 << 20 { break }
        }
        let id = try XCTUnwrap(taskID, text)
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationReason, .uncaughtSignal)

        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: "killed"), delegate: recorder)
        while recorder.completions[id] == nil {
            XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success, "\(recorder.order)")
        }
        XCTAssertEqual(recorder.files[id], expectedMedium(), "byte-exact")
        XCTAssertEqual(recorder.completions[id].map { $0 == nil }, true)
        XCTAssertEqual(recorder.eventsDone.wait(timeout: .now() + 120), .success)
        session.finishTasksAndInvalidate()
    }

    /// A session that delivers on the loading thread: its delegate may make a task from
    /// inside a callback (the callback must not run on the thread that reads porterd's
    /// answer to it).
    func testAnInlineDelegateMayMakeTasksInItsCallbacks() throws {
        final class Chain: DownloadDelegate, @unchecked Sendable {
            let next: URL
            let done = DispatchSemaphore(value: 0)
            let lock = NSLock()
            var completed: [Int] = []
            init(next: URL) { self.next = next }
            func downloadTask(_ task: DownloadTask, didFinishDownloadingTo location: URL) {}
            func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
                let first = lock.withLock { () -> Bool in
                    completed.append(task.taskIdentifier)
                    return completed.count == 1
                }
                if first { task.session.downloadTask(with: next).resume() } else { done.signal() }
            }
        }
        let chain = Chain(next: URL(string: nginx.http + "/index.html?second")!)
        let session = Session(configuration: .background(identifier: "inline"), delegateOnLoadingThread: chain)
        session.downloadTask(with: URL(string: nginx.http + "/index.html?first")!).resume()
        XCTAssertEqual(chain.done.wait(timeout: .now() + 120), .success, "the task made in the callback ran")
        XCTAssertEqual(Set(chain.completed).count, 2)
        session.finishTasksAndInvalidate()
    }

    /// suspend stops the attempt (its slot goes to others); a resume right after, before
    /// the stopped attempt has ended, continues the download instead of ending it.
    func testSuspendThenResumeAtOnceContinues() throws {
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: "pause"), delegate: recorder)
        let task = session.downloadTask(with: URL(string: nginx.http + "/slow/medium.bin?pause")!)
        task.resume()
        XCTAssertTrue(eventually { recorder.received(task.taskIdentifier) >= 1 << 20 })
        task.suspend()
        task.resume()
        while recorder.completions[task.taskIdentifier] == nil {
            XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success, "\(recorder.order)")
        }
        XCTAssertEqual(recorder.completions[task.taskIdentifier].map { $0 == nil }, true, "\(recorder.completions)")
        XCTAssertEqual(recorder.files[task.taskIdentifier], expectedMedium())
        session.finishTasksAndInvalidate()
    }
}

/// `porter --background` and `porter jobs`, as separate processes.
final class BackgroundCLITests: DaemonTestCase {
    var env: [String: String?] = [:]

    override func setUpWithError() throws {
        try super.setUpWithError()
        env = daemonHome.environment.mapValues { Optional($0) }
        env.merge(withoutProxies) { a, _ in a }
    }

    func porter(_ args: [String]) throws -> ProcessResult { try runProcess(porterBinary, args, environment: env) }

    /// Queued, the CLI returns at once; `jobs` lists the task; the CLI that waits for it is
    /// killed (SIGKILL) and the transfer goes on; a second `jobs wait` sees it end with
    /// the file at its -o path, byte-exact.
    func testQueueListKillTheWaiterAndWaitAgain() throws {
        let out = home + "/medium.bin"
        let started = Date()
        let queued = try porter(["--background", "cli", "-o", out, nginx.http + "/slow/medium.bin"])
        XCTAssertEqual(queued.status, 0, queued.stderr)
        _ = started  // what shows it returned before the end: jobs lists the task running, below
        let id = try XCTUnwrap(queued.stdout.split(separator: "\t").first.flatMap { Int($0) }, queued.stdout)
        let jobs = try porter(["jobs", "cli"])
        XCTAssertEqual(jobs.status, 0, jobs.stderr)
        XCTAssertTrue(jobs.stdout.contains("\(id)\tcli\trunning"), jobs.stdout)

        let waiter = try startProcess(porterBinary, ["jobs", "cli", "wait", String(id)], environment: env)
        usleep(500_000)
        kill(waiter.processIdentifier, SIGKILL)
        waiter.waitUntilExit()
        XCTAssertFalse(FileManager.default.fileExists(atPath: out), "not there before it is whole")

        let waited = try porter(["jobs", "cli", "wait", String(id)])
        XCTAssertEqual(waited.status, 0, waited.stderr)
        let got = try Data(contentsOf: URL(fileURLWithPath: out))
        XCTAssertEqual(got, Data((0..<NginxFixture.mediumSize).map { NginxFixture.bigByte($0) }))
        let after = try porter(["jobs", "cli"])
        XCTAssertTrue(after.stdout.contains("\(id)\tcli\tcompleted"), after.stdout)
    }

    /// The CLI ignores SIGINT, SIGTERM and SIGHUP while it handles them itself; a porterd
    /// it starts must not inherit that (an ignored signal survives execve): it stops on
    /// SIGTERM, as systemd and `kill` expect, and so would the apps it launches.
    func testAPorterdTheCLIStartedStopsOnSIGTERM() throws {
        XCTAssertNil(daemonHome.daemonPID, "no porterd yet: the CLI starts it")
        let queued = try porter(["--background", "signals", "-o", home + "/s.bin", nginx.http + "/slow/medium.bin"])
        XCTAssertEqual(queued.status, 0, queued.stderr)
        let pid = try XCTUnwrap(daemonHome.daemonPID)
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let ignored = try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix("SigIgn:") }
            .flatMap { UInt64($0.dropFirst(7).trimmingCharacters(in: .whitespaces), radix: 16) })
        for sig in [SIGHUP, SIGINT, SIGTERM] {
            XCTAssertEqual(ignored & (1 << UInt64(sig - 1)), 0, "porterd ignores signal \(sig) (SigIgn \(String(ignored, radix: 16)))")
        }
        kill(pid, SIGTERM)
        // Gone, or a zombie its new parent has not reaped yet.
        XCTAssertTrue(eventually {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
            return stat.split(separator: ")").last?.split(separator: " ").first == "Z"
        }, "porterd is still there after SIGTERM")
    }

    /// Nothing listens at first: the task waits and retries with back-off (jobs shows it),
    /// and completes once a server comes up on the port.
    func testConnectionRefusedIsRetriedUntilTheServerComesUp() throws {
        let port = try XCTUnwrap(freeLoopbackPort())
        let site = home + "/site"
        try FileManager.default.createDirectory(atPath: site, withIntermediateDirectories: true)
        try Data("late but here\n".utf8).write(to: URL(fileURLWithPath: site + "/late.txt"))
        let out = home + "/late.txt"
        let queued = try porter(["--background", "retry", "-o", out, "http://127.0.0.1:\(port)/late.txt"])
        XCTAssertEqual(queued.status, 0, queued.stderr)
        let id = try XCTUnwrap(queued.stdout.split(separator: "\t").first.flatMap { Int($0) }, queued.stdout)
        var listing = ""
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline {
            listing = try porter(["jobs", "retry"]).stdout
            if listing.contains("retrying in") { break }
            usleep(100_000)
        }
        XCTAssertTrue(listing.contains("retrying in") && listing.contains("retries 1"), listing)
        let server = try startProcess("/usr/bin/python3", ["-m", "http.server", String(port), "--bind", "127.0.0.1", "--directory", site])
        defer { server.terminate() }
        let waited = try porter(["jobs", "retry", "wait", String(id)])
        XCTAssertEqual(waited.status, 0, waited.stderr)
        XCTAssertEqual(try String(contentsOfFile: out, encoding: .utf8), "late but here\n")
    }

    /// In a network namespace whose loopback is down, the task cannot connect and waits,
    /// retrying with back-off; when the link comes up, rtnetlink tells porterd and the task
    /// starts at once, long before its next back-off time.
    func testTasksWaitingForTheNetworkStartWhenItComesUp() throws {
        guard geteuid() == 0 else { throw NginxFixture.Failure.setup("network namespaces need root") }
        let ns = "porter-\(UUID().uuidString.prefix(6))"
        try runChecked("/usr/sbin/ip", ["netns", "add", ns])
        defer { _ = try? runProcess("/usr/sbin/ip", ["netns", "del", ns]) }
        let site = home + "/site"
        try FileManager.default.createDirectory(atPath: site, withIntermediateDirectories: true)
        try Data("online again\n".utf8).write(to: URL(fileURLWithPath: site + "/x.txt"))
        // The namespace's own loopback, down: its 127.0.0.1 is unreachable.
        let server = try startProcess("/usr/sbin/ip", ["netns", "exec", ns, "/usr/bin/python3", "-m", "http.server", "18080",
                                                       "--bind", "127.0.0.1", "--directory", site])
        defer { server.terminate() }
        usleep(500_000)
        let out = home + "/x.txt"
        let queued = try runProcess("/usr/sbin/ip", ["netns", "exec", ns, porterBinary, "--background", "net", "-o", out,
                                                     "http://127.0.0.1:18080/x.txt"], environment: env)
        XCTAssertEqual(queued.status, 0, queued.stderr)
        let id = try XCTUnwrap(queued.stdout.split(separator: "\t").first.flatMap { Int($0) }, queued.stdout)
        var listing = ""
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline {
            listing = try porter(["jobs", "net"]).stdout
            if listing.contains("retries 3") { break }
            usleep(100_000)
        }
        XCTAssertTrue(listing.contains("retries 3") && listing.contains("retrying in"), listing)
        // The next attempt is 3 s or more away (back-off 4 s ± 20 %).
        let up = Date()
        try runChecked("/usr/sbin/ip", ["netns", "exec", ns, "/usr/sbin/ip", "link", "set", "lo", "up"])
        let waited = try porter(["jobs", "net", "wait", String(id)])
        XCTAssertEqual(waited.status, 0, waited.stderr)
        _ = up
        // Started by the route change, not by its back-off timer: porterd's log says the
        // network change admitted the waiting task (a timer's start is not logged so).
        XCTAssertEqual(try String(contentsOfFile: out, encoding: .utf8), "online again\n")
        let log = try String(contentsOfFile: home + "/state/porter/porterd.log", encoding: .utf8)
        XCTAssertTrue(log.contains("the network changed"), log)
    }
}

