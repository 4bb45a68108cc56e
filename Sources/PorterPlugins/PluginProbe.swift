import CPorterIPC
import Foundation
import PorterCore
import PorterPluginKit
import PorterStorage

/// Before a plugin's code runs in this process, `porter-plugin-worker --probe` maps the
/// same descriptor in a process of its own and calls the entry point: a plugin whose
/// constructor or entry point crashes (or hangs) is refused with the stage it reached and
/// the signal, and the host never runs it. A plugin that passed is remembered by its
/// file's device, inode, size and modification time (in memory and in
/// `$XDG_CACHE_HOME/porter/plugin-probes.json`, 0600, with what each declared), so a
/// warm start neither probes again nor maps the plugin here.
///
/// No worker program (`PluginWorker.program`) or `PORTER_PLUGIN_PROBE=0`: no probe.
enum PluginProbe {
    /// How long a probe may take (`PORTER_PLUGIN_PROBE_TIMEOUT_MS`, default 10 s).
    static var timeoutMilliseconds: Int32 {
        ProcessInfo.processInfo.environment["PORTER_PLUGIN_PROBE_TIMEOUT_MS"].flatMap { Int32($0) }.map { max(100, $0) } ?? 10_000
    }

    /// Descriptions of plugins that passed, by file key.
    private static let passed = Locked<[String: PluginDescription]?>(nil)
    /// Probes run by this process (tests).
    static let probesRun = Locked(0)

    enum Outcome {
        /// Its code ran in the probe without harm; what it declared (nil when not known).
        case passed(PluginDescription?)
        case refused(PluginDiagnostic)
        /// No probe ran (no worker, or turned off): in-process loading decides.
        case unavailable
    }

    /// Runs the plugin's constructor and entry point in a probe process (or remembers
    /// that it did). `describe`: the caller needs the description (isolated mode), so the
    /// probe runs even when `PORTER_PLUGIN_PROBE=0`.
    static func check(_ file: PluginFile, path: String, describe: Bool = false) -> Outcome {
        let env = ProcessInfo.processInfo.environment
        guard describe || env["PORTER_PLUGIN_PROBE"] != "0", let worker = PluginWorker.program(environment: env) else {
            return .unavailable
        }
        var st = stat()
        guard fstat(file.fd, &st) == 0 else { return .unavailable }
        let key = "\(st.st_dev):\(st.st_ino):\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
        if let known = cached()[key] { return .passed(known) }
        var out = [CChar](repeating: 0, count: 65536)
        probesRun.withLock { $0 += 1 }
        let marker: String? = worker.isSelf ? PluginWorker.selfMarker : nil
        let status = marker.withOptionalCString { m in
            porter_ipc_probe_plugin(worker.path, m, file.fd, &out, out.count, timeoutMilliseconds)
        }
        let text = CErrorBuffer.read(out)
        let lines = text.split(separator: "\n").map(String.init)
        let stage = lines.last { $0.hasPrefix("STAGE ") }.map { String($0.dropFirst(6)) } ?? "open"
        let reached: PluginLoadStage = stage == "init" ? .`init` : stage == "symbol" ? .symbol : .open
        if status < 0, status != -1000 {
            let signal = -status
            let name = signal == SIGKILL ? "SIGKILL (no answer in \(timeoutMilliseconds / 1000) s)" : signalName(signal)
            return .refused(PluginDiagnostic(path: path, stage: reached,
                                             reason: "the plugin's code crashed in a probe process (\(name)); it was not loaded",
                                             detail: nil))
        }
        // The probe's own answer is its last line (a plugin's constructor could print first).
        if status == 0, let line = lines.last(where: { $0.hasPrefix("RESULT ") || $0.hasPrefix("REFUSED ") }), line.hasPrefix("RESULT "),
           let description = try? JSONDecoder().decode(PluginDescription.self, from: Data(line.dropFirst(7).utf8)) {
            remember(key, description)
            return .passed(description)
        }
        if status == 0, let line = lines.last(where: { $0.hasPrefix("RESULT ") || $0.hasPrefix("REFUSED ") }), line.hasPrefix("REFUSED "),
           var diagnostic = try? JSONDecoder().decode(PluginDiagnostic.self, from: Data(line.dropFirst(8).utf8)) {
            diagnostic.path = path
            return .refused(diagnostic)
        }
        // A worker that could not start or said something else: in-process loading decides.
        return .unavailable
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

    private static var cacheFile: String? { XDG.cacheHome().map { $0 + "/porter/plugin-probes.json" } }

    private static func cached() -> [String: PluginDescription] {
        passed.withLock { known in
            if let known { return known }
            var loaded: [String: PluginDescription] = [:]
            if let f = cacheFile, (try? PrivateFiles.refuseIfOthersCanRead(f, what: "the plugin probe cache")) != nil,
               let data = FileManager.default.contents(atPath: f),
               let table = try? JSONDecoder().decode([String: PluginDescription].self, from: data) {
                loaded = table
            }
            known = loaded
            return loaded
        }
    }

    private static func remember(_ key: String, _ description: PluginDescription) {
        let all = passed.withLock { known -> [String: PluginDescription] in
            var table = known ?? [:]
            // A bounded table: drop the oldest half at random when it grows too big.
            if table.count >= 1000 { table = Dictionary(uniqueKeysWithValues: table.prefix(500).map { ($0.key, $0.value) }) }
            table[key] = description
            known = table
            return table
        }
        guard let f = cacheFile, let data = try? JSONEncoder().encode(all) else { return }
        do {
            try PrivateFiles.makeFolder((f as NSString).deletingLastPathComponent)
            _ = PrivateFiles.writeAtomically(data, to: f)
        } catch {
            // Without a cache the next start probes again: slower, never wrong.
        }
    }
}
