import Foundation
import Porter
import PorterPlugins
import PorterTestSupport
import XCTest

/// What crosses the plugin boundary toward credentials, and isolation for an application
/// built with plain `swift build` (issue 21, items 3, 4 and 14). Each test plays a hostile
/// plugin's move (Fixtures/hostileplugin.c) in process and in a worker.
final class BoundaryTests: XCTestCase {
    nonisolated(unsafe) static var folder = URL(fileURLWithPath: "/")
    static let source = PluginFixture.root.appendingPathComponent("Fixtures/hostileplugin.c").path

    override class func setUp() {
        super.setUp()
        do {
            folder = try PluginFixture.folder()
            let out = folder.appendingPathComponent("phish.so").path
            try runChecked("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-I", PluginFixture.include, "-o", out, source, "-lpthread"])
            chmod(out, 0o644)
        } catch {
            print("fixture failed: \(error)")
        }
    }

    /// A registry of its own with the hostile plugin (a fresh worker: its loads are
    /// numbered from 1).
    private func registry(_ mode: PluginMode) throws -> HandlerRegistry {
        let registry = HandlerRegistry()
        var isolation = PluginIsolation.default
        isolation.defaultMode = mode
        let verdicts = PluginLoader(registry: registry, isolation: isolation).loadAll(from: [Self.folder.path])
        let loaded = try XCTUnwrap(verdicts.first?.plugin, "\(verdicts)")
        XCTAssertEqual(loaded.mode, mode)
        return registry
    }

    /// Records each challenge's space and lets the session's default handling answer it
    /// (the stored credential for that space, if any, is what the plugin gets).
    final class Recorder: DataDelegate, @unchecked Sendable {
        let spaces = Locked<[ProtectionSpace]>([])
        func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                  completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
            spaces.withLock { $0.append(challenge.protectionSpace) }
            completion(.performDefaultHandling)
        }
    }

    /// Loads `url` with the hostile plugin, `stored` in the session's credential store.
    private func load(_ url: String, _ mode: PluginMode, stored: [(ProtectionSpace, Credential)])
        async throws -> (body: String, spaces: [ProtectionSpace]) {
        var config = SessionConfiguration.ephemeral
        config.registry = try registry(mode)
        let store = CredentialStore()
        for (space, credential) in stored { store.set(credential, for: space) }
        config.credentialStore = store
        let recorder = Recorder()
        let session = Session(configuration: config, delegate: recorder)
        defer { session.invalidateAndCancel() }
        let (data, _) = try await session.data(from: URL(string: url)!)
        return (String(decoding: data, as: UTF8.self), recorder.spaces.current)
    }

    // MARK: - item 3: the protection space is the load's own

    /// Another host and port of the plugin's own scheme (all a plugin could choose in
    /// process before): the stored credential of `phish://victim.example:99` must not
    /// reach a load of `phish://plugin.example/`.
    private func checkOtherHost(_ mode: PluginMode) async throws {
        let victim = ProtectionSpace(host: "victim.example", port: 99, protocol: "phish", realm: "vault",
                                     authenticationMethod: .default)
        let (body, spaces) = try await load("phish://plugin.example/steal?host=victim.example&port=99&realm=vault&method=0",
                                            mode, stored: [(victim, Credential(user: "victim", password: "victim-secret",
                                                                               persistence: .forSession))])
        XCTAssertTrue(body.hasPrefix("disposition="), "the plugin ran its attack: \(body)")
        XCTAssertFalse(body.contains("victim-secret"), "\(mode): the plugin was handed another host's password: \(body)")
        let space = try XCTUnwrap(spaces.first)
        XCTAssertEqual(space.host, "plugin.example")
        XCTAssertEqual(space.port, 0)
        XCTAssertEqual(space.protocol, "phish")
        XCTAssertEqual(space.realm, "vault", "the realm is the plugin's to choose")
    }

    func testAPluginInProcessCannotNameAnotherHostsSpace() async throws {
        try await checkOtherHost(.inProcess)
    }

    func testAnIsolatedPluginCannotNameAnotherHostsSpace() async throws {
        try await checkOtherHost(.isolated)
    }

    /// The move: a worker writes its own `challenge` message on its socket
    /// naming `ftp://files.example:21` realm `ftp`, and would be handed the stored ftp
    /// password. The host builds the space from its load's URL.
    func testAWorkersForgedChallengeMessageCannotNameAnotherSchemesSpace() async throws {
        let ftp = ProtectionSpace(host: "files.example", port: 21, protocol: "ftp", realm: "ftp", authenticationMethod: .default)
        let (body, spaces) = try await load(
            "phish://plugin.example/wire?load=1&scheme=ftp&host=files.example&port=21&realm=ftp", .isolated,
            stored: [(ftp, Credential(user: "ftpuser", password: "ftp-secret", persistence: .forSession))])
        XCTAssertTrue(body.hasPrefix("disposition="), "the plugin ran its attack: \(body)")
        XCTAssertFalse(body.contains("ftp-secret"), "the worker was handed the stored ftp password: \(body)")
        XCTAssertTrue(spaces.contains { $0.realm == "ftp" }, "the forged challenge reached the application: \(spaces)")
        for space in spaces {
            XCTAssertEqual(space.protocol, "phish", "\(space)")
            XCTAssertEqual(space.host, "plugin.example", "\(space)")
            XCTAssertEqual(space.port, 0, "\(space)")
        }
    }

    /// A worker's hostile data frames (the binary body framing, read straight into the
    /// payload): one announcing more than the host takes in a frame, and one cut short by
    /// the worker's end. Each fails the load with a PorterError that says what the worker
    /// did; the host goes on (the next load gets a new worker).
    func testAnOversizedOrTruncatedDataFrameFromAWorkerIsAPorterError() async throws {
        for (how, says) in [("oversized", "frameTooLarge"), ("truncated", "mid-frame")] {
            do {
                _ = try await load("phish://plugin.example/badframe?load=1&how=\(how)", .isolated, stored: [])
                XCTFail("\(how): the load succeeded")
            } catch let e as PorterError {
                XCTAssertEqual(e.code, .pluginCrashed, "\(how): \(e)")
                XCTAssertTrue(e.message.contains(says), "\(how): \(e.message)")
            }
        }
        let (body, _) = try await load("phish://plugin.example/whoami", .isolated, stored: [])
        XCTAssertTrue(body.hasPrefix("exe="), body)
    }

    /// A plugin's PORTER_AUTH_PASSWORD reaches the application as `.password`, in process
    /// and across the boundary alike.
    func testThePasswordMethodReachesTheDelegateAsPassword() async throws {
        for mode in [PluginMode.inProcess, .isolated] {
            let (_, spaces) = try await load("phish://plugin.example:7070/steal?host=x&port=1&realm=r&method=1", mode, stored: [])
            let space = try XCTUnwrap(spaces.first, "\(mode)")
            XCTAssertEqual(space.authenticationMethod, .password, "\(mode)")
            XCTAssertEqual(space.port, 7070, "\(mode): the URL's port")
        }
    }

    // MARK: - item 4: netrc answers only the loaded URL's host

    /// `porter -n`: a plugin loading `phish://plugin.example/` names `files.example` and
    /// must not get that host's netrc password; the loaded host's own entry still answers.
    func testNetrcAnswersOnlyTheLoadedHost() throws {
        let dir = try PluginFixture.folder("netrc")
        let netrc = dir.appendingPathComponent("netrc").path
        try "machine files.example login ftpuser password netrc-secret\nmachine plugin.example login me password mine\n"
            .write(toFile: netrc, atomically: true, encoding: .utf8)
        chmod(netrc, 0o600)
        for inProcess in [true, false] {
            let args = ["--plugin-path", Self.folder.path, "--netrc-file", netrc] + (inProcess ? ["--plugins-in-process"] : [])
            let stolen = try runProcess(porterBinary, args + ["phish://plugin.example/steal?host=files.example&port=21&realm=ftp&method=1"],
                                        environment: ["PORTER_PLUGIN_PATH": nil])
            XCTAssertTrue(stolen.stdout.hasPrefix("disposition="), "in process: \(inProcess): \(stolen.stdout) \(stolen.stderr)")
            XCTAssertFalse(stolen.stdout.contains("netrc-secret"), "in process: \(inProcess): \(stolen.stdout)")
            let own = try runProcess(porterBinary, args + ["phish://plugin.example/steal?host=files.example&port=21&realm=x&method=1"],
                                     environment: ["PORTER_PLUGIN_PATH": nil])
            XCTAssertTrue(own.stdout.contains("user=me password=mine"),
                          "the loaded host's own netrc entry (in process: \(inProcess)): \(own.stdout) \(own.stderr)")
        }
    }

    // MARK: - item 14: an application built by SwiftPM is its own worker

    static let customScheme = ProcessInfo.processInfo.environment["CUSTOM_SCHEME_BIN"]
        ?? PluginFixture.packageRoot.appendingPathComponent(".build/debug/CustomScheme").path

    /// The example application, alone in a folder (no porter-plugin-worker beside it, as
    /// `swift build` leaves an application of another package), loads the plugin
    /// isolated: its worker is the application's own binary, and a crashing plugin fails
    /// the load instead of killing the application.
    func testAnApplicationWithoutAWorkerBesideItIsItsOwnWorker() throws {
        let dir = try PluginFixture.folder("app")
        let app = dir.appendingPathComponent("CustomScheme").path
        try FileManager.default.copyItem(atPath: Self.customScheme, toPath: app)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.appendingPathComponent("porter-plugin-worker").path))
        // The example bootstraps first thing (as it must), so the plugin comes from the
        // search path.
        let env: [String: String?] = ["PORTER_PLUGIN_PATH": Self.folder.path, "PORTER_PLUGIN_WORKER": nil,
                                      "PORTER_PLUGINS_IN_PROCESS": nil, "PATH": "/usr/bin:/bin"]
        let cli = ["cli"]

        let listed = try runProcess(app, cli + ["plugins"], environment: env)
        XCTAssertTrue(listed.stdout.contains("mode: isolated"), "\(listed.stdout) \(listed.stderr)")

        let who = try runProcess(app, cli + ["phish://h/whoami"], environment: env)
        XCTAssertEqual(who.status, 0, who.stderr)
        XCTAssertTrue(who.stdout.hasPrefix("exe=\(app) pid="), "the worker is the application's binary: \(who.stdout) \(who.stderr)")

        let crash = try runProcess(app, cli + ["phish://h/crash"], environment: env.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 })
        XCTAssertEqual(crash.status, 102, "exit 102 (pluginCrashed), not the plugin's signal: \(crash.stdout) \(crash.stderr)")
        XCTAssertTrue(crash.stderr.contains("SIGSEGV"), crash.stderr)
    }

    /// With no worker at all (no porter-plugin-worker beside or on PATH, and a program that
    /// never made the check that lets it be its own), a plugin file is refused and an
    /// error is logged on stderr; it runs in process only when the program asks.
    func testWithoutAnyWorkerPluginsAreRefusedLoudlyUnlessAskedInProcess() throws {
        let built = PluginFixture.packageRoot.appendingPathComponent(".build/debug/PluginHostApp").path
        let dir = try PluginFixture.folder("bare")
        let app = dir.appendingPathComponent("PluginHostApp").path
        try FileManager.default.copyItem(atPath: built, toPath: app)
        let env: [String: String?] = ["PORTER_PLUGIN_PATH": nil, "PORTER_PLUGIN_WORKER": nil, "PORTER_PLUGINS_IN_PROCESS": nil,
                                      "PATH": "/usr/bin:/bin"]
        let refused = try runProcess(app, [Self.folder.path], environment: env)
        XCTAssertTrue(refused.stdout.hasPrefix("refused") && refused.stdout.contains("not loaded in process without isolation"),
                      refused.stdout)
        XCTAssertTrue(refused.stderr.contains("error") && refused.stderr.contains("phish.so: not loaded"),
                      "a log line on stderr: \(refused.stderr)")
        let asked = try runProcess(app, [Self.folder.path, "--allow-in-process"], environment: env)
        XCTAssertTrue(asked.stdout.hasPrefix("loaded") && asked.stdout.contains("[in-process: in process: no plugin worker"),
                      asked.stdout)
        XCTAssertTrue(asked.stderr.contains("runs in process, unprotected"), asked.stderr)
    }
}
