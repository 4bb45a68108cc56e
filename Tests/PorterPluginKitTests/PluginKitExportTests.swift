import CPorterPlugin
import Foundation
@testable import PorterPluginKit
import XCTest

/// A load handler that records what the host's vtable calls made of it.
final class RecordingLoad: PluginLoadHandler, @unchecked Sendable {
    let request: PluginRequest
    let client: PluginClient
    let log: PluginKitExportTests.Made?
    init(request: PluginRequest, client: PluginClient, log: PluginKitExportTests.Made?) {
        self.request = request
        self.client = client
        self.log = log
    }
    private func note(_ s: String) { log?.note(s) }
    func start() { note("start") }
    func stop() { note("stop") }
    func pause() { note("pause") }
    func resume() { note("resume") }
    func waitUntilDone() { note("waitUntilDone") }
}

/// `PluginKit.export`: the descriptor a definition becomes, and the vtable that runs a
/// Swift handler's life cycle (start, pause, stop, destroy) and maps its thrown errors.
final class PluginKitExportTests: XCTestCase {
    /// The handlers the definitions below made, weakly: destroy must let them go.
    final class Made: @unchecked Sendable {
        private let lock = NSLock()
        private var calls: [String] = []
        private weak var made: RecordingLoad?
        var last: RecordingLoad? { lock.withLock { made } }
        var seen: [String] { lock.withLock { calls } }
        func add(_ l: RecordingLoad) { lock.withLock { made = l } }
        func note(_ s: String) { lock.withLock { calls.append(s) } }
    }

    private func definition(_ name: String, pause: Bool = true, made: Made? = nil,
                            refuse: PluginError? = nil) -> PluginDefinition {
        PluginDefinition(name: name, version: "2.1", schemes: [
            PluginSchemeDefinition("kit", flags: UInt32(PORTER_SCHEME_NEEDS_NETWORK | PORTER_SCHEME_CAN_UPLOAD), defaultPort: 4242),
            PluginSchemeDefinition("kits", flags: UInt32(PORTER_SCHEME_CARRIES_COOKIES)),
        ], supportsPause: pause, readPaths: ["~/.kit"], writePaths: ["~/.kit/cache", "~/out"], needs: .sshAgent) { request, client throws(PluginError) in
            if let refuse { throw refuse }
            let load = RecordingLoad(request: request, client: client, log: made)
            made?.add(load)
            return load
        }
    }

    private func export(_ d: PluginDefinition, host: UnsafePointer<porter_host>? = FakeHost.table())
        -> (Int32, UnsafePointer<porter_plugin_descriptor>?, String) {
        var out: UnsafePointer<porter_plugin_descriptor>?
        var error = [CChar](repeating: 0, count: 256)
        let rc = PluginKit.export(d, host: host, descriptor: &out, error: &error, capacity: error.count)
        return (rc, out, CErrorBuffer.read(error))
    }

    func testTheDescriptorSaysWhatTheDefinitionDeclares() throws {
        let (rc, out, message) = export(definition("declares", pause: false))
        XCTAssertEqual(rc, 0, message)
        let d = try XCTUnwrap(out).pointee
        XCTAssertEqual(Int(d.struct_size), MemoryLayout<porter_plugin_descriptor>.size)
        XCTAssertEqual(d.abi_major, UInt16(PORTER_PLUGIN_ABI_MAJOR))
        XCTAssertEqual(d.abi_minor, UInt16(PORTER_PLUGIN_ABI_MINOR))
        XCTAssertEqual(FakeHost.string(d.name), "declares")
        XCTAssertEqual(FakeHost.string(d.version), "2.1")
        XCTAssertEqual(d.scheme_count, 2)
        let schemes = UnsafeBufferPointer(start: d.schemes, count: d.scheme_count)
        XCTAssertEqual(schemes.map { FakeHost.string($0.name) }, ["kit", "kits"])
        XCTAssertEqual(schemes.map(\.flags), [UInt32(PORTER_SCHEME_NEEDS_NETWORK | PORTER_SCHEME_CAN_UPLOAD),
                                              UInt32(PORTER_SCHEME_CARRIES_COOKIES)])
        XCTAssertEqual(schemes.map(\.default_port), [4242, 0])
        XCTAssertEqual(schemes.map(\.reserved), [0, 0])
        XCTAssertEqual((0..<d.read_path_count).map { FakeHost.string(d.read_paths[$0]) }, ["~/.kit"])
        XCTAssertEqual((0..<d.write_path_count).map { FakeHost.string(d.write_paths[$0]) }, ["~/.kit/cache", "~/out"])
        XCTAssertEqual(d.needs, UInt32(PORTER_NEED_SSH_AGENT))
        let vtable = try XCTUnwrap(d.handler).pointee
        XCTAssertEqual(Int(vtable.struct_size), MemoryLayout<porter_handler_vtable>.size)
        XCTAssertNotNil(vtable.start)
        XCTAssertNotNil(vtable.stop)
        XCTAssertNotNil(vtable.destroy)
        XCTAssertNil(vtable.can_handle, "every request of the scheme")
        XCTAssertNil(vtable.pause, "a definition without pause support leaves pause NULL (the host buffers)")
        XCTAssertNil(vtable.resume)
        XCTAssertNotNil(d.plugin_context)
    }

    func testTheSameDefinitionAndHostGetTheSameDescriptor() throws {
        let host = FakeHost.table()
        let (_, first, _) = export(definition("once"), host: host)
        let (_, again, _) = export(definition("once"), host: host)
        XCTAssertEqual(try XCTUnwrap(first), try XCTUnwrap(again), "the entry point may be called again: one descriptor")
        let (_, other, _) = export(definition("once"), host: FakeHost.table())
        XCTAssertNotEqual(first, other, "another host table gets its own")
    }

    func testAnotherMajorAndMissingArgumentsAreRefusedWithAReason() {
        let (rc, out, message) = export(definition("major"), host: FakeHost.table(major: UInt16(PORTER_PLUGIN_ABI_MAJOR) + 1))
        XCTAssertNotEqual(rc, 0)
        XCTAssertNil(out)
        XCTAssertEqual(message, "built for ABI \(PORTER_PLUGIN_ABI_MAJOR).\(PORTER_PLUGIN_ABI_MINOR); host has \(PORTER_PLUGIN_ABI_MAJOR + 1)")
        let (rc2, _, message2) = export(definition("nohost"), host: nil)
        XCTAssertNotEqual(rc2, 0)
        XCTAssertEqual(message2, "no host table or descriptor slot")
        var error = [CChar](repeating: 0, count: 64)
        XCTAssertNotEqual(PluginKit.export(definition("noslot"), host: FakeHost.table(), descriptor: nil, error: &error, capacity: 64), 0)
    }

    /// start → the handler made with the request and started; pause and resume reach it;
    /// stop reaches it; destroy waits for it and lets it go (the load's life is the box's).
    func testTheVtableRunsAHandlersLifeAndDestroyLetsItGo() throws {
        let made = Made()
        let (_, out, _) = export(definition("life", made: made))
        let d = try XCTUnwrap(out).pointee
        let vtable = try XCTUnwrap(d.handler).pointee
        let strings = CStrings()
        var r = porter_request()
        r.struct_size = UInt32(MemoryLayout<porter_request>.size)
        r.url = strings.dup("kit://h/file")
        r.method = strings.dup("GET")
        r.resume_offset = -1
        r.body_length = -1
        var load: UnsafeMutableRawPointer?
        var error = [CChar](repeating: 0, count: 128)
        let rc = withUnsafePointer(to: &r) { vtable.start?(d.plugin_context, $0, FakeHost.client, &load, &error, 128) }
        XCTAssertEqual(rc, 0, CErrorBuffer.read(error))
        let loadPointer = try XCTUnwrap(load)
        XCTAssertEqual(made.last?.request.url, "kit://h/file")
        XCTAssertEqual(made.seen, ["start"])
        vtable.pause?(loadPointer)
        vtable.resume?(loadPointer)
        vtable.stop?(loadPointer)
        XCTAssertEqual(made.seen, ["start", "pause", "resume", "stop"])
        // The handler's client speaks for this load: what it reports reaches the host.
        FakeHost.state.reset()
        made.last?.client.finish()
        XCTAssertEqual(FakeHost.state.take(), ["finish"])
        vtable.destroy?(loadPointer)
        XCTAssertEqual(made.seen, ["start", "pause", "resume", "stop", "waitUntilDone"])
        XCTAssertNil(made.last, "destroy released the handler")
        // NULL loads are ignored, never dereferenced.
        vtable.stop?(nil)
        vtable.destroy?(nil)
        vtable.pause?(nil)
        withExtendedLifetime(strings) {}
    }

    func testAThrownErrorBecomesTheStartCodeAndMessage() throws {
        for (thrown, code) in [(PluginError(Int32(PORTER_ERR_FILE_DOES_NOT_EXIST), "no such file"), Int32(PORTER_ERR_FILE_DOES_NOT_EXIST)),
                               (PluginError(0, "zero is no code"), Int32(PORTER_ERR_UNKNOWN))] {
            let (_, out, _) = export(definition("refuses-\(code)", refuse: thrown))
            let d = try XCTUnwrap(out).pointee
            var r = porter_request()
            r.struct_size = UInt32(MemoryLayout<porter_request>.size)
            var load: UnsafeMutableRawPointer? = UnsafeMutableRawPointer(bitPattern: 0x1)
            var error = [CChar](repeating: 0, count: 128)
            let rc = withUnsafePointer(to: &r) { d.handler.pointee.start?(d.plugin_context, $0, FakeHost.client, &load, &error, 128) }
            XCTAssertEqual(rc, code)
            XCTAssertEqual(CErrorBuffer.read(error), thrown.message)
            XCTAssertEqual(load, UnsafeMutableRawPointer(bitPattern: 0x1), "no load on a refusal: destroy is not called")
            // No request or context: refused, never dereferenced.
            XCTAssertEqual(d.handler.pointee.start?(d.plugin_context, nil, FakeHost.client, &load, &error, 128), Int32(PORTER_ERR_UNKNOWN))
            XCTAssertEqual(withUnsafePointer(to: &r) { d.handler.pointee.start?(nil, $0, FakeHost.client, &load, &error, 128) },
                           Int32(PORTER_ERR_UNKNOWN))
        }
    }
}
