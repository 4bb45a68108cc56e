import Foundation
import Porter
import PorterTestSupport
import XCTest

/// Builds variants of Fixtures/testplugin.c into private folders with `cc -shared`.
enum PluginFixture {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    static let source = root.appendingPathComponent("Fixtures/testplugin.c").path
    static let include = root.deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/CPorterPlugin/include").path
    static let packageRoot = root.deletingLastPathComponent().deletingLastPathComponent()

    /// Every fixture folder of this test process lives under one parent, removed when
    /// the process exits (plugins are mapped from open descriptors, so nothing needs the
    /// names meanwhile... until then they stay).
    static let parent: URL = {
        let p = FileManager.default.temporaryDirectory.appendingPathComponent("porter-plugin-tests-\(getpid())-\(UUID().uuidString.prefix(4))")
        try? FileManager.default.createDirectory(at: p, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        chmod(p.path, 0o755)
        parentPath.withLock { $0 = p.path }
        atexit {
            if let path = PluginFixture.parentPath.current { try? FileManager.default.removeItem(atPath: path) }
        }
        return p
    }()
    static let parentPath = Locked<String?>(nil)

    /// A new folder (mode 0755) under the system's temporary folder.
    static func folder(_ name: String = "plugins") throws -> URL {
        let dir = parent.appendingPathComponent("\(UUID().uuidString.prefix(8))/\(name)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o755])
        chmod(dir.deletingLastPathComponent().path, 0o755)
        return dir
    }

    /// Compiles the test plugin with `defines` (e.g. ["EVENTS", "SCHEME=\"x\""]) into
    /// `folder/name`, mode 0644.
    @discardableResult
    static func build(_ name: String, in folder: URL, defines: [String] = []) throws -> String {
        let out = folder.appendingPathComponent(name).path
        try runChecked("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-I", include] + defines.map { "-D\($0)" }
                + ["-o", out, source, "-lpthread"])
        chmod(out, 0o644)
        return out
    }


    /// A C function exported by a test plugin (the plugin is RTLD_LOCAL, so ask its own
    /// handle; a plugin that runs in a worker is mapped here too, for the symbol only).
    static func symbol<T>(_ name: String, in path: String, as type: T.Type) -> T? {
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL), let sym = dlsym(handle, name) else { return nil }
        return unsafeBitCast(sym, to: type)
    }

    static func events(of path: String) -> String {
        typealias Dump = @convention(c) (UnsafeMutablePointer<CChar>?, Int) -> Int
        guard let dump = symbol("testplugin_events", in: path, as: Dump.self) else { return "" }
        var buffer = [CChar](repeating: 0, count: 65536)
        let n = dump(&buffer, buffer.count)
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func counter(_ name: String, of path: String) -> Int32 {
        typealias Count = @convention(c) () -> Int32
        return symbol(name, in: path, as: Count.self)?() ?? -1
    }
}
