import Foundation

/// Porter's helper programs (porterd, porter-plugin-worker): where to find one.
public enum HelperProgram {
    /// The executable `name`: `$override` when it names one, else the file beside this
    /// program (`/proc/self/exe`), else the first on PATH; nil when there is none.
    public static func find(_ name: String, override variable: String,
                            environment env: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if let p = env[variable], access(p, X_OK) == 0 { return p }
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            // The kernel's /proc/self/exe is an absolute path: its folder is what precedes
            // the last slash (no Foundation path methods, which trap on some names).
            let folder = exe.lastIndex(of: "/").map { String(exe[..<$0]) } ?? "."
            let beside = (folder.isEmpty ? "" : folder) + "/" + name
            if access(beside, X_OK) == 0 { return beside }
        }
        for dir in (env["PATH"] ?? "/usr/local/bin:/usr/bin").split(separator: ":") {
            let p = String(dir) + "/" + name
            if access(p, X_OK) == 0 { return p }
        }
        return nil
    }
}
