import Foundation
import Porter
import PorterIPC
import PorterPlugins
import PorterTestSupport
import XCTest

/// A plugin reaches a local service (the user's ssh agent) only as a descriptor the host
/// connects and hands over, only when it declared the need, and never at a place it names
/// (issue 21, item 1; porter_plugin.h `connect_service`, ABI 1.3). Each test plays the
/// hostile plugin (Fixtures/hostileplugin.c) in process and in a worker, against a real
/// ssh-agent or a listening socket that counts who connects.
final class LocalServiceTests: XCTestCase {
    nonisolated(unsafe) static var undeclared = URL(fileURLWithPath: "/")
    nonisolated(unsafe) static var declared = URL(fileURLWithPath: "/")

    override class func setUp() {
        super.setUp()
        do {
            for (defines, name) in [([String](), "undeclared"), (["-DNEEDS=PORTER_NEED_SSH_AGENT"], "declared")] {
                let folder = try PluginFixture.folder(name)
                let out = folder.appendingPathComponent("phish.so").path
                try runChecked("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-I", PluginFixture.include] + defines
                               + ["-o", out, BoundaryTests.source, "-lpthread"])
                chmod(out, 0o644)
                if name == "declared" { declared = folder } else { undeclared = folder }
            }
        } catch {
            print("fixture failed: \(error)")
        }
    }

    private var savedAgent: String?

    override func setUp() {
        super.setUp()
        savedAgent = ProcessInfo.processInfo.environment["SSH_AUTH_SOCK"]
    }

    override func tearDown() {
        if let savedAgent { setenv("SSH_AUTH_SOCK", savedAgent, 1) } else { unsetenv("SSH_AUTH_SOCK") }
        super.tearDown()
    }

    /// A fresh registry (a fresh worker: its loads are numbered from 1) with the plugin in
    /// `folder`.
    private func load(_ url: String, from folder: URL, _ mode: PluginMode) async throws -> String {
        let registry = HandlerRegistry()
        var isolation = PluginIsolation.default
        isolation.defaultMode = mode
        let verdicts = PluginLoader(registry: registry, isolation: isolation).loadAll(from: [folder.path])
        let loaded = try XCTUnwrap(verdicts.first?.plugin, "\(verdicts)")
        XCTAssertEqual(loaded.mode, mode)
        var config = SessionConfiguration.ephemeral
        config.registry = registry
        let session = Session(configuration: config)
        defer { session.invalidateAndCancel() }
        let (data, _) = try await session.data(from: URL(string: url)!)
        return String(decoding: data, as: UTF8.self)
    }

    /// A Unix socket that counts the connections made to it (it never answers them).
    final class Counter {
        let path: String
        private let listener: Listener
        init(_ name: String) throws {
            let dir = try PluginFixture.folder("sock")
            path = dir.appendingPathComponent(name).path
            listener = try Listener(path: path)
            _ = fcntl(listener.fd, F_SETFL, fcntl(listener.fd, F_GETFL) | O_NONBLOCK)
        }
        deinit { listener.close() }

        /// Accepts what is waiting: a connect that returned is queued here, so once the
        /// load is over every connection made during it is counted.
        func drain() -> Int {
            var n = 0
            while true {
                let fd = accept(listener.fd, nil, nil)
                if fd < 0 { return n }
                close(fd)
                n += 1
            }
        }
    }

    /// A real ssh-agent holding one key with a known comment; stopped by the caller.
    private func startAgent() throws -> (pid: pid_t, socket: String) {
        let dir = try PluginFixture.folder("agent")
        let socket = dir.appendingPathComponent("agent.sock").path
        let key = dir.appendingPathComponent("id_ed25519").path
        try runChecked("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "porter-agent-marker", "-f", key])
        let pid = try spawnDaemon("/usr/bin/ssh-agent", ["-D", "-a", socket])
        XCTAssertTrue(eventually(60) { FileManager.default.fileExists(atPath: socket) }, "ssh-agent did not start")
        let add = try runProcess("/usr/bin/ssh-add", ["-q", key], environment: ["SSH_AUTH_SOCK": socket])
        XCTAssertEqual(add.status, 0, add.stderr)
        return (pid, socket)
    }

    // MARK: - a plugin that did not declare the need

    /// It calls connect_service: -1 with PORTER_ERR_UNSUPPORTED_CONFIGURATION (29), and the
    /// host connects nowhere — in process and in a worker.
    func testAPluginThatDidNotDeclareTheAgentGetsNothing() async throws {
        let agent = try Counter("agent.sock")
        setenv("SSH_AUTH_SOCK", agent.path, 1)
        for mode in [PluginMode.inProcess, .isolated] {
            let body = try await load("phish://h/agent?quiet=1", from: Self.undeclared, mode)
            XCTAssertTrue(body.hasPrefix("fd=-1 code=29 "), "\(mode): \(body)")
            XCTAssertTrue(body.contains("without declaring it"), "\(mode): \(body)")
            XCTAssertEqual(agent.drain(), 0, "\(mode): the host connected to the agent for a plugin that did not declare it")
        }
    }

    /// It forges the worker's `connectService` message on its socket (three of them, each
    /// also naming a path of its choosing): the host decides from the probe's description,
    /// not from the worker, so nothing is connected — neither the agent nor the path.
    func testAWorkersForgedServiceRequestGetsNoDescriptor() async throws {
        let agent = try Counter("agent.sock")
        let named = try Counter("named.sock")
        setenv("SSH_AUTH_SOCK", agent.path, 1)
        let body = try await load("phish://h/forge-agent?load=1&n=3&path=\(named.path)", from: Self.undeclared, .isolated)
        // The plugin's own call comes after its forged messages, so they were decided first.
        XCTAssertTrue(body.hasPrefix("fd=-1 code=29 "), body)
        XCTAssertEqual(agent.drain(), 0, "the host connected to the agent for forged requests")
        XCTAssertEqual(named.drain(), 0, "the host connected to a path the plugin named")
    }

    // MARK: - a plugin that declared it

    /// It gets a descriptor to the agent of the HOST's $SSH_AUTH_SOCK (the real agent
    /// answers with its key), in process and in a worker; in a worker, its own
    /// SSH_AUTH_SOCK (set to another socket) changes nothing.
    func testADeclaredPluginGetsTheHostsAgentAndNothingElse() async throws {
        let (pid, socket) = try startAgent()
        // SIGKILL: started from a task's thread, the agent may inherit a mask that blocks
        // SIGTERM (and nothing of it needs a clean exit).
        defer { stopDaemon(pid, signal: SIGKILL) }
        setenv("SSH_AUTH_SOCK", socket, 1)
        for mode in [PluginMode.inProcess, .isolated] {
            let body = try await load("phish://h/agent", from: Self.declared, mode)
            XCTAssertEqual(body, "fd=ok answer=12 keys=1 comment=porter-agent-marker", "\(mode)")
        }
        let decoy = try Counter("decoy.sock")
        let body = try await load("phish://h/agent?setenv=\(decoy.path)", from: Self.declared, .isolated)
        XCTAssertEqual(body, "fd=ok answer=12 keys=1 comment=porter-agent-marker")
        XCTAssertEqual(decoy.drain(), 0, "the host connected to the socket the plugin's environment named")
        // No agent in the host's environment: -1 with PORTER_ERR_RESOURCE_UNAVAILABLE (26).
        unsetenv("SSH_AUTH_SOCK")
        let none = try await load("phish://h/agent", from: Self.declared, .isolated)
        XCTAssertTrue(none.hasPrefix("fd=-1 code=26 "), none)
    }

    /// $SSH_AUTH_SOCK naming a socket another user listens at (a planted "agent", through
    /// setpriv as uid 65534): the host refuses it after connecting, in process and in a
    /// worker, and the plugin gets no descriptor to it.
    func testAnAgentSocketServedByAnotherUserIsRefused() async throws {
        var template = Array("/tmp/porter-foreign-agent-XXXXXX".utf8CString)
        let dir = try XCTUnwrap(mkdtemp(&template).map { String(cString: $0) })
        defer { try? FileManager.default.removeItem(atPath: dir) }
        chmod(dir, 0o777)
        let socket = dir + "/agent.sock"
        let script = """
            import os, socket, sys
            s = socket.socket(socket.AF_UNIX)
            s.bind(sys.argv[1] + ".new")
            s.listen(64)
            os.rename(sys.argv[1] + ".new", sys.argv[1])
            while True:
                c, _ = s.accept()
                c.close()
            """
        let pid = try spawnDaemon("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--",
                                                       "/usr/bin/python3", "-c", script, socket])
        defer { stopDaemon(pid, signal: SIGKILL) }
        XCTAssertTrue(eventually { FileManager.default.fileExists(atPath: socket) }, "the foreign listener never bound its socket")
        setenv("SSH_AUTH_SOCK", socket, 1)
        for mode in [PluginMode.inProcess, .isolated] {
            let body = try await load("phish://h/agent", from: Self.declared, mode)
            XCTAssertTrue(body.hasPrefix("fd=-1 code=26 ") && body.contains("another user"), "\(mode): \(body)")
        }
    }

    /// A plugin that writes to a socket or pipe whose reader is gone gets EPIPE, in a
    /// worker as in a host that ignores SIGPIPE: the worker is not killed by the signal
    /// (which counted as a crash and, three times, disabled the plugin).
    func testAWriteToAClosedPipeFailsInsteadOfKillingTheWorker() async throws {
        let body = try await load("phish://h/sigpipe", from: Self.undeclared, .isolated)
        XCTAssertEqual(body, "write=-1 errno=\(EPIPE)")
    }

    /// Its forged requests, each naming a path, get the agent at most for the load's
    /// budget (16), never the path; the plugin's own request after them is then refused.
    func testForgedRequestsOfADeclaredPluginAreBoundedAndNeverReachItsPath() async throws {
        let agent = try Counter("agent.sock")
        let named = try Counter("named.sock")
        setenv("SSH_AUTH_SOCK", agent.path, 1)
        let body = try await load("phish://h/forge-agent?load=1&n=40&path=\(named.path)", from: Self.declared, .isolated)
        XCTAssertTrue(body.hasPrefix("fd=-1 code=26 ") && body.contains("16 local service connections at most"), body)
        XCTAssertEqual(agent.drain(), 16, "one load's connections to the agent")
        XCTAssertEqual(named.drain(), 0, "the host connected to a path the plugin named")
    }

    /// `porter plugins` shows what a plugin declared.
    func testPorterPluginsShowsTheNeeds() throws {
        let listed = try runProcess(porterBinary, ["plugins", "--plugin-path", Self.declared.path],
                                    environment: ["PORTER_PLUGIN_PATH": nil])
        XCTAssertTrue(listed.stdout.contains("needs: ssh-agent"), listed.stdout + listed.stderr)
        let other = try runProcess(porterBinary, ["plugins", "--plugin-path", Self.undeclared.path],
                                   environment: ["PORTER_PLUGIN_PATH": nil])
        XCTAssertTrue(other.stdout.contains("needs: none"), other.stdout + other.stderr)
    }
}
