import Foundation
import PorterTestSupport
import XCTest

/// `porter plugin new` writes a plugin that builds with its own Makefile (pkg-config
/// porter-plugin) and passes `porter plugin test`; the same plugin made to crash, stall or
/// report out of order fails it with the rule and the fix.
final class PluginCommandTests: XCTestCase {
    static let include = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/CPorterPlugin/include").path

    private func run(_ tool: String, _ args: [String], in dir: String, env: [String: String] = [:]) throws -> (Int32, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = args
        p.currentDirectoryURL = URL(fileURLWithPath: dir)
        p.environment = ProcessInfo.processInfo.environment.merging(env) { $1 }
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        let out = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: out, as: UTF8.self))
    }

    /// A folder with a porter-plugin.pc for the header in this checkout (what `make install`
    /// puts in PREFIX/lib/pkgconfig).
    private func workspace() throws -> (dir: String, env: [String: String]) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("porter-plugin-new-\(getpid())-\(UUID().uuidString.prefix(6))").path
        try FileManager.default.createDirectory(atPath: dir + "/pkgconfig", withIntermediateDirectories: true)
        try """
            includedir=\(Self.include)
            plugindir=\(dir)/installed

            Name: porter-plugin
            Description: test
            Version: 1.2
            Cflags: -I${includedir}

            """.write(toFile: dir + "/pkgconfig/porter-plugin.pc", atomically: true, encoding: .utf8)
        return (dir, ["PKG_CONFIG_PATH": dir + "/pkgconfig", "PORTER": porterBinary])
    }

    private func scaffold(_ name: String, in ws: (dir: String, env: [String: String]), edit: ((String) -> String)? = nil) throws -> String {
        let (status, out) = try run(porterBinary, ["plugin", "new", "--c", name], in: ws.dir)
        XCTAssertEqual(status, 0, out)
        let folder = ws.dir + "/" + name
        if let edit {
            let source = folder + "/\(name).c"
            try edit(try String(contentsOfFile: source, encoding: .utf8)).write(toFile: source, atomically: true, encoding: .utf8)
        }
        let (built, log) = try run("/usr/bin/make", ["-C", folder], in: ws.dir, env: ws.env)
        XCTAssertEqual(built, 0, log)
        XCTAssertTrue(log.contains("-Wall -Wextra -Werror -fPIC"), log)
        return folder
    }

    func testScaffoldedCPluginBuildsAndPassesTheContract() throws {
        let ws = try workspace()
        defer { try? FileManager.default.removeItem(atPath: ws.dir) }
        let folder = try scaffold("hello-kit", in: ws)
        let source = try String(contentsOfFile: folder + "/hello-kit.c", encoding: .utf8)
        XCTAssertTrue(source.contains("read_paths[] = {\"~/.config/hello-kit\"}"), "declared paths")
        let (status, out) = try run("/usr/bin/make", ["-C", folder, "test"], in: ws.dir, env: ws.env)
        XCTAssertEqual(status, 0, out)
        XCTAssertTrue(out.contains("loaded hello-kit 0.1.0 (isolated); schemes: hello-kit"), out)
        XCTAssertTrue(out.contains("PASS:"), out)
        let (installed, log) = try run("/usr/bin/make", ["-C", folder, "install"], in: ws.dir, env: ws.env)
        XCTAssertEqual(installed, 0, log)
        XCTAssertTrue(FileManager.default.fileExists(atPath: ws.dir + "/installed/libhello_kit.so"))
    }

    func testPluginThatCrashesIsReported() throws {
        let ws = try workspace()
        defer { try? FileManager.default.removeItem(atPath: ws.dir) }
        let folder = try scaffold("crashy", in: ws) {
            $0.replacingOccurrences(of: "    char body[4096];", with: "    char body[4096];\n    if (strstr(l->request->url, \"boom\")) abort();")
        }
        let (status, out) = try run(porterBinary, ["plugin", "test", folder + "/libcrashy.so", "--url", "crashy://x/boom"], in: ws.dir)
        XCTAssertEqual(status, 1, out)
        XCTAssertTrue(out.contains("FAIL [load] no-crash: the plugin does not crash"), out)
        XCTAssertTrue(out.contains("fix: run the load with `porter --plugins-in-process -v URL` under gdb"), out)
    }

    func testPluginThatNeverFinishesAndReportsDataFirstIsReported() throws {
        let ws = try workspace()
        defer { try? FileManager.default.removeItem(atPath: ws.dir) }
        let folder = try scaffold("sloppy", in: ws) {
            // Data before the head, and no end at all.
            $0.replacingOccurrences(of: "    if (wait_or_stop(l)) return NULL;\n    host->did_receive_response(l->client, &response);",
                                    with: "    host->did_load_data(l->client, \"x\", 1);\n    host->did_receive_response(l->client, &response);")
              .replacingOccurrences(of: "    host->did_finish(l->client);", with: "    while (!wait_or_stop(l)) { struct timespec t = {0, 10000000}; nanosleep(&t, NULL); }")
              .replacingOccurrences(of: "#include <porter_plugin.h>", with: "#define _POSIX_C_SOURCE 200809L\n#include <porter_plugin.h>\n#include <time.h>")
        }
        let (status, out) = try run(porterBinary, ["plugin", "test", folder + "/libsloppy.so", "--timeout", "3"], in: ws.dir)
        XCTAssertEqual(status, 1, out)
        XCTAssertTrue(out.contains("FAIL [load] response-before-data"), out)
        XCTAssertTrue(out.contains("FAIL [load] ends: every load ends"), out)
    }

    func testSwiftScaffoldIsAPackage() throws {
        let ws = try workspace()
        defer { try? FileManager.default.removeItem(atPath: ws.dir) }
        let root = URL(fileURLWithPath: Self.include).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let (status, out) = try run(porterBinary, ["plugin", "new", "--swift", "swifty", "--porter-package", root], in: ws.dir)
        XCTAssertEqual(status, 0, out)
        let manifest = try String(contentsOfFile: ws.dir + "/swifty/Package.swift", encoding: .utf8)
        XCTAssertTrue(manifest.contains(".library(name: \"swifty\", type: .dynamic"), manifest)
        XCTAssertTrue(manifest.contains(".product(name: \"PorterPluginKit\""), manifest)
        let source = try String(contentsOfFile: ws.dir + "/swifty/Sources/swifty/swifty.swift", encoding: .utf8)
        XCTAssertTrue(source.contains("@_cdecl(\"porter_plugin_entry\")"), source)
        XCTAssertTrue(source.contains("readPaths: [\"~/.config/swifty\"]"), source)
        // An existing folder is never overwritten; bad names and both languages are refused.
        XCTAssertEqual(try run(porterBinary, ["plugin", "new", "--swift", "swifty"], in: ws.dir).0, 1)
        XCTAssertNotEqual(try run(porterBinary, ["plugin", "new", "--c", "--swift", "x"], in: ws.dir).0, 0)
        XCTAssertNotEqual(try run(porterBinary, ["plugin", "new", "--c", "../escape"], in: ws.dir).0, 0)
    }
}
