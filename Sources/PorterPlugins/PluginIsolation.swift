import CPorterIPC
import CPorterPlugin
import Foundation
import Logging
import PorterCore
import PorterStorage
import PorterIPC

// How a plugin is isolated: its mode, the limits of its worker, its status, the description
// a worker gives of it, and the paths it declared.

/// Where a plugin's code runs.
public enum PluginMode: String, Sendable, Codable, CustomStringConvertible {
    /// In a worker process of its own (`porter-plugin-worker`), sandboxed: a crash fails
    /// its loads with `.pluginCrashed`, never the program. The default for plugin files.
    case isolated
    /// Inside the program: fastest, unprotected. Plugins linked in with
    /// `register(entry:name:)` always run so.
    case inProcess = "in-process"
    public var description: String { rawValue }
}

/// How plugin files are run: which ones in process, and the limits of the workers of the
/// others. `PluginIsolation.default` reads the environment:
/// - `PORTER_PLUGINS_IN_PROCESS=1`: every plugin in process (the CLI's `--plugins-in-process`);
/// - `PORTER_PLUGIN_READ_PATHS`, `PORTER_PLUGIN_WRITE_PATHS`: colon-separated paths every
///   worker may also read / write (e.g. a key file outside `~/.ssh`);
/// - `PORTER_PLUGIN_MEMORY_MB` (default 4096), `PORTER_PLUGIN_CPU_SECONDS` (default none);
/// - `PORTER_PLUGIN_STOP_TIMEOUT_MS` (default 5000).
public struct PluginIsolation: Sendable {
    public var defaultMode: PluginMode = .isolated
    /// File names ("libgopher.so") or paths of plugins to run in process anyway.
    public var inProcess: Set<String> = []
    /// Address-space limit of a worker (RLIMIT_AS), MiB; 0: none.
    public var memoryLimitMB: UInt64 = 4096
    /// CPU seconds a worker may use in its life (RLIMIT_CPU); 0: none.
    public var cpuLimitSeconds: UInt64 = 0
    /// Paths every worker may read, or write, besides what each plugin declares.
    public var readablePaths: [String] = []
    public var writablePaths: [String] = []
    /// A worker that has not finished a stopped load's `destroy` this long after `stop`
    /// is killed (its other loads fail with `.pluginCrashed`).
    public var stopTimeout: TimeInterval = 5
    /// A plugin whose worker dies `crashLimit` times within `crashWindow` seconds is
    /// disabled for the rest of the process.
    public var crashLimit = 3
    public var crashWindow: TimeInterval = 60
    /// With no worker program (`PluginWorker`: no `porter-plugin-worker`, and the program
    /// did not call `Porter.bootstrap()` / `PluginWorker.runIfRequested()` so that it can be
    /// its own worker), plugin files meant to be isolated are refused (an error is logged
    /// and the verdict says why); true runs them in process instead, unprotected. Isolation
    /// is never given up silently.
    public var inProcessWithoutWorker = false

    /// The most loads of one plugin file that may await their `destroy` at once in one
    /// process (a worker, or the host for an in-process plugin): ended or stopped, their
    /// destroy queued and not returned. While that many wait, a new load's start waits,
    /// in order, for one of those destroys to return, so what finished loads hold stays
    /// bounded however fast loads come (`PluginLoadGate`). Running loads do not count.
    public static let liveLoadLimit = 64

    public init() {}

    public static var `default`: PluginIsolation {
        let env = ProcessInfo.processInfo.environment
        var p = PluginIsolation()
        if env["PORTER_PLUGINS_IN_PROCESS"] == "1" { p.defaultMode = .inProcess }
        p.readablePaths = env["PORTER_PLUGIN_READ_PATHS"].map { $0.split(separator: ":").map(String.init) } ?? []
        p.writablePaths = env["PORTER_PLUGIN_WRITE_PATHS"].map { $0.split(separator: ":").map(String.init) } ?? []
        if let mb = env["PORTER_PLUGIN_MEMORY_MB"].flatMap(UInt64.init) { p.memoryLimitMB = mb }
        if let s = env["PORTER_PLUGIN_CPU_SECONDS"].flatMap(UInt64.init) { p.cpuLimitSeconds = s }
        if let ms = env["PORTER_PLUGIN_STOP_TIMEOUT_MS"].flatMap(Double.init) { p.stopTimeout = max(0.05, ms / 1000) }
        return p
    }

    func mode(for path: String) -> PluginMode {
        if inProcess.contains(path) || inProcess.contains(PathText.lastComponent(of: path)) { return .inProcess }
        return defaultMode
    }
}

/// An isolated plugin's state, for programs and `porter plugins`.
public struct IsolatedPluginStatus: Sendable {
    public var path: String
    public var name: String
    /// The running worker, if any.
    public var workerPID: pid_t?
    /// Workers started so far (a crash makes the next load start another).
    public var workersStarted: Int
    /// Why the plugin no longer runs (it kept crashing), or nil.
    public var disabledReason: String?
    /// What the current (or last) worker's sandbox enforces, as it reported.
    public var sandbox: String?
    /// What the plugin declared it reads and writes (with the paths every worker gets),
    /// as written ("~/..." or absolute); refused ones are not granted.
    public var readPaths: [String] = []
    public var writePaths: [String] = []
    /// Whether its workers may make TCP connections (a scheme declared
    /// PORTER_SCHEME_NEEDS_NETWORK, or a legacy plugin).
    public var network = false
    /// The local services it declared (ABI 1.3 `needs`: "ssh-agent"), the only ones the
    /// host connects it to.
    public var needs: [String] = []
}

/// What a plugin's descriptor says, read in a probe process (so the host need not run the
/// plugin's code to know it) and remembered per file.
struct PluginDescription: Codable, Sendable, Equatable {
    var name: String
    var version: String
    var schemes: [PluginScheme]
    var readPaths: [String]
    var writePaths: [String]
    var subscriptions: [String]
    /// The ABI minor the plugin was built for: before 1.2 it could not declare paths or
    /// expect its flags to be enforced, so it runs under the legacy profile.
    var abiMinor: Int
    /// The local services it may ask the host for (ABI 1.3 `needs`, PORTER_NEED_* bits
    /// this host knows). What the host checks a worker's `connectService` against: the
    /// request itself says only which service.
    var needs: UInt32

    var isLegacy: Bool { abiMinor < 2 }

    /// Why this description cannot be used (it is read from a probe's output, which the
    /// plugin's own code could have written to), or nil.
    var problem: String? {
        if name.isEmpty || version.isEmpty { return "no name or version" }
        if schemes.isEmpty || schemes.count > 64 { return "\(schemes.count) schemes (1 to 64)" }
        if let bad = schemes.first(where: { !PluginLoader.isValidScheme($0.name) }) { return "invalid scheme '\(bad.name)'" }
        if let why = schemes.lazy.compactMap({ $0.problem(abiMinor: self.abiMinor) }).first { return why }
        if readPaths.count > 32 || writePaths.count > 32 { return "too many declared paths" }
        if let bad = readPaths.first(where: { !Self.acceptable($0, write: false) })
            ?? writePaths.first(where: { !Self.acceptable($0, write: true) }) {
            return "declared path '\(bad)' is not allowed"
        }
        for (paths, write) in [(readPaths, false), (writePaths, true)] {
            for p in paths {
                if let why = DeclaredPaths.refusal(p, write: write) { return "declared \(write ? "write" : "read") path '\(p)' is refused: \(why)" }
            }
        }
        if abiMinor < 0 || abiMinor > Int(PORTER_PLUGIN_ABI_MINOR) { return "ABI minor \(abiMinor)" }
        if needs & ~LocalService.knownNeeds != 0 || (abiMinor < 3 && needs != 0) { return "needs \(needs)" }
        return nil
    }

    /// Whether a declared path may be granted: no `..`; reads anywhere ("~/x" or
    /// absolute); writes only below the home folder at least two levels down
    /// ("~/.ssh/known_hosts", never "~/.bashrc" or "~/") or below /tmp.
    static func acceptable(_ path: String, write: Bool) -> Bool {
        let parts = path.split(separator: "/", omittingEmptySubsequences: true)
        guard !parts.contains(".."), !parts.contains("."), path.utf8.count < 1024 else { return false }
        if path.hasPrefix("~/") {
            return parts.count >= (write ? 3 : 2)
        }
        guard path.hasPrefix("/") else { return false }
        return !write || (path.hasPrefix("/tmp/") && parts.count >= 2)
    }
}

/// The bounds of a plugin's declared paths (and of `PORTER_PLUGIN_READ_PATHS` /
/// `PORTER_PLUGIN_WRITE_PATHS`): compared as real paths (links and `~` resolved), never
/// as text.
/// - Never `/`, the home folder or a folder holding it, or `/home`.
/// - Never Porter's own folders (`XDG.porterFolders`: the cookie database, credentials,
///   the cache, porterd's state and socket), inside or holding them; nor /dev or /proc.
/// - For writing, never what runs code or grants a login: `~/.ssh` itself,
///   `~/.ssh/authorized_keys*`, `~/.ssh/rc`, `~/.ssh/config`, `~/.config/autostart`,
///   `~/.config/systemd`, `~/.local/bin`, the shell and session start-up files, nor the
///   plugin folders — a path that is, is inside or holds one of them. (Reading them is
///   not refused: an ssh plugin reads `~/.ssh`.)
enum DeclaredPaths {
    /// Below the home folder, for writing: the whole subtree of each, and what holds it.
    static let homeSubtrees = [
        ".ssh/rc", ".ssh/config", ".ssh/environment", ".config/autostart", ".config/systemd", ".config/environment.d",
        ".local/bin", ".profile", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc", ".zprofile",
        ".zshenv", ".zlogin", ".zlogout", ".login", ".logout", ".cshrc", ".tcshrc", ".xprofile", ".xinitrc",
        ".pam_environment", ".config/fish", ".bashrc.d",
    ]
    /// Below the home folder, for writing: names starting so (in that folder).
    static let homePrefixes = [(".ssh", "authorized_keys"), ("", ".xsession")]

    /// "~/x" with the home folder, or an absolute path; nil otherwise.
    static func expand(_ path: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if path.hasPrefix("~/") {
            guard let home = environment["HOME"], home.hasPrefix("/") else { return nil }
            return home + String(path.dropFirst())
        }
        return path.hasPrefix("/") ? path : nil
    }

    /// The real path: the longest part that exists resolved (links followed), the rest
    /// appended as written.
    static func resolve(_ path: String) -> String {
        var head = path
        var tail: [String] = []
        while head.count > 1 {
            if let real = realpath(head, nil) {
                defer { free(real) }
                let base = String(cString: real)
                return tail.isEmpty ? base : (base == "/" ? "" : base) + "/" + tail.reversed().joined(separator: "/")
            }
            let cut = head.lastIndex(of: "/") ?? head.startIndex
            tail.append(String(head[head.index(after: cut)...]))
            head = cut == head.startIndex ? "/" : String(head[..<cut])
        }
        return "/" + tail.reversed().joined(separator: "/")
    }

    /// `inner` is `outer` or below it.
    static func within(_ inner: String, _ outer: String) -> Bool {
        outer == "/" || inner == outer || inner.hasPrefix(outer + "/")
    }

    /// Why `path` may not be granted, or nil.
    static func refusal(_ path: String, write: Bool, environment: [String: String] = ProcessInfo.processInfo.environment,
                        pluginFolders: [String]? = nil) -> String? {
        guard PluginDescription.acceptable(path, write: write) else {
            return "reads: \"~/x\" or absolute; writes: \"~/x/y\" or under /tmp; no \"..\""
        }
        guard let expanded = expand(path, environment: environment) else { return "there is no home folder (HOME)" }
        let real = resolve(expanded)
        if real == "/" { return "it is the root folder" }
        let home = environment["HOME"].flatMap { $0.hasPrefix("/") ? resolve($0) : nil }
        if let home, home != "/", within(home, real) { return "it is or holds the home folder" }
        if within(resolve("/home"), real) { return "it is or holds /home" }
        if within(real, "/dev") || within(real, "/proc") { return "it is a device or process file" }
        for f in XDG.porterFolders(environment: environment).map(resolve) where within(real, f) || within(f, real) {
            return "it is, is inside or holds Porter's own folder \(f)"
        }
        guard write else { return nil }
        for f in (pluginFolders ?? PluginLoader.searchPath(environment: environment)).map(resolve) where within(real, f) || within(f, real) {
            return "it is, is inside or holds the plugin folder \(f)"
        }
        guard let home, home != "/" else { return nil }
        if within(home + "/.ssh", real) { return "it is or holds ~/.ssh" }
        for entry in homeSubtrees {
            let f = home + "/" + entry
            if within(real, f) || within(f, real) { return "it is, is inside or holds ~/\(entry), which runs code or grants logins" }
        }
        for (folder, prefix) in homePrefixes {
            let base = folder.isEmpty ? home : home + "/" + folder
            guard real.hasPrefix(base + "/") else { continue }
            let first = real.dropFirst(base.count + 1).split(separator: "/").first.map(String.init) ?? ""
            if first.hasPrefix(prefix) { return "it is or is inside ~/\(folder.isEmpty ? "" : folder + "/")\(prefix)*, which runs code or grants logins" }
        }
        return nil
    }
}
