import CPorterIPC
import Foundation
import PorterCore

/// Before a plugin's code runs in this process, `porter-plugin-worker --probe` maps the
/// same descriptor in a process of its own and calls the entry point: a plugin whose
/// constructor or entry point crashes (or hangs) is refused with the stage it reached and
/// the signal, and the host never runs it. A plugin that passed is remembered by its
/// file's device, inode, size and modification time (in memory and in
/// `$XDG_CACHE_HOME/porter/plugin-probes`, 0600), so a warm start does not probe again.
///
/// No worker found (beside this program, `$PORTER_PLUGIN_WORKER`, or on PATH) or
/// `PORTER_PLUGIN_PROBE=0`: no probe, as before.
enum PluginProbe {
    /// How long a probe may take (`PORTER_PLUGIN_PROBE_TIMEOUT_MS`, default 10 s).
    static var timeoutMilliseconds: Int32 {
        ProcessInfo.processInfo.environment["PORTER_PLUGIN_PROBE_TIMEOUT_MS"].flatMap { Int32($0) }.map { max(100, $0) } ?? 10_000
    }

    private static let passed = Locked<Set<String>?>(nil)
    /// Probes run by this process (tests).
    static let probesRun = Locked(0)

    /// Nil when the plugin may be loaded here; else why not.
    static func check(_ file: PluginFile, path: String) -> PluginDiagnostic? {
        let env = ProcessInfo.processInfo.environment
        guard env["PORTER_PLUGIN_PROBE"] != "0", let worker = workerExecutable(env) else { return nil }
        var st = stat()
        guard fstat(file.fd, &st) == 0 else { return nil }
        let key = "\(st.st_dev):\(st.st_ino):\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
        if cached().contains(key) { return nil }
        var out = [CChar](repeating: 0, count: 4096)
        probesRun.withLock { $0 += 1 }
        let status = porter_ipc_probe_plugin(worker, file.fd, &out, out.count, timeoutMilliseconds)
        let text = String(decoding: out.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let lines = text.split(separator: "\n").map(String.init)
        let stage = lines.last { $0.hasPrefix("STAGE ") }.map { String($0.dropFirst(6)) } ?? "open"
        let reached: PluginLoadStage = stage == "init" ? .`init` : stage == "symbol" ? .symbol : .open
        if status < 0, status != -1000 {
            let signal = -status
            let name = signal == SIGKILL ? "SIGKILL (no answer in \(timeoutMilliseconds / 1000) s)" : signalName(signal)
            return PluginDiagnostic(path: path, stage: reached,
                                    reason: "the plugin's code crashed in a probe process (\(name)); it was not loaded",
                                    detail: nil)
        }
        if status == 0, lines.contains(where: { $0.hasPrefix("OK") }) {
            remember(key)
        }
        // Other outcomes (a refusal the in-process checks will report the same way, or a
        // worker that could not start): the usual loading decides.
        return nil
    }

    static func signalName(_ s: Int32) -> String {
        switch s {
        case SIGSEGV: return "SIGSEGV"
        case SIGBUS: return "SIGBUS"
        case SIGABRT: return "SIGABRT"
        case SIGILL: return "SIGILL"
        case SIGFPE: return "SIGFPE"
        case SIGKILL: return "SIGKILL"
        case SIGTERM: return "SIGTERM"
        default: return "signal \(s)"
        }
    }

    static func workerExecutable(_ env: [String: String]) -> String? {
        HelperProgram.find("porter-plugin-worker", override: "PORTER_PLUGIN_WORKER", environment: env)
    }

    private static var cacheFile: String? { XDG.cacheHome().map { $0 + "/porter/plugin-probes" } }

    private static func cached() -> Set<String> {
        passed.withLock { known in
            if let known { return known }
            var loaded = Set<String>()
            if let f = cacheFile, (try? PrivateFiles.refuseIfOthersCanRead(f, what: "the plugin probe cache")) != nil,
               let text = try? String(contentsOfFile: f, encoding: .utf8) {
                loaded = Set(text.split(separator: "\n").map(String.init).prefix(10_000))
            }
            known = loaded
            return loaded
        }
    }

    private static func remember(_ key: String) {
        let all = passed.withLock { known -> Set<String> in
            var s = known ?? []
            s.insert(key)
            known = s
            return s
        }
        guard let f = cacheFile else { return }
        do {
            try PrivateFiles.makeFolder((f as NSString).deletingLastPathComponent)
            _ = PrivateFiles.writeAtomically(Data(all.sorted().joined(separator: "\n").utf8), to: f)
        } catch {
            // Without a cache the next start probes again: slower, never wrong.
        }
    }
}
