import Foundation

/// The XDG base directories Porter keeps its files under (plugins, cookies, credentials,
/// the cache).
public enum XDG {
    /// `$XDG_DATA_HOME`, else `$HOME/.local/share`; nil when neither is an absolute path.
    public static func dataHome(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        base(environment, "XDG_DATA_HOME", "/.local/share")
    }

    /// `$XDG_CACHE_HOME`, else `$HOME/.cache`; nil when neither is an absolute path.
    public static func cacheHome(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        base(environment, "XDG_CACHE_HOME", "/.cache")
    }

    /// `$XDG_STATE_HOME`, else `$HOME/.local/state`; nil when neither is an absolute path.
    public static func stateHome(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        base(environment, "XDG_STATE_HOME", "/.local/state")
    }

    /// `$XDG_RUNTIME_DIR` when it is an absolute path, else nil (the caller picks a
    /// fallback; see the background sessions' socket).
    public static func runtimeDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        environment["XDG_RUNTIME_DIR"].flatMap { $0.hasPrefix("/") ? $0 : nil }
    }

    /// `$XDG_CONFIG_HOME`, else `$HOME/.config`; nil when neither is an absolute path.
    public static func configHome(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        base(environment, "XDG_CONFIG_HOME", "/.config")
    }

    private static func base(_ environment: [String: String], _ variable: String, _ underHome: String) -> String? {
        if let v = environment[variable], v.hasPrefix("/") { return v }
        if let home = environment["HOME"], home.hasPrefix("/") { return home + underHome }
        return nil
    }
}
