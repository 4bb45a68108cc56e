import Foundation
import Porter
import PorterIPC
import PorterTestSupport
import XCTest

extension DaemonTestCase {
    /// The helper application beside the porter binary.
    var backgroundApp: String {
        URL(fileURLWithPath: porterBinary).deletingLastPathComponent().appendingPathComponent("BackgroundApp").path
    }


    var daemonLog: String { (try? String(contentsOfFile: home + "/state/porter/porterd.log", encoding: .utf8)) ?? "" }
}

/// Who may talk to porterd and what a client may ask of it: each test plays an attacker
/// (sandboxed code, another session's client, forged resume data, an impostor daemon).
final class DaemonBoundaryTests: DaemonTestCase {
    override func setUpWithError() throws {
        try super.setUpWithError()
        daemonHome.install()
    }

    var socket: String { home + "/run/porter/porterd.sock" }

    /// A client in C that connects to porterd's socket and says hello, optionally after
    /// confining itself: `sandboxed` puts it under a seccomp filter that allows everything,
    /// with no_new_privs (the socket stays reachable, so what is tested is porterd's own
    /// refusal); `worker` runs the plugin worker's real sandbox (porter_worker_sandbox from
    /// Sources/CPorterIPC/worker.c) first. Prints REFUSED <reason>, ANSWERED <kind>, or
    /// BLOCKED <error> when the sandbox itself kept it from connecting.
    func sandboxedClient() throws -> String {
        let source = home + "/client.c", binary = home + "/client"
        try Data("""
            #include "porter_ipc.h"
            #include <errno.h>
            #include <linux/filter.h>
            #include <linux/seccomp.h>
            #include <stdio.h>
            #include <stdlib.h>
            #include <string.h>
            #include <sys/prctl.h>
            #include <sys/socket.h>
            #include <sys/un.h>
            #include <unistd.h>
            static int readn(int fd, unsigned char *b, size_t n) {
                size_t got = 0;
                while (got < n) { ssize_t r = read(fd, b + got, n - got); if (r <= 0) return -1; got += (size_t)r; }
                return 0;
            }
            int main(int argc, char **argv) {
                if (argc > 2 && strcmp(argv[2], "sandboxed") == 0) {
                    struct sock_filter allow[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
                    struct sock_fprog prog = { 1, allow };
                    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
                        perror("seccomp"); return 2;
                    }
                }
                int worker = argc > 2 && strcmp(argv[2], "worker") == 0;
                if (worker) {
                    porter_sandbox box = { 0 };
                    box.plugin_fd = -1;
                    box.home = getenv("HOME");
                    char report[512] = "";
                    if (porter_worker_sandbox(&box, report, sizeof report) < 0) { perror("porter_worker_sandbox"); return 2; }
                }
                int fd = socket(AF_UNIX, SOCK_STREAM, 0);
                if (fd < 0 && worker) { printf("BLOCKED socket: %s\\n", strerror(errno)); return 0; }
                struct sockaddr_un a = { .sun_family = AF_UNIX };
                strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
                if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
                    if (worker) { printf("BLOCKED connect: %s\\n", strerror(errno)); return 0; }
                    perror("connect"); return 3;
                }
                unsigned char hello[] = { 0, 0, 0, 23, 1, 'P','O','R','T','E','R','-','I','P','C', 0, 1, 0, 1, 7, 'p','o','r','t','e','r','d' };
                if (write(fd, hello, sizeof hello) != (ssize_t)sizeof hello) { perror("write"); return 4; }
                unsigned char head[5], body[4096];
                if (readn(fd, head, 5) != 0) { printf("CLOSED\\n"); return 0; }
                unsigned n = ((unsigned)head[0] << 24 | (unsigned)head[1] << 16 | (unsigned)head[2] << 8 | head[3]) - 1;
                if (n >= sizeof body || readn(fd, body, n) != 0) { printf("BAD FRAME\\n"); return 5; }
                body[n] = 0;
                if (head[4] == 4) printf("REFUSED %s\\n", (char *)body); else printf("ANSWERED %d\\n", head[4]);
                return 0;
            }
            """.utf8).write(to: URL(fileURLWithPath: source))
        let ipc = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/CPorterIPC").path
        try runChecked("/usr/bin/cc", ["-O1", "-Werror=implicit-function-declaration", "-I", ipc + "/include", "-o", binary, source, ipc + "/worker.c"])
        return binary
    }

    /// Sandboxed code (a seccomp filter + no_new_privs, as porter-plugin-worker puts on
    /// itself) connects to porterd's socket: refused before the handshake, with the reason.
    /// The same program unconfined is served (the refusal is about the sandbox).
    func testASandboxedProcessIsRefused() throws {
        let session = Session(configuration: .background(identifier: "owner"), delegate: BackgroundRecorder())
        defer { session.finishTasksAndInvalidate() }
        XCTAssertTrue(eventually { FileManager.default.fileExists(atPath: socket) })
        let client = try sandboxedClient()
        let confined = try runProcess(client, [socket, "sandboxed"])
        XCTAssertEqual(confined.status, 0, confined.stdout + confined.stderr)
        XCTAssertTrue(confined.stdout.hasPrefix("REFUSED") && confined.stdout.contains("sandboxed"), confined.stdout)
        XCTAssertTrue(daemonLog.contains("porterd does not act for sandboxed code"), daemonLog)
        // The plugin worker's own sandbox: refused by porterd, or kept from the socket by
        // the sandbox itself; never served.
        let worker = try runProcess(client, [socket, "worker"])
        XCTAssertEqual(worker.status, 0, worker.stdout + worker.stderr)
        XCTAssertTrue(worker.stdout.hasPrefix("REFUSED") || worker.stdout.hasPrefix("BLOCKED"), worker.stdout + worker.stderr)
        let free = try runProcess(client, [socket])
        XCTAssertEqual(free.stdout, "ANSWERED 1\n", free.stdout + free.stderr)
    }

    /// A client attaches to a new session with a launch command that runs a shell: porterd
    /// does not record it (a launch command may only run the attaching program itself), so
    /// when the session's task ends with nobody holding it, nothing runs.
    func testALaunchCommandMayOnlyRunTheAttachingProgram() throws {
        let pwned = home + "/pwned.txt"
        var config = SessionConfiguration.background(identifier: "shell")
        config.launchCommand = ["/bin/sh", "-c", "echo pwned >> '\(pwned)'"]
        let session = Session(configuration: config, delegate: BackgroundRecorder())
        let task = session.downloadTask(with: URL(string: nginx.http + "/medium.bin")!)
        task.resume()
        session.finishTasksAndInvalidate()
        XCTAssertTrue(eventually { daemonLog.contains("session shell: events wait and no process holds it") }, daemonLog)
        XCTAssertFalse(daemonLog.contains("ran [\"/bin/sh\""), daemonLog)
        XCTAssertTrue(daemonLog.contains("a launch command may only run the attaching program itself"), daemonLog)
        XCTAssertFalse(FileManager.default.fileExists(atPath: pwned))
    }

    /// The application (BackgroundApp) set its session's launch command; another client
    /// then attaches to that session with a shell command and lets go. When the task ends,
    /// porterd runs the application's command, not the later client's.
    func testALaterClientCannotChangeTheLaunchCommand() throws {
        let marks = home + "/woken.txt", pwned = home + "/pwned.txt"
        let app = try runProcess(backgroundApp, ["--wake", marks, "owned", nginx.http + "/slow/medium.bin"])
        XCTAssertEqual(app.status, 0, app.stdout + app.stderr)
        var config = SessionConfiguration.background(identifier: "owned")
        config.launchCommand = ["/bin/sh", "-c", "echo pwned >> '\(pwned)'"]
        let intruder = Session(configuration: config, delegate: BackgroundRecorder())
        XCTAssertEqual(intruder.allTasks.count, 1, "the app's task is still running while the intruder holds the session")
        intruder.finishTasksAndInvalidate()
        XCTAssertTrue(eventually { (try? String(contentsOfFile: marks, encoding: .utf8)) == "owned\n" }, daemonLog)
        XCTAssertFalse(FileManager.default.fileExists(atPath: pwned))
        XCTAssertTrue(daemonLog.contains("may not change the launch command"), daemonLog)
    }

    /// A raw client holding session B asks for session A's tasks and cancels A's task by
    /// its number: the list is refused and the cancel does nothing; A's download finishes.
    func testAClientOfOneSessionCannotListOrControlAnother() throws {
        let recorder = BackgroundRecorder()
        let a = Session(configuration: .background(identifier: "victim"), delegate: recorder)
        let task = a.downloadTask(with: URL(string: nginx.http + "/slow/medium.bin")!)
        task.resume()
        let c = try Channel.connect(path: socket)
        _ = try c.greet(BackgroundProtocol.hello)
        try c.send(message: BackgroundClientMessage.attach(session: "other", launchCommand: nil))
        try c.send(message: BackgroundClientMessage.list(session: "victim", reference: 1))
        try c.send(message: BackgroundClientMessage.list(session: nil, reference: 2))
        try c.send(message: BackgroundClientMessage.control(task: task.taskIdentifier, .cancel))
        try c.send(message: BackgroundClientMessage.describe(task: task.taskIdentifier, "renamed by another session"))
        try c.send(message: BackgroundClientMessage.ping(reference: 3))
        var answers: [String] = []
        var listed: [BackgroundTaskSnapshot] = []
        loop: while true {
            switch try BackgroundProtocol.receive(on: c) {
            case .refused(1, let message): answers.append("refused: \(message)")
            case .tasks(let r, let tasks), .taskPage(let r, let tasks):
                if r == 1 { answers.append("listed victim's") }
                if r == 1 || r == 2 { listed += tasks }
            case .pong(3): break loop
            default: continue
            }
        }
        c.close()
        XCTAssertEqual(answers, ["refused: a connection lists only the tasks of its own session"])
        XCTAssertTrue(listed.isEmpty, "\(listed)")
        XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        XCTAssertNil(recorder.completions[task.taskIdentifier] ?? nil, "the other session's cancel did not reach the task")
        XCTAssertEqual(recorder.files[task.taskIdentifier]?.count, NginxFixture.mediumSize)
        let after = try c2list("victim")
        XCTAssertFalse(after.contains { $0.taskDescription == "renamed by another session" })
        a.finishTasksAndInvalidate()
    }

    /// The tasks of `session` as `porter jobs SESSION` sees them.
    private func c2list(_ session: String) throws -> [BackgroundTaskSnapshot] {
        let c = try Channel.connect(path: socket)
        defer { c.close() }
        _ = try c.greet(BackgroundProtocol.hello)
        try c.send(message: BackgroundClientMessage.watch(session: session))
        try c.send(message: BackgroundClientMessage.list(session: nil, reference: 1))
        var all: [BackgroundTaskSnapshot] = []
        while true {
            switch try BackgroundProtocol.receive(on: c) {
            case .taskPage(1, let page): all += page
            case .tasks(1, let last): return all + last
            default: continue
            }
        }
    }

    /// Resume data names a file of the user's outside porterd's partial folder (and, a
    /// second time, a link inside it that leads out): porterd neither moves nor appends to
    /// it; the task starts from the beginning and delivers the resource alone.
    func testForgedResumeDataNamingAnotherFileIsIgnored() throws {
        let url = nginx.http + "/medium.bin"
        let head = try runProcess("/usr/bin/curl", ["-sI", url])
        let etag = head.stdout.split(separator: "\r\n").first { $0.lowercased().hasPrefix("etag:") }.map { String($0.dropFirst(5)).trimmingCharacters(in: .whitespaces) }
        let secret = home + "/secret.txt"
        let secretText = Data(String(repeating: "the user's secret\n", count: 100).utf8)
        try secretText.write(to: URL(fileURLWithPath: secret))
        let partials = home + "/state/porter/partial"
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: "forged"), delegate: recorder)
        XCTAssertTrue(FileManager.default.fileExists(atPath: partials))
        let link = partials + "/task-999.part.resume"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: secret)
        for named in [secret, link] {
            let forged = ResumeData(url: URL(string: url)!, method: "GET", headers: [], validator: etag, bytesReceived: Int64(secretText.count),
                                    expectedTotalBytes: Int64(NginxFixture.mediumSize), partialFilePath: named).encoded()
            let task = session.downloadTask(withResumeData: forged)
            task.resume()
            while recorder.completions[task.taskIdentifier] == nil {
                XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
            }
            XCTAssertNil(recorder.completions[task.taskIdentifier] ?? nil, named)
            XCTAssertEqual(recorder.files[task.taskIdentifier], Data((0..<NginxFixture.mediumSize).map { NginxFixture.bigByte($0) }), named)
            XCTAssertEqual(try? Data(contentsOf: URL(fileURLWithPath: secret)), secretText, "the named file is untouched (\(named))")
        }
        XCTAssertTrue(daemonLog.contains("not a partial file porterd kept"), daemonLog)
        session.finishTasksAndInvalidate()
    }

    /// With XDG_RUNTIME_DIR unset, the rendezvous is in the user's state folder, never
    /// under /tmp (which sandboxed code may write).
    func testTheRendezvousIsNeverUnderTmp() throws {
        let env = ["HOME": "/home/someone"]
        XCTAssertEqual(BackgroundProtocol.runtimeFolder(environment: env), "/home/someone/.local/state/porter/run")
        XCTAssertEqual(BackgroundProtocol.socketPath(environment: ["XDG_STATE_HOME": "/srv/state"]), "/srv/state/porter/run/porterd.sock")
        XCTAssertNil(BackgroundProtocol.runtimeFolder(environment: [:]))
    }

    /// An impostor got to the socket first (it binds porterd.sock and speaks the protocol):
    /// it reports a finished download at a file of the user's. The app neither hands that
    /// file to its delegate nor deletes it; the task fails instead.
    func testAnImpostorDaemonCannotMakeTheAppDeleteAFile() throws {
        let victim = home + "/precious.txt"
        try Data("keep me\n".utf8).write(to: URL(fileURLWithPath: victim))
        try FileManager.default.createDirectory(atPath: home + "/run/porter", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let listener = try Listener(path: socket)
        defer { listener.close() }
        let url = URL(string: "http://127.0.0.1:9/x")!
        let impostor = Thread {
            guard let c = listener.accept() else { return }
            _ = try? c.answer(BackgroundProtocol.hello)
            guard case .attach(let session, _)? = try? c.receive(BackgroundClientMessage.self) else { return }
            let snapshot = BackgroundTaskSnapshot(id: 7, session: session, kind: .download, url: url, taskDescription: nil, state: "running",
                                                  received: 8, expected: 8, sent: 0, retries: 0, nextAttempt: nil, statusCode: 200,
                                                  errorCode: nil, errorMessage: nil, destination: nil)
            try? c.send(message: BackgroundDaemonMessage.attached(session: session, tasks: [snapshot]))
            try? c.send(message: BackgroundDaemonMessage.event(BackgroundEvent(sequence: 1, task: 7, kind: .finishedDownloading, file: victim, statusCode: 200)))
            try? c.send(message: BackgroundDaemonMessage.event(BackgroundEvent(sequence: 2, task: 7, kind: .completed, statusCode: 200)))
            try? c.send(message: BackgroundDaemonMessage.eventsSent)
            while (try? c.receive(BackgroundClientMessage.self)) != nil {}
        }
        impostor.start()
        let recorder = BackgroundRecorder()
        let session = Session(configuration: .background(identifier: "fooled"), delegate: recorder)
        XCTAssertEqual(recorder.completed.wait(timeout: .now() + 120), .success)
        XCTAssertNil(recorder.files[7] ?? nil, "the impostor's file was not handed to the delegate")
        XCTAssertEqual(try? Data(contentsOf: URL(fileURLWithPath: victim)), Data("keep me\n".utf8), "not deleted")
        let error = recorder.completions[7] ?? nil
        XCTAssertTrue(error?.message.contains("not in porterd's own folder") == true, "\(String(describing: error))")
        session.invalidateAndCancel()
    }

    /// Sandboxed code got to the socket first (XDG_RUNTIME_DIR or the state folder granted
    /// to it by mistake): a C program under a seccomp filter with no_new_privs binds
    /// porterd.sock and answers like porterd. The app's session checks who listens and
    /// hangs up before its hello: the impostor never hears an attach (nor any login).
    func testASandboxedImpostorAtTheSocketIsNotTalkedTo() throws {
        let source = home + "/impostor.c", binary = home + "/impostor", out = home + "/impostor.out"
        try Data("""
            #include <linux/filter.h>
            #include <linux/seccomp.h>
            #include <stdio.h>
            #include <string.h>
            #include <sys/prctl.h>
            #include <sys/socket.h>
            #include <sys/un.h>
            #include <unistd.h>
            static int readn(int fd, unsigned char *b, size_t n) {
                size_t got = 0;
                while (got < n) { ssize_t r = read(fd, b + got, n - got); if (r <= 0) return -1; got += (size_t)r; }
                return 0;
            }
            static void say(const char *path, const char *text) {
                /* Whole or not at all: the test reads the file as soon as it exists. */
                char tmp[4300];
                snprintf(tmp, sizeof tmp, "%s.tmp", path);
                FILE *f = fopen(tmp, "w"); if (f) { fputs(text, f); fclose(f); rename(tmp, path); }
            }
            int main(int argc, char **argv) {
                struct sock_filter allow[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
                struct sock_fprog prog = { 1, allow };
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return 2;
                int l = socket(AF_UNIX, SOCK_STREAM, 0);
                struct sockaddr_un a = { .sun_family = AF_UNIX };
                strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
                if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 4) != 0) return 3;
                char ready[4200];
                snprintf(ready, sizeof ready, "%s.ready", argv[2]);
                say(ready, "ready");
                int c = accept(l, NULL, NULL);
                unsigned char head[5], body[65536];
                if (readn(c, head, 5) != 0) { say(argv[2], "EOF before hello"); return 0; }
                unsigned n = ((unsigned)head[0] << 24 | (unsigned)head[1] << 16 | (unsigned)head[2] << 8 | head[3]) - 1;
                if (n >= sizeof body || readn(c, body, n) != 0) { say(argv[2], "bad hello"); return 0; }
                unsigned char hello[] = { 0, 0, 0, 23, 1, 'P','O','R','T','E','R','-','I','P','C', 0, 1, 0, 1, 7, 'p','o','r','t','e','r','d' };
                if (write(c, hello, sizeof hello) != (ssize_t)sizeof hello) return 4;
                if (readn(c, head, 5) != 0) { say(argv[2], "EOF after hello"); return 0; }
                char text[64];
                snprintf(text, sizeof text, "GOT kind %d", head[4]);
                say(argv[2], text);
                return 0;
            }
            """.utf8).write(to: URL(fileURLWithPath: source))
        try runChecked("/usr/bin/cc", ["-O1", "-Werror=implicit-function-declaration", "-o", binary, source])
        try FileManager.default.createDirectory(atPath: home + "/run/porter", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let impostor = try startProcess(binary, [socket, out])
        defer { if impostor.isRunning { impostor.terminate() } }
        XCTAssertTrue(eventually { FileManager.default.fileExists(atPath: out + ".ready") })
        let session = Session(configuration: .background(identifier: "phished"), delegate: BackgroundRecorder())
        defer { session.invalidateAndCancel() }
        XCTAssertTrue(eventually { FileManager.default.fileExists(atPath: out) })
        XCTAssertEqual(try String(contentsOfFile: out, encoding: .utf8), "EOF before hello")
    }

    /// A journal from before launch commands had owners holds a launch command that any
    /// client could have set (a shell): porterd opens it (adding the column) and does not
    /// run that command when the session's task ends with nobody holding it.
    func testAnUnownedLaunchCommandFromAnOlderJournalIsNotRun() throws {
        let pwned = home + "/pwned.txt"
        try FileManager.default.createDirectory(atPath: home + "/state/porter", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let script = """
            import json, sqlite3, sys
            db = sqlite3.connect(sys.argv[1])
            db.executescript(
                "CREATE TABLE tasks(id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,"
                " received INTEGER NOT NULL DEFAULT 0, expected INTEGER NOT NULL DEFAULT -1, sent INTEGER NOT NULL DEFAULT 0, validator TEXT,"
                " partial TEXT, retries INTEGER NOT NULL DEFAULT 0, next_attempt REAL, status INTEGER, error_code TEXT, error_message TEXT,"
                " created REAL NOT NULL, first_attempt REAL);"
                "CREATE TABLE events(seq INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL, task INTEGER NOT NULL, kind TEXT NOT NULL,"
                " file TEXT, status INTEGER, error_code TEXT, error_message TEXT);"
                "CREATE INDEX events_by_session ON events(session, seq);"
                "CREATE TABLE sessions(id TEXT PRIMARY KEY, launch TEXT, launched INTEGER NOT NULL DEFAULT 0);")
            db.execute("INSERT INTO sessions(id, launch) VALUES ('legacy', ?)", (json.dumps(["/bin/sh", "-c", "echo pwned > " + sys.argv[2]]),))
            db.commit()
            """
        let made = try runProcess("/usr/bin/python3", ["-c", script, home + "/state/porter/porterd.sqlite", pwned])
        XCTAssertEqual(made.status, 0, made.stderr)
        var env = daemonHome.environment.mapValues { Optional($0) }
        env.merge(withoutProxies) { a, _ in a }
        let queued = try runProcess(porterBinary, ["--background", "legacy", "-o", home + "/l.bin", nginx.http + "/medium.bin"], environment: env)
        XCTAssertEqual(queued.status, 0, queued.stderr)
        XCTAssertTrue(eventually { daemonLog.contains("session legacy: events wait and no process holds it") || daemonLog.contains("ran [") }, daemonLog)
        XCTAssertFalse(daemonLog.contains("ran [\"/bin/sh\""), daemonLog)
        XCTAssertFalse(FileManager.default.fileExists(atPath: pwned))
    }

    /// `porter --background` and `porter jobs` print a URL's password masked.
    func testTheCLIMasksAPasswordInTheURL() throws {
        var env = daemonHome.environment.mapValues { Optional($0) }
        env.merge(withoutProxies) { a, _ in a }
        let target = nginx.http.replacingOccurrences(of: "http://", with: "http://user:hunter2@") + "/medium.bin"
        let queued = try runProcess(porterBinary, ["--background", "masked", "-o", home + "/m.bin", target], environment: env)
        XCTAssertEqual(queued.status, 0, queued.stderr)
        XCTAssertFalse(queued.stdout.contains("hunter2"), queued.stdout)
        XCTAssertTrue(queued.stdout.contains("user:***@"), queued.stdout)
        let jobs = try runProcess(porterBinary, ["jobs", "masked"], environment: env)
        XCTAssertEqual(jobs.status, 0, jobs.stderr)
        XCTAssertFalse(jobs.stdout.contains("hunter2"), jobs.stdout)
        XCTAssertTrue(jobs.stdout.contains("user:***@"), jobs.stdout)
        let other = try runProcess(porterBinary, ["jobs", "elsewhere"], environment: env)
        XCTAssertFalse(other.stdout.contains("masked"), "another session's listing shows none of its tasks: \(other.stdout)")
    }
}
