import Foundation
import Porter
@testable import PorterPlugins
import PorterTestSupport
import XCTest

/// One test per way a plugin can be bad: each asserts the stage and the reason of the
/// diagnostic, and that a good plugin in the same folder still loads.
final class LoaderTests: XCTestCase {
    /// Loads `folder` (which holds the bad candidate and a good "zz-good.so") into a
    /// fresh registry; returns the bad candidate's diagnostic.
    private func refusal(in folder: URL, named bad: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> PluginDiagnostic? {
        try PluginFixture.build("zz-good.so", in: folder)
        let registry = HandlerRegistry()
        let verdicts = PluginLoader(registry: registry).loadAll(from: [folder.path])
        let good = verdicts.first { $0.plugin?.path.hasSuffix("zz-good.so") == true }
        XCTAssertNotNil(good, "the good plugin did not load: \(verdicts)", file: file, line: line)
        XCTAssertTrue(registry.hasHandler(forScheme: "ptest"), file: file, line: line)
        let d = verdicts.compactMap(\.diagnostic).first { $0.path.hasSuffix(bad) }
        XCTAssertNotNil(d, "no diagnostic for \(bad): \(verdicts)", file: file, line: line)
        return d
    }

    func testGoodPluginLoadsWithItsDescriptor() throws {
        let folder = try PluginFixture.folder()
        let path = try PluginFixture.build("good.so", in: folder)
        let registry = HandlerRegistry()
        let verdict = PluginLoader(registry: registry).load(path: path)
        let plugin = try XCTUnwrap(verdict.plugin, "\(verdict)")
        XCTAssertEqual(plugin.name, "ptest plugin (ptest)")
        XCTAssertEqual(plugin.version, "1.0.0")
        XCTAssertEqual(plugin.schemes.map(\.name), ["ptest"])
        XCTAssertEqual(plugin.schemes.first?.flagNames, ["redirect-target", "upload"])
        let reg = try XCTUnwrap(registry.registrations.first)
        XCTAssertEqual(reg.origin, .plugin(path: path))
        XCTAssertEqual(reg.version, "1.0.0")
        // Loading the same file again into the same registry is refused, not doubled.
        let again = PluginLoader(registry: registry).load(path: path)
        XCTAssertEqual(again.diagnostic?.stage, .register)
        XCTAssertEqual(registry.registrations.count, 1)
    }

    func testMissingFile() throws {
        let folder = try PluginFixture.folder()
        let d = PluginLoader(registry: HandlerRegistry()).load(path: folder.appendingPathComponent("nope.so").path).diagnostic
        XCTAssertEqual(d?.stage, .file)
        XCTAssertTrue(d?.reason.contains("no such file") == true, "\(String(describing: d))")
        // A dangling link in a folder is a candidate with the same verdict.
        symlink(folder.appendingPathComponent("gone.so").path, folder.appendingPathComponent("dangling.so").path)
        let dd = try refusal(in: folder, named: "dangling.so")
        XCTAssertEqual(dd?.stage, .file)
        XCTAssertTrue(dd?.reason.contains("dangling") == true, "\(String(describing: dd))")
    }

    func testNotAnELFFile() throws {
        let folder = try PluginFixture.folder()
        let path = folder.appendingPathComponent("text.so").path
        try "just some text\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o644)
        let d = try refusal(in: folder, named: "text.so")
        XCTAssertEqual(d?.stage, .open)
        XCTAssertTrue(d?.detail?.contains("invalid ELF header") == true || d?.detail?.contains("file too short") == true,
                      "\(String(describing: d))")
    }

    func testAFolderNamedLikeAPlugin() throws {
        let folder = try PluginFixture.folder()
        try FileManager.default.createDirectory(at: folder.appendingPathComponent("dir.so"), withIntermediateDirectories: false)
        let d = try refusal(in: folder, named: "dir.so")
        XCTAssertEqual(d?.stage, .file)
        XCTAssertTrue(d?.reason.contains("folder") == true, "\(String(describing: d))")
    }

    func testMissingEntryPoint() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("noentry.so", in: folder, defines: ["NO_ENTRY"])
        let d = try refusal(in: folder, named: "noentry.so")
        XCTAssertEqual(d?.stage, .symbol)
        XCTAssertTrue(d?.reason.contains("porter_plugin_entry") == true, "\(String(describing: d))")
        XCTAssertNotNil(d?.detail, "dlerror text expected")
    }

    func testUnresolvedSymbol() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("unresolved.so", in: folder, defines: ["UNRESOLVED"])
        let d = try refusal(in: folder, named: "unresolved.so")
        XCTAssertEqual(d?.stage, .open)
        XCTAssertTrue(d?.detail?.contains("porter_test_symbol_that_does_not_exist") == true, "\(String(describing: d))")
    }

    func testABIMajorMismatch() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("major.so", in: folder, defines: ["ABI_MAJOR=2"])
        let d = try refusal(in: folder, named: "major.so")
        XCTAssertEqual(d?.stage, .abi)
        XCTAssertTrue(d?.reason.contains("built for ABI 2.4; this host has 1.4") == true, "\(String(describing: d))")
    }

    func testNewerMinor() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("minor.so", in: folder, defines: ["ABI_MINOR=7"])
        let d = try refusal(in: folder, named: "minor.so")
        XCTAssertEqual(d?.stage, .abi)
        XCTAssertTrue(d?.reason.contains("1.7, newer than this host's 1.4") == true, "\(String(describing: d))")
    }

    /// ABI 1.1, 1.2 and 1.3 only appended fields: a plugin built against 1.0 or 1.1 — with
    /// the descriptor as it was then, ending before 1.2's `read_paths` — or against 1.2
    /// (ending before 1.3's `needs`) loads and works, in process and isolated.
    func testAnOlderMinorStillLoads() async throws {
        for (minor, mode) in [(0, PluginMode.inProcess), (1, .inProcess), (2, .inProcess), (0, .isolated), (1, .isolated),
                              (2, .isolated)] {
            let folder = try PluginFixture.folder()
            let path = try PluginFixture.build("old.so", in: folder,
                                               defines: ["ABI_MINOR=\(minor)", minor < 2 ? "ABI11_SIZE" : "ABI12_SIZE"])
            let registry = HandlerRegistry()
            var isolation = PluginIsolation.default
            isolation.defaultMode = mode
            let verdict = PluginLoader(registry: registry, isolation: isolation).load(path: path)
            XCTAssertEqual(verdict.plugin?.mode, mode, "1.\(minor) \(mode): \(verdict)")
            var config = SessionConfiguration.ephemeral
            config.registry = registry
            let (data, _) = try await Session(configuration: config).data(from: URL(string: "ptest://h/hello")!)
            XCTAssertEqual(String(decoding: data, as: UTF8.self), "hello from ptest")
        }
    }

    func testIncompleteDescriptor() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("incomplete.so", in: folder, defines: ["INCOMPLETE"])
        let d = try refusal(in: folder, named: "incomplete.so")
        XCTAssertEqual(d?.stage, .descriptor)
        XCTAssertEqual(d?.reason, "no handler table")
    }

    func testInvalidScheme() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("badscheme.so", in: folder, defines: ["BAD_SCHEME"])
        let d = try refusal(in: folder, named: "badscheme.so")
        XCTAssertEqual(d?.stage, .descriptor)
        XCTAssertTrue(d?.reason.contains("invalid scheme 'Bad Scheme!'") == true, "\(String(describing: d))")
    }

    func testWorldWritableFile() throws {
        let folder = try PluginFixture.folder()
        let path = try PluginFixture.build("writable.so", in: folder, defines: ["SCHEME=\"other\""])
        chmod(path, 0o666)
        let d = try refusal(in: folder, named: "writable.so")
        XCTAssertEqual(d?.stage, .file)
        XCTAssertTrue(d?.reason.contains("writable by others") == true, "\(String(describing: d))")
    }

    func testGroupWritableFolder() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("good.so", in: folder)
        chmod(folder.path, 0o775)
        let verdicts = PluginLoader(registry: HandlerRegistry()).loadAll(from: [folder.path])
        let d = verdicts.first?.diagnostic
        XCTAssertEqual(d?.stage, .file)
        XCTAssertTrue(d?.reason.contains("folder") == true && d?.reason.contains("writable by group") == true,
                      "\(String(describing: d))")
        // The same plugin in a safe folder, loaded in the same run, is fine.
        let safe = try PluginFixture.folder("safe")
        try PluginFixture.build("good.so", in: safe)
        let both = PluginLoader(registry: HandlerRegistry()).loadAll(from: [folder.path, safe.path])
        XCTAssertEqual(both.count, 2)
        XCTAssertNotNil(both[1].plugin)
    }

    /// The attack the descriptor rule stops: a link in a folder others can write points at
    /// a good plugin while the checks run and at the attacker's object when it is mapped.
    /// Another process swaps the link as fast as it can while `porter plugins` runs 200
    /// times: the attacker's constructor never runs (every run refuses the link, because
    /// whoever can change the link chooses the code).
    func testSymlinkSwappedDuringLoadingNeverLoadsTheAttacker() throws {
        let safe = try PluginFixture.folder("safe")
        let good = try PluginFixture.build("good.so", in: safe)
        let marker = safe.deletingLastPathComponent().appendingPathComponent("attacker-ran").path
        let evil = try PluginFixture.build("evil.so", in: safe, defines: ["MARKER_FILE=\"\(marker)\"", "SCHEME=\"ptest\""])
        let open = try PluginFixture.folder("open")
        chmod(open.path, 0o777)   // anyone may change the names in it
        let link = open.appendingPathComponent("x.so").path
        XCTAssertEqual(symlink(good, link), 0)
        let swapper = try startProcess("/bin/sh", ["-c", """
            while :; do
              ln -sfn '\(evil)' '\(open.path)/.n1' && mv -T '\(open.path)/.n1' '\(link)'
              ln -sfn '\(good)' '\(open.path)/.n2' && mv -T '\(open.path)/.n2' '\(link)'
            done
            """])
        defer { swapper.terminate(); swapper.waitUntilExit() }
        var refusals = 0
        for _ in 0..<200 {
            let r = try runProcess(porterBinary, ["plugins", "--plugin-path", open.path],
                                   environment: ["PORTER_PLUGIN_PATH": nil, "HOME": safe.path])
            XCTAssertEqual(r.status, 0, r.stderr)
            if r.stdout.contains("refused \(link)\n        stage: file; reason: the folder \(open.path) is writable by others") {
                refusals += 1
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: marker), "the attacker's object was mapped")
        XCTAssertEqual(refusals, 200, "every run refuses a link in a folder others can write")
    }

    /// OpenSSH's safe_path rule for the folders above a plugin: a group-writable folder
    /// anywhere above refuses it; a root-owned sticky folder (like /tmp) is fine above the
    /// plugin folder but is never a plugin folder itself.
    func testEveryFolderAboveThePluginCounts() throws {
        let base = try PluginFixture.folder("base")
        let inner = base.appendingPathComponent("a/b")
        try FileManager.default.createDirectory(at: inner, withIntermediateDirectories: true)
        chmod(base.appendingPathComponent("a").path, 0o775)
        chmod(inner.path, 0o755)
        let path = try PluginFixture.build("deep.so", in: inner)
        let d = PluginLoader(registry: HandlerRegistry()).load(path: path).diagnostic
        XCTAssertEqual(d?.stage, .file)
        XCTAssertTrue(d?.reason.contains("folder \(base.path)/a (above the plugin's folder) is writable by group") == true,
                      "\(String(describing: d))")
        chmod(base.appendingPathComponent("a").path, 0o755)
        XCTAssertNotNil(PluginLoader(registry: HandlerRegistry()).load(path: path).plugin)

        // A sticky folder anyone can write (as /tmp): fine above, refused as the plugin folder.
        let sticky = base.appendingPathComponent("sticky")
        try FileManager.default.createDirectory(at: sticky.appendingPathComponent("mine"), withIntermediateDirectories: true)
        chmod(sticky.path, 0o1777)
        chmod(sticky.appendingPathComponent("mine").path, 0o755)
        let above = try PluginFixture.build("above.so", in: sticky.appendingPathComponent("mine"))
        let direct = try PluginFixture.build("direct.so", in: sticky, defines: ["SCHEME=\"other\""])
        XCTAssertNotNil(PluginLoader(registry: HandlerRegistry()).load(path: above).plugin)
        let refused = PluginLoader(registry: HandlerRegistry()).load(path: direct).diagnostic
        XCTAssertTrue(refused?.reason.contains("the folder \(sticky.path) is writable by others") == true,
                      "\(String(describing: refused))")
    }

    /// A link is judged by its own folder and owner too: a link in a safe folder to a
    /// plugin in a safe folder loads; the same link to a plugin in a folder others can
    /// write does not.
    func testALinkCountsTheFoldersOfBothEnds() throws {
        let safe = try PluginFixture.folder("links")
        let target = try PluginFixture.folder("target")
        let real = try PluginFixture.build("real.so", in: target)
        XCTAssertEqual(symlink(real, safe.appendingPathComponent("via-link.so").path), 0)
        XCTAssertNotNil(PluginLoader(registry: HandlerRegistry()).load(path: safe.appendingPathComponent("via-link.so").path).plugin)
        chmod(target.path, 0o777)
        let d = PluginLoader(registry: HandlerRegistry()).load(path: safe.appendingPathComponent("via-link.so").path).diagnostic
        XCTAssertTrue(d?.reason.contains("the folder \(target.path) is writable by others") == true, "\(String(describing: d))")
    }

    func testForeignOwner() throws {
        // Needs root to give a file away; `make test` runs as root (it installs packages).
        guard geteuid() == 0 else { return XCTFail("this test must run as root to chown a file to nobody") }
        let folder = try PluginFixture.folder()
        let path = try PluginFixture.build("foreign.so", in: folder, defines: ["SCHEME=\"other\""])
        XCTAssertEqual(chown(path, 65534, 65534), 0)
        let d = try refusal(in: folder, named: "foreign.so")
        XCTAssertEqual(d?.stage, .file)
        XCTAssertTrue(d?.reason.contains("owned by uid 65534") == true, "\(String(describing: d))")
    }

    func testEntryPointReturningAnError() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("initfail.so", in: folder, defines: ["INIT_FAIL"])
        let d = try refusal(in: folder, named: "initfail.so")
        XCTAssertEqual(d?.stage, .`init`)
        XCTAssertEqual(d?.detail, "the test plugin refuses to start")
        XCTAssertTrue(d?.reason.contains("returned 7") == true, "\(String(describing: d))")
    }

    /// A plugin whose code crashes or hangs as it is mapped or initialised is refused by
    /// the probe (porter-plugin-worker) with the stage and the signal; this process lives
    /// on and the good plugin beside it loads.
    func testCrashingAndHangingPluginsAreRefusedByTheProbe() throws {
        setenv("PORTER_PLUGIN_PROBE_TIMEOUT_MS", "1000", 1)
        defer { unsetenv("PORTER_PLUGIN_PROBE_TIMEOUT_MS") }
        for (name, define, stage, signal) in [("ctor.so", "CRASH_CONSTRUCTOR", PluginLoadStage.open, "SIGSEGV"),
                                              ("entry.so", "CRASH_ENTRY", .`init`, "SIGSEGV"),
                                              ("abort.so", "ABORT_ENTRY", .`init`, "SIGABRT"),
                                              ("hang.so", "HANG_ENTRY", .`init`, "SIGKILL")] {
            let folder = try PluginFixture.folder()
            try PluginFixture.build(name, in: folder, defines: [define])
            let d = try refusal(in: folder, named: name)
            XCTAssertEqual(d?.stage, stage, name)
            XCTAssertTrue(d?.reason.contains(signal) == true, "\(name): \(String(describing: d))")
        }
    }

    /// A plugin that passed its probe is not probed again while its file is unchanged (the
    /// cache, 0600, keyed by device, inode, size and modification time); a rebuilt file is.
    func testAProbedPluginIsRemembered() throws {
        let folder = try PluginFixture.folder()
        let path = try PluginFixture.build("cached.so", in: folder, defines: ["SCHEME=\"pcache\""])
        let before = PluginProbe.probesRun.current
        XCTAssertNotNil(PluginLoader(registry: HandlerRegistry()).load(path: path).plugin)
        XCTAssertEqual(PluginProbe.probesRun.current, before + 1, "probed once")
        XCTAssertNotNil(PluginLoader(registry: HandlerRegistry()).load(path: path).plugin)
        XCTAssertEqual(PluginProbe.probesRun.current, before + 1, "not probed again")
        if let cache = XDG.cacheHome().map({ $0 + "/porter/plugin-probes.json" }) {
            var st = stat()
            XCTAssertEqual(stat(cache, &st), 0)
            XCTAssertEqual(st.st_mode & 0o777, 0o600)
        }
        usleep(10_000)
        try PluginFixture.build("cached.so", in: folder, defines: ["SCHEME=\"pcache\"", "VERSION_BUMP"])
        _ = PluginLoader(registry: HandlerRegistry()).load(path: path)
        XCTAssertEqual(PluginProbe.probesRun.current, before + 2, "a changed file is probed again")
    }

    /// The control: the same constructor crash with the probe turned off takes `porter`
    /// down (SIGSEGV); with it, `porter plugins` reports the refusal and exits 0.
    func testTheProbeIsWhatKeepsTheProgramAlive() throws {
        let folder = try PluginFixture.folder()
        try PluginFixture.build("ctor.so", in: folder, defines: ["CRASH_CONSTRUCTOR"])
        let without = try runProcess(porterBinary, ["plugins", "--plugins-in-process", "--plugin-path", folder.path],
                                     environment: ["PORTER_PLUGIN_PROBE": "0"])
        XCTAssertEqual(without.status, SIGSEGV, "in-process, the crash is the program's (killed by SIGSEGV): \(without.stderr)")
        let with = try runProcess(porterBinary, ["plugins", "--plugin-path", folder.path])
        XCTAssertEqual(with.status, 0, with.stderr)
        XCTAssertTrue((with.stdout + with.stderr).contains("SIGSEGV"), with.stdout + with.stderr)
    }

    func testSchemeConflictWithAnEarlierPlugin() throws {
        let folder = try PluginFixture.folder()
        // "a-" sorts before "zz-good.so": the later one is refused.
        try PluginFixture.build("a-first.so", in: folder)
        try PluginFixture.build("zz-good.so", in: folder)
        let registry = HandlerRegistry()
        let verdicts = PluginLoader(registry: registry).loadAll(from: [folder.path])
        XCTAssertNotNil(verdicts[0].plugin)
        XCTAssertEqual(verdicts[1].diagnostic?.stage, .register)
        XCTAssertTrue(verdicts[1].diagnostic?.reason.contains("already served by plugin") == true, "\(verdicts)")
        XCTAssertEqual(registry.registrations.count, 1)
    }

    func testBuiltInSchemesAreNotOverriddenUnlessAllowed() throws {
        let folder = try PluginFixture.folder()
        let path = try PluginFixture.build("http.so", in: folder, defines: ["SCHEME=\"http\""])
        let registry = HandlerRegistry()
        Porter.bootstrap(registry: registry, loadPlugins: false)
        let d = PluginLoader(registry: registry).load(path: path).diagnostic
        XCTAssertEqual(d?.stage, .register)
        XCTAssertTrue(d?.reason.contains("scheme 'http' is built in") == true, "\(String(describing: d))")
        XCTAssertEqual(registry.registrations.filter { $0.schemes.contains("http") }.count, 1)

        let allowed = PluginLoader(registry: registry, allowOverride: ["http"]).load(path: path)
        XCTAssertNotNil(allowed.plugin, "\(allowed)")
        XCTAssertEqual(registry.factory(for: Request(url: URL(string: "http://x/")!))?.name, "ptest plugin (http)")
    }

    func testSearchPathOrderAndSetuidRule() {
        let env = ["PORTER_PLUGIN_PATH": "/a:/b", "HOME": "/home/u"]
        XCTAssertEqual(PluginLoader.searchPath(environment: env, privileged: false),
                       ["/a", "/b", "/home/u/.local/share/porter/plugins", "/usr/local/lib/porter/plugins",
                        "/usr/lib/porter/plugins"])
        XCTAssertEqual(PluginLoader.searchPath(environment: env, privileged: true),
                       ["/home/u/.local/share/porter/plugins", "/usr/local/lib/porter/plugins", "/usr/lib/porter/plugins"])
        XCTAssertEqual(PluginLoader.searchPath(environment: ["XDG_DATA_HOME": "/x", "HOME": "/h"], privileged: false).first,
                       "/x/porter/plugins")
        XCTAssertFalse(PluginLoader.isPrivileged)
    }

    func testSearchPathHasTheInstalledPrefixsPluginFolder() {
        let env = ["HOME": "/home/u"]
        // A program in PREFIX/bin looks in PREFIX/lib/porter/plugins, after the user's folder.
        XCTAssertEqual(PluginLoader.searchPath(environment: env, privileged: false, executable: "/opt/porter/bin/porter"),
                       ["/home/u/.local/share/porter/plugins", "/opt/porter/lib/porter/plugins",
                        "/usr/local/lib/porter/plugins", "/usr/lib/porter/plugins"])
        XCTAssertEqual(PluginLoader.searchPath(environment: env, privileged: false, executable: "/tmp/stage/usr/bin/porter")[1],
                       "/tmp/stage/usr/lib/porter/plugins")
        // Installed in /usr or /usr/local: each folder once, in the usual order.
        let usual = ["/home/u/.local/share/porter/plugins", "/usr/local/lib/porter/plugins", "/usr/lib/porter/plugins"]
        XCTAssertEqual(PluginLoader.searchPath(environment: env, privileged: false, executable: "/usr/local/bin/porter"), usual)
        XCTAssertEqual(PluginLoader.searchPath(environment: env, privileged: false, executable: "/usr/bin/porter"), usual)
        XCTAssertEqual(PluginLoader.installedPluginFolder(executable: "/bin/porter"), "/lib/porter/plugins")
        // Not in a bin folder (a build folder), a relative path, unknown: nothing added.
        for exe in ["/src/porter/.build/debug/porter", "bin/porter", "/porter", nil] as [String?] {
            XCTAssertNil(PluginLoader.installedPluginFolder(executable: exe), "\(String(describing: exe))")
            XCTAssertEqual(PluginLoader.searchPath(environment: env, privileged: false, executable: exe), usual)
        }
        // A privileged (setuid) program ignores where it was started from: a hard link in
        // the caller's own ~/bin must not make ~/lib/porter/plugins trusted.
        XCTAssertEqual(PluginLoader.searchPath(environment: env, privileged: true, executable: "/home/u/bin/porter"), usual)
    }

    func testCandidatesAreSharedObjectsOnly() throws {
        let folder = try PluginFixture.folder()
        for name in ["b.so", "a.so.1", "README", "c.txt"] {
            XCTAssertTrue(FileManager.default.createFile(atPath: folder.appendingPathComponent(name).path, contents: Data()))
        }
        XCTAssertEqual(PluginLoader.candidates(in: folder.path).map { URL(fileURLWithPath: $0).lastPathComponent },
                       ["a.so.1", "b.so"])
        XCTAssertEqual(PluginLoader.candidates(in: folder.path + "/missing"), [])
    }
}

/// The README's Swift plugin (Examples/SwiftPlugin, built by SwiftPM as a .so) loads and
/// serves its scheme: PorterPluginKit end to end with the smallest plugin.
final class SwiftPluginTests: XCTestCase {
    func testReadmeSwiftPlugin() async throws {
        let path = GopherTests.buildDir + "/libEchoPlugin.so"
        let registry = HandlerRegistry()
        let verdict = PluginLoader(registry: registry).load(path: path)
        let plugin = try XCTUnwrap(verdict.plugin, "\(verdict)")
        XCTAssertEqual(plugin.name, "echo")
        var config = SessionConfiguration.ephemeral
        config.registry = registry
        let (data, response) = try await Session(configuration: config).data(from: URL(string: "echo://hello/there")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "echo://hello/there")
        XCTAssertEqual(response.mimeType, "text/plain")
    }
}
