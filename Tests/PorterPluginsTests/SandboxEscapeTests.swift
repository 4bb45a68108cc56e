import Foundation
import Porter
import PorterTestSupport
import XCTest

/// A hostile plugin against the worker's sandbox (issue 21): each test plays one escape
/// through the `porter` CLI (isolated, as users run it) with the test plugin's attack
/// routes, and an in-process control shows the move works where there is no sandbox.
final class SandboxEscapeTests: XCTestCase {
    nonisolated(unsafe) static var folder = URL(fileURLWithPath: "/")

    override class func setUp() {
        super.setUp()
        do {
            folder = try PluginFixture.folder()
            try PluginFixture.build("ptest.so", in: folder)
        } catch {
            print("fixture failed: \(error)")
        }
    }

    private func porter(_ args: [String], inProcess: Bool = false, env: [String: String?] = [:]) throws -> ProcessResult {
        var environment: [String: String?] = ["PORTER_PLUGIN_PATH": nil]
        for (k, v) in env { environment[k] = v }
        return try runProcess(porterBinary, ["--plugin-path", Self.folder.path] + (inProcess ? ["--plugins-in-process"] : []) + args,
                              environment: environment)
    }

    /// A temporary folder outside both HOME and /tmp (Porter's folders may be anywhere).
    private func varTmpFolder() throws -> String {
        let dir = "/var/tmp/porter-sandbox-test-\(getpid())-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        return dir
    }

    /// A listening Unix-domain socket at `path` (as porterd's is).
    private func unixListener(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        XCTAssertLessThan(bytes.count, MemoryLayout.size(ofValue: address.sun_path))
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0, listen(fd, 8) == 0 else { throw PorterError(.cannotConnectToHost, "cannot listen on \(path)") }
        return fd
    }

    /// Item 1: a sandboxed plugin with no network reached porterd by connecting to its
    /// socket's path. Now socket(AF_UNIX) fails in the worker (and io_uring, which would
    /// make the socket where seccomp cannot see it).
    func testAPluginCannotConnectToAUnixSocketByPath() throws {
        let dir = try varTmpFolder()
        let path = dir + "/porterd.sock"
        let listener = try unixListener(path)
        defer { close(listener) }
        let isolated = try porter(["ptest://h/unix?\(path)"])
        XCTAssertEqual(isolated.stdout, "unix failed: Operation not permitted", isolated.stderr)
        let control = try porter(["ptest://h/unix?\(path)"], inProcess: true)
        XCTAssertEqual(control.stdout, "unix connected", "in process the plugin reaches the socket (the control): \(control.stderr)")
        let uring = try porter(["ptest://h/io-uring"])
        XCTAssertEqual(uring.stdout, "io_uring failed: Operation not permitted", uring.stderr)
    }

    /// Parses "name=result ..." of the /meta route.
    private func results(_ text: String) -> [String: String] {
        Dictionary(text.split(separator: " ").compactMap { pair -> (String, String)? in
            let parts = pair.split(separator: "=", maxSplits: 1)
            return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
        }, uniquingKeysWith: { a, _ in a })
    }

    private func checkMetadataRefused(_ result: ProcessResult, file: StaticString = #filePath, line: UInt = #line) {
        let r = results(result.stdout)
        let changes = ["chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat", "setxattr", "lsetxattr", "removexattr",
                       "lremovexattr", "utime", "utimes", "futimesat", "utimensat",
                       "fchmod", "fchown", "fsetxattr", "fremovexattr", "futimens"]
        for name in changes {
            XCTAssertEqual(r[name], "EPERM", "\(name) in \(result.stdout) \(result.stderr)", file: file, line: line)
        }
        XCTAssertEqual(r["getxattr"], "ENOTSUP", result.stdout, file: file, line: line)
        XCTAssertEqual(r["listxattr"], "ENOTSUP", result.stdout, file: file, line: line)
    }

    /// Item 2: the plugin cannot open ~/secret, but it could chmod it 0644 (and the home
    /// folder 0755), set its attributes and times, and as root give it away. Every one of
    /// those calls now fails with EPERM, on paths and on descriptors.
    func testAPluginCannotChangeAFilesModeOwnerAttributesOrTimes() throws {
        let home = try XCTUnwrap(ProcessInfo.processInfo.environment["HOME"])
        let secret = home + "/.porter-test-meta-\(UUID().uuidString.prefix(8))"
        try "private".write(toFile: secret, atomically: false, encoding: .utf8)
        chmod(secret, 0o600)
        defer { unlink(secret) }
        let other = Self.folder.deletingLastPathComponent().appendingPathComponent("other").path
        try "other".write(toFile: other, atomically: false, encoding: .utf8)
        chmod(other, 0o600)
        var before = stat(), homeBefore = stat()
        XCTAssertEqual(stat(secret, &before), 0)
        XCTAssertEqual(stat(home, &homeBefore), 0)
        // Should the attack succeed (the old code), the home folder gets its own back.
        let (homeMode, homeUID, homeGID) = (homeBefore.st_mode & 0o7777, homeBefore.st_uid, homeBefore.st_gid)
        defer {
            _ = chown(home, homeUID, homeGID)
            _ = chmod(home, homeMode)
        }

        let isolated = try porter(["ptest://h/meta?\(secret)&\(other)"])
        checkMetadataRefused(isolated)
        let homeAttempt = try porter(["ptest://h/meta?\(home)"])
        XCTAssertEqual(results(homeAttempt.stdout)["chmod"], "EPERM", homeAttempt.stdout)
        var after = stat(), homeAfter = stat()
        XCTAssertEqual(stat(secret, &after), 0)
        XCTAssertEqual(stat(home, &homeAfter), 0)
        XCTAssertEqual(after.st_mode, before.st_mode)
        XCTAssertEqual(after.st_uid, before.st_uid)
        XCTAssertEqual(after.st_mtim.tv_sec, before.st_mtim.tv_sec)
        XCTAssertEqual(homeAfter.st_mode, homeBefore.st_mode)

        // The control: in process the same calls succeed (and change the file).
        let control = try porter(["ptest://h/meta?\(secret)&\(other)"], inProcess: true)
        XCTAssertEqual(results(control.stdout)["chmod"], "ok", control.stdout)
        XCTAssertEqual(results(control.stdout)["utimensat"], "ok", control.stdout)
        var changed = stat()
        XCTAssertEqual(stat(secret, &changed), 0)
        XCTAssertEqual(changed.st_mode & 0o777, 0o644, "the control changed the mode")
    }

    /// Item 2, as another user: the same refusals for an unprivileged uid (setpriv).
    func testAnotherUsersPluginCannotChangeMetadataEither() throws {
        let base = try varTmpFolder()
        let home = base + "/home"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        let secret = home + "/secret"
        try "private".write(toFile: secret, atomically: false, encoding: .utf8)
        XCTAssertEqual(chown(home, 65534, 65534), 0)
        XCTAssertEqual(chown(secret, 65534, 65534), 0)
        chmod(home, 0o700)
        chmod(secret, 0o600)
        let worker = URL(fileURLWithPath: porterBinary).deletingLastPathComponent().appendingPathComponent("porter-plugin-worker").path
        let r = try runProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--",
                                                    porterBinary, "--plugin-path", Self.folder.path, "ptest://h/meta?\(secret)&\(secret)"],
                               environment: ["HOME": home, "PORTER_PLUGIN_PATH": nil, "XDG_RUNTIME_DIR": nil,
                                             "PORTER_PLUGIN_WORKER": worker])
        // The plugin cannot open the secret for its descriptor calls: the path calls are the move.
        let res = results(r.stdout)
        for name in ["chmod", "fchmodat", "chown", "setxattr", "utimensat"] {
            XCTAssertEqual(res[name], "EPERM", "\(name): \(r.stdout) \(r.stderr)")
        }
        var st = stat()
        XCTAssertEqual(stat(secret, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        let caps = try runProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--",
                                                       porterBinary, "--plugin-path", Self.folder.path, "ptest://h/caps"],
                                  environment: ["HOME": home, "PORTER_PLUGIN_PATH": nil, "PORTER_PLUGIN_WORKER": worker])
        XCTAssertTrue(caps.stdout.contains("CapEff:\t0000000000000000"), caps.stdout + caps.stderr)
    }

    /// Item 2: a worker started by root holds no capability at all, bounding set included.
    func testARootWorkerHoldsNoCapabilities() throws {
        let isolated = try porter(["ptest://h/caps"])
        for line in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            XCTAssertTrue(isolated.stdout.contains("\(line):\t0000000000000000"), "\(line): \(isolated.stdout) \(isolated.stderr)")
        }
        if geteuid() == 0 {
            let control = try porter(["ptest://h/caps"], inProcess: true)
            XCTAssertFalse(control.stdout.contains("CapEff:\t0000000000000000"), "as root in process (the control): \(control.stdout)")
        }
    }

    /// Runs `porter ARGS` (for each list) under `script`, so porter's stdin, stdout and
    /// stderr are a pseudo-terminal; what the terminal showed.
    private func underATerminal(_ runs: [[String]], inProcess: Bool = false) throws -> String {
        func quote(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let porterCommand = ([porterBinary, "--plugin-path", Self.folder.path] + (inProcess ? ["--plugins-in-process"] : []))
            .map(quote).joined(separator: " ")
        // "$(tty)" is the terminal's own name, given to the plugin to open.
        let script = runs.map { args in porterCommand + " " + args.map { quote($0).replacingOccurrences(of: "@TTY@", with: "'\"$(tty)\"'") }
            .joined(separator: " ") + "; echo" }.joined(separator: "; ")
        let r = try runProcess("/usr/bin/script", ["-qec", script, "/dev/null"], environment: ["PORTER_PLUGIN_PATH": nil])
        return r.stdout
    }

    /// Item 7: the worker inherited the program's stderr, the user's terminal, and read
    /// what the user typed through /proc/self/fd/2. Now its stderr is a pipe the host
    /// copies with control characters escaped, and no terminal device is open to it.
    func testAPluginCannotReachTheUsersTerminal() throws {
        let shown = try underATerminal([["ptest://h/terminal"], ["ptest://h/terminal?@TTY@"], ["ptest://h/terminal?/dev/tty"],
                                        ["ptest://h/read?/dev/console"], ["ptest://h/stderr"]])
        // (A terminal ends lines with CR LF, one Character in Swift.)
        let lines = shown.replacingOccurrences(of: "\r", with: "").split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains("fd2-tty=0 open=ok tty=0"), "stderr is not the terminal: \(shown)")
        XCTAssertTrue(lines.contains("fd2-tty=0 open=Permission denied"), "the terminal by name: \(shown)")
        XCTAssertFalse(shown.contains("tty=1"), shown)
        XCTAssertTrue(lines.contains("read failed: Permission denied"), "/dev/console: \(shown)")
        // What the plugin wrote to stderr reached the terminal escaped, and cut.
        XCTAssertFalse(shown.contains("\u{1B}]0;pwned"), "a raw escape sequence reached the terminal")
        XCTAssertTrue(shown.contains("\\u{1B}]0;pwned\\u{7} stderr-from-plugin"), shown)
        // (The body, "wrote", may land on the same line: the host copies stderr meanwhile.)
        let long = try XCTUnwrap(lines.first { $0.contains("LLLL") })
        let start = try XCTUnwrap(long.range(of: "porter: plugin")?.lowerBound)
        let copied = long[start...]
        XCTAssertLessThan(copied.count, 1200, "a line of the plugin's is bounded")
        XCTAssertTrue(copied.contains("L…"), String(copied))

        // The control: in process, the plugin holds the terminal.
        let control = try underATerminal([["ptest://h/terminal"], ["ptest://h/terminal?@TTY@"]], inProcess: true)
        XCTAssertTrue(control.contains("fd2-tty=1 open=ok tty=1"), control)
    }

    /// What a plugin writes to stderr just before its load ends is on porter's stderr when
    /// porter exits: the host copies the worker's stderr pipe up to the load's end before
    /// it reports the end (it was copied by a thread that porter's exit could cut short,
    /// so under load the last lines, or all of them, were lost).
    func testAPluginsLastStderrLinesOutliveTheProgram() throws {
        for _ in 0..<5 {
            let r = try porter(["ptest://h/stderr-burst"])
            XCTAssertEqual(r.status, 0, r.stderr)
            XCTAssertEqual(r.stdout, "burst")
            let lines = r.stderr.split(separator: "\n")
            XCTAssertEqual(lines.filter { $0.hasSuffix("b…") || $0.hasSuffix("bbb") }.count, 40, r.stderr)
            XCTAssertTrue(lines.last?.hasSuffix("burst-end") == true, "the last line is there: \(r.stderr.suffix(300))")
        }
    }

    /// Item 9: with the XDG folders outside HOME (here one under /var/tmp, one under
    /// /tmp, where workers may write), Porter's stores were readable by plugins. Now the
    /// worker's ruleset never grants them, wherever they are; what lies beside them stays
    /// readable.
    func testPorterFoldersOutsideHomeAreClosedToPlugins() throws {
        let data = try varTmpFolder() + "/data"
        let cache = Self.folder.deletingLastPathComponent().appendingPathComponent("cache").path
        let state = Self.folder.deletingLastPathComponent().appendingPathComponent("state").path
        let cookies = data + "/porter/cookies.sqlite-wal"
        let cached = cache + "/porter/http/entry"
        let journal = state + "/porter/porterd.sqlite"
        let beside = data + "/other-app/notes"
        for file in [cookies, cached, journal, beside] {
            try FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try "session=secret-cookie".write(toFile: file, atomically: false, encoding: .utf8)
        }
        let env: [String: String?] = ["XDG_DATA_HOME": data, "XDG_CACHE_HOME": cache, "XDG_STATE_HOME": state]
        for file in [cookies, cached, journal] {
            let isolated = try porter(["ptest://h/read?\(file)"], env: env)
            XCTAssertEqual(isolated.stdout, "read failed: Permission denied", "\(file): \(isolated.stderr)")
            let control = try porter(["ptest://h/read?\(file)"], inProcess: true, env: env)
            XCTAssertEqual(control.stdout, "read 21", "in process (the control): \(control.stderr)")
        }
        let other = try porter(["ptest://h/read?\(beside)"], env: env)
        XCTAssertEqual(other.stdout, "read 21", "beside Porter's folder: \(other.stderr)")
    }

    /// Item 6: `porter plugins` shows what each plugin may reach.
    func testPorterPluginsShowsDeclaredPathsProfileAndSandbox() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("paths.so", in: folder, defines: ["SCHEME=\"ppaths\"", "READ_PATH=\"~/.ssh\"",
                                                                 "WRITE_PATH=\"~/.config/ppaths/state\""])
        let r = try runProcess(porterBinary, ["plugins", "--plugin-path", folder.path], environment: ["PORTER_PLUGIN_PATH": nil])
        XCTAssertTrue(r.stdout.contains("reads: ~/.ssh\n"), r.stdout)
        XCTAssertTrue(r.stdout.contains("writes: ~/.config/ppaths/state\n"), r.stdout)
        XCTAssertTrue(r.stdout.contains("profile: no network\n"), r.stdout)
        XCTAssertTrue(r.stdout.contains("sandbox: limits,no-new-privs,landlock-files"), r.stdout)
        XCTAssertTrue(r.stdout.contains("seccomp,no-capabilities,no-terminal"), r.stdout)
    }
}
