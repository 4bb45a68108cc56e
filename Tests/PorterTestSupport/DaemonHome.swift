import Foundation

/// A private home for one test's porterd: its runtime, state, cache, data and config
/// folders (porterd's engine keeps the user's cache, cookies and credentials: here the
/// test's own), and the porterd just built.
public struct DaemonHome {
    public let path: String

    public init(_ prefix: String) throws {
        path = NSTemporaryDirectory() + "\(prefix)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path + "/run", withIntermediateDirectories: true)
    }

    /// porterd exits by itself after this many idle seconds (no connection, no transfer).
    /// Long enough that a loaded machine's pause between two steps of a test that need the
    /// same porterd (a CLI run after a session let go, say) cannot outlast it; `remove()`
    /// ends the test's porterd anyway. No test waits for the idle exit.
    public static let idleExitSeconds = 60

    public var environment: [String: String] {
        let built = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug/porterd").path
        return ["XDG_RUNTIME_DIR": path + "/run", "XDG_STATE_HOME": path + "/state", "XDG_CACHE_HOME": path + "/cache",
                "XDG_DATA_HOME": path + "/data", "XDG_CONFIG_HOME": path + "/config", "PORTERD_IDLE_EXIT": String(Self.idleExitSeconds),
                "PORTERD_PATH": ProcessInfo.processInfo.environment["PORTERD_BIN"] ?? built]
    }

    /// For sessions made in this process.
    public func install() { for (k, v) in environment { setenv(k, v, 1) } }

    public var daemonPID: pid_t? {
        (try? String(contentsOfFile: path + "/run/porter/porterd.pid", encoding: .utf8))
            .flatMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    public func remove() {
        if let pid = daemonPID { kill(pid, SIGKILL) }
        try? FileManager.default.removeItem(atPath: path)
    }
}

