import Foundation
import Porter
import PorterPlugins
import PorterTestSupport
import XCTest

/// Event hooks: a C plugin subscribes functions of different signatures; libffi calls
/// them with the values of real tasks; bad subscriptions are refused and never called.
final class EventTests: XCTestCase {
    func testEventsReachTheSubscribedFunctionsWithTheirValues() async throws {
        try await check(mode: .inProcess, scheme: "evt")
    }

    /// The same plugin in a worker process: the host forwards the events it subscribed to.
    func testEventsReachAnIsolatedPlugin() async throws {
        try await check(mode: .isolated, scheme: "evi")
    }

    private func check(mode: PluginMode, scheme evt: String) async throws {
        let folder = try PluginFixture.folder()
        let path = try PluginFixture.build("events.so", in: folder, defines: ["EVENTS", "SCHEME=\"\(evt)\""])
        let registry = HandlerRegistry()
        Porter.bootstrap(registry: registry, loadPlugins: false)
        var isolation = PluginIsolation.default
        isolation.defaultMode = mode
        let verdict = PluginLoader(registry: registry, isolation: isolation).load(path: path)
        XCTAssertNotNil(verdict.plugin, "\(verdict)")
        XCTAssertEqual(verdict.plugin?.mode, mode)

        var config = SessionConfiguration.ephemeral
        config.registry = registry
        let delegate = Answers { _ in .useCredential(Credential(user: "ann", password: "sesame")) }
        let session = Session(configuration: config, delegate: delegate)
        _ = try await session.data(from: URL(string: "\(evt)://e1/redirect")!)
        _ = try await session.data(from: URL(string: "\(evt)://e2/auth")!)
        _ = try? await session.data(from: URL(string: "\(evt)://e3/missing")!)
        var upload = Request(url: URL(string: "\(evt)://e4/upload")!)
        upload.method = "PUT"
        _ = try await session.upload(for: upload, from: Data(count: 1234))

        var log = ""
        _ = try await eventuallyAsync {
            log = mode == .inProcess ? PluginFixture.events(of: path)
                : String(decoding: try await session.data(from: URL(string: "\(evt)://x/events")!).0, as: UTF8.self)
            return log.contains("\(evt)://e4/upload 13 1234 0")
        }
        let lines = log.split(separator: "\n").map(String.init)
        func line(_ prefix: String, _ contains: String) -> String? {
            lines.first { $0.hasPrefix(prefix) && $0.contains(contains) }
        }
        // The refusals, written by the plugin from subscribe's error text.
        XCTAssertNotNil(line("refused exploded:", "unknown event 'task.exploded'"), log)
        XCTAssertNotNil(line("refused mismatch:", "does not match event 'task.completed', which is 'v(pQsqqi)'"), log)
        XCTAssertFalse(lines.contains { $0.contains(" X ") || $0.contains(" Y ") }, "a refused hook was called:\n\(log)")
        XCTAssertFalse(lines.contains { $0.hasPrefix("refused created") || $0.hasPrefix("refused completed") }, log)

        // task.created: id and URL.
        let created = try XCTUnwrap(line("created C ", "\(evt)://e1/redirect"), log)
        let id = created.split(separator: " ")[2]
        // task.redirected with from and to, same task id.
        XCTAssertNotNil(line("redirected D \(id) ", "\(evt)://e1/redirect \(evt)://e1/hello"), log)
        // task.response: status -1 (none) and length 14 ("hello from evt").
        XCTAssertNotNil(line("response R \(id) ", "\(evt)://e1/hello -1 14"), log)
        // task.completed: bytes received, sent, error 0.
        XCTAssertNotNil(line("completed F \(id) ", "\(evt)://e1/hello 14 0 0"), log)
        // task.challenged: host, method (the plugin's PORTER_AUTH_PASSWORD), failure count.
        XCTAssertNotNil(line("challenged A ", " e2 password 0"), log)
        // A failure's code (17: fileDoesNotExist).
        XCTAssertNotNil(line("completed F ", "\(evt)://e3/missing 0 0 17"), log)
        // An upload's byte counts ("received 1234" is 13 bytes).
        XCTAssertNotNil(line("completed F ", "\(evt)://e4/upload 13 1234 0"), log)
    }

    /// A plugin's hook that blocks (on the libcurl loop thread, before hooks had queues of
    /// their own) holds back no transfer: while it waits, another HTTP load of the same
    /// session completes; once released, the plugin has seen every event, in order.
    func testASlowHookHoldsBackNoTransfer() async throws {
        let nginx = try NginxFixture()
        defer { nginx.stop() }
        let folder = try PluginFixture.folder()
        let path = try PluginFixture.build("hold.so", in: folder, defines: ["HOLD", "SCHEME=\"hold\""])
        typealias Release = @convention(c) () -> Void
        let release = try XCTUnwrap(PluginFixture.symbol("testplugin_release", in: path, as: Release.self))
        let registry = HandlerRegistry()
        Porter.bootstrap(registry: registry, loadPlugins: false)
        var isolation = PluginIsolation.default
        isolation.defaultMode = .inProcess
        let verdict = PluginLoader(registry: registry, isolation: isolation).load(path: path)
        XCTAssertEqual(verdict.plugin?.mode, .inProcess, "\(verdict)")
        var released = false
        defer { if !released { release() } }

        var config = SessionConfiguration.ephemeral
        config.registry = registry
        let session = Session(configuration: config)
        let held = nginx.http + "/index.html?hold-here"
        let other = nginx.http + "/index.html?meanwhile"
        let first = Task { try await session.data(from: URL(string: held)!) }
        let holding = await eventuallyAsync { PluginFixture.counter("testplugin_holding", of: path) == 1 }
        XCTAssertTrue(holding, "the hook never saw the response of \(held)")

        let done = Locked(false)
        let second = Task {
            let (body, _) = try await session.data(from: URL(string: other)!)
            done.withLock { $0 = true }
            return body
        }
        let passed = await eventuallyAsync { done.current }
        XCTAssertTrue(passed, "a load waited for a plugin's blocked event hook")
        released = true
        release()
        let (firstBody, secondBody) = (try await first.value.0, try await second.value)
        XCTAssertEqual(String(decoding: firstBody, as: UTF8.self), "hello from nginx\n")
        XCTAssertEqual(String(decoding: secondBody, as: UTF8.self), "hello from nginx\n")

        // Every event reached the plugin once released, each task's in order, and the
        // second task's later events after the held one (one queue, never two at once).
        var lines: [String] = []
        let all = await eventuallyAsync {
            lines = PluginFixture.events(of: path).split(separator: "\n").map(String.init)
            return lines.contains { $0.hasPrefix("completed \(held) ") } && lines.contains { $0.hasPrefix("completed \(other) ") }
        }
        XCTAssertTrue(all, lines.joined(separator: "\n"))
        func index(_ kind: String, _ url: String) -> Int {
            let matches = lines.indices.filter { lines[$0].hasPrefix("\(kind) \(url)") && (lines[$0] + " ").dropFirst(kind.count + 1 + url.count).hasPrefix(" ") }
            XCTAssertEqual(matches.count, 1, "\(kind) \(url) in:\n\(lines.joined(separator: "\n"))")
            return matches.first ?? -1
        }
        for url in [held, other] {
            let (c, r, f) = (index("created", url), index("response", url), index("completed", url))
            XCTAssertTrue(c < r && r < f, "\(url) out of order:\n\(lines.joined(separator: "\n"))")
        }
        XCTAssertTrue(index("response", held) < index("response", other), lines.joined(separator: "\n"))
        XCTAssertTrue(lines.contains("response \(held) 200"), lines.joined(separator: "\n"))
        XCTAssertTrue(lines.contains("completed \(other) 17 0"), lines.joined(separator: "\n"))
    }
}
