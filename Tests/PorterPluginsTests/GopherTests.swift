import Foundation
import Porter
import PorterPlugins
import PorterTestSupport
import XCTest

/// The C example plugin (Examples/CPlugin, libGopherPlugin.so) end to end against a
/// gopher server on loopback: through a session and through the CLI, loaded from a
/// folder.
class GopherTests: XCTestCase {
    /// Where the plugin runs (`IsolatedGopherTests` runs the same tests in a worker).
    class var mode: PluginMode { .inProcess }
    static let buildDir = URL(fileURLWithPath: porterBinary).deletingLastPathComponent().path
    static let pluginPath = buildDir + "/libGopherPlugin.so"
    nonisolated(unsafe) static var server: Process?
    nonisolated(unsafe) static var port = 0
    nonisolated(unsafe) static var root = URL(fileURLWithPath: "/")
    nonisolated(unsafe) static var registries: [PluginMode: HandlerRegistry] = [:]
    static var registry: HandlerRegistry { registries[mode] ?? HandlerRegistry() }
    static let blob = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) })

    override class func setUp() {
        super.setUp()
        do {
            if server == nil {
            root = try PluginFixture.folder("gopher-root")
            try "Hello from gopher.\nSecond line.\n".write(to: root.appendingPathComponent("welcome.txt"), atomically: true, encoding: .utf8)
            try FileManager.default.createDirectory(at: root.appendingPathComponent("docs"), withIntermediateDirectories: true)
            try blob.write(to: root.appendingPathComponent("blob.bin"))
            let script = PluginFixture.packageRoot.appendingPathComponent("scripts/gopherd.py").path
            let (p, port) = try startReadyServer("/usr/bin/env", ["python3", script, "--root", root.path])
            server = p
            self.port = port
            }
            guard registries[mode] == nil else { return }
            let registry = HandlerRegistry()
            Porter.bootstrap(registry: registry, loadPlugins: false)
            var isolation = PluginIsolation.default
            isolation.defaultMode = mode
            let verdict = PluginLoader(registry: registry, isolation: isolation).load(path: pluginPath)
            if verdict.plugin?.mode != mode { print("gopher plugin did not load \(mode): \(verdict)") }
            registries[mode] = registry
        } catch {
            print("gopher fixture failed: \(error)")
        }
    }

    override class func tearDown() {
        server?.terminate()
        server?.waitUntilExit()
        server = nil
        super.tearDown()
    }

    private func session(_ tweak: (inout SessionConfiguration) -> Void = { _ in }) -> Session {
        var config = SessionConfiguration.ephemeral
        config.registry = Self.registry
        tweak(&config)
        return Session(configuration: config)
    }

    private func url(_ path: String) -> URL { URL(string: "gopher://127.0.0.1:\(Self.port)\(path)")! }

    func testServerStarted() {
        XCTAssertGreaterThan(Self.port, 0, "gopherd.py did not start")
        XCTAssertTrue(Self.registry.hasHandler(forScheme: "gopher"))
    }

    func testMenu() async throws {
        let (data, response) = try await session().data(from: url("/"))
        let text = String(decoding: data, as: UTF8.self)
        XCTAssertEqual(response.mimeType, "text/x-gopher-menu")
        XCTAssertEqual(text, "9blob.bin\t/blob.bin\t127.0.0.1\t\(Self.port)\r\n1docs\t/docs\t127.0.0.1\t\(Self.port)\r\n"
                       + "0welcome.txt\t/welcome.txt\t127.0.0.1\t\(Self.port)\r\n")
    }

    func testTextWithoutTheTerminatorLine() async throws {
        let (data, response) = try await session().data(from: url("/0/welcome.txt"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "Hello from gopher.\nSecond line.\n")
        XCTAssertEqual(response.mimeType, "text/plain")
        XCTAssertEqual(response.textEncodingName, "utf-8")
    }

    func testBinaryDownloadWithBackPressure() async throws {
        let s = session { $0.receiveBufferLimit = 64 << 10 }
        let (file, _) = try await s.download(from: url("/9/blob.bin"))
        defer { try? FileManager.default.removeItem(at: file) }
        XCTAssertEqual(try Data(contentsOf: file), Self.blob)
    }

    func testRefusedConnection() async throws {
        do {
            _ = try await session().data(from: URL(string: "gopher://127.0.0.1:1/")!)
            XCTFail("expected cannotConnectToHost")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotConnectToHost)
            XCTAssertEqual(e.cause?.domain, "errno")
            XCTAssertEqual(e.cause?.code, Int(ECONNREFUSED))
        }
    }

    func testBadSelectorIsABadURL() async throws {
        do {
            _ = try await session().data(from: url("/0/a%0D%0Ab"))
            XCTFail("expected badURL")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .badURL)
        }
    }

    // MARK: - the CLI

    private func porter(_ args: [String], env: [String: String] = [:]) throws -> (status: Int32, out: String, err: String) {
        var environment: [String: String?] = ["PORTER_PLUGIN_PATH": nil, "HOME": FileManager.default.temporaryDirectory.path]
        for (k, v) in env { environment[k] = v }
        let r = try runProcess(porterBinary, args, environment: environment)
        return (r.status, r.stdout, r.stderr)
    }

    func testCLILoadsThePluginFromAFolder() throws {
        let r = try porter(["--plugin-path", Self.buildDir, url("/0/welcome.txt").absoluteString])
        XCTAssertEqual(r.status, 0, r.err)
        XCTAssertEqual(r.out, "Hello from gopher.\nSecond line.\n")
        // Without the plugin the scheme is unknown: exit 1 (curl's unsupported protocol).
        let without = try porter([url("/").absoluteString])
        XCTAssertEqual(without.status, 1, without.err)
        // PORTER_PLUGIN_PATH works the same way.
        let env = try porter([url("/0/welcome.txt").absoluteString], env: ["PORTER_PLUGIN_PATH": Self.buildDir])
        XCTAssertEqual(env.status, 0, env.err)
    }

    func testPorterPluginsExplainsEachCandidate() throws {
        let folder = try PluginFixture.folder()
        let good = folder.appendingPathComponent("libGopherPlugin.so").path
        try FileManager.default.copyItem(atPath: Self.pluginPath, toPath: good)
        chmod(good, 0o644)
        let loose = folder.appendingPathComponent("loose.so").path
        try FileManager.default.copyItem(atPath: Self.pluginPath, toPath: loose)
        chmod(loose, 0o646)
        try "not ELF".write(toFile: folder.appendingPathComponent("junk.so").path, atomically: true, encoding: .utf8)
        chmod(folder.appendingPathComponent("junk.so").path, 0o644)
        let r = try porter(["plugins", "--plugin-path", folder.path])
        XCTAssertEqual(r.status, 0, r.err)
        XCTAssertTrue(r.out.contains("loaded  \(good)\n        gopher (C example) 1.0.0; schemes: gopher (network, port 70)"), r.out)
        XCTAssertTrue(r.out.contains("refused \(folder.path)/junk.so\n        stage: open; reason: dlopen failed"), r.out)
        XCTAssertTrue(r.out.contains("refused \(loose)\n        stage: file; reason: the file is writable by others"), r.out)
        // A URL of a scheme no loaded plugin serves points at `porter plugins`.
        let bad = try porter(["--plugin-path", folder.path + "/junk.so", url("/").absoluteString])
        XCTAssertEqual(bad.status, 1, "curl's 1: unsupported protocol")
        XCTAssertTrue(bad.err.contains("1 plugin(s) were refused at start-up; 'porter plugins' says why"), bad.err)
    }
}

/// The gopher tests with the plugin in a worker process.
final class IsolatedGopherTests: GopherTests {
    override class var mode: PluginMode { .isolated }
    // Linux XCTest finds only the methods a class declares: each test, again.
    override func testServerStarted() { super.testServerStarted() }
    override func testMenu() async throws { try await super.testMenu() }
    override func testTextWithoutTheTerminatorLine() async throws { try await super.testTextWithoutTheTerminatorLine() }
    override func testBinaryDownloadWithBackPressure() async throws { try await super.testBinaryDownloadWithBackPressure() }
    override func testRefusedConnection() async throws { try await super.testRefusedConnection() }
    override func testBadSelectorIsABadURL() async throws { try await super.testBadSelectorIsABadURL() }
    override func testCLILoadsThePluginFromAFolder() throws { try super.testCLILoadsThePluginFromAFolder() }
    override func testPorterPluginsExplainsEachCandidate() throws { try super.testPorterPluginsExplainsEachCandidate() }
}
