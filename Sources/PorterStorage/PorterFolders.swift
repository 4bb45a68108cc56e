import Foundation
import PorterCore

extension XDG {
    /// `$XDG_STATE_HOME/porter` (else `~/.local/state/porter`): porterd's journal, and the
    /// partial and finished files of background transfers (which resume data may name).
    public static func porterStateFolder(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        stateHome(environment: environment).map { $0 + "/porter" }
    }

    /// Every folder Porter keeps its own files in — `porter` under the data, state, cache,
    /// config and runtime folders, each as this environment names it and as the stores'
    /// fallback (the password database's home folder) would, and the runtime fallback
    /// `/tmp/porter-UID` — for the plugin sandbox, which never grants any of them.
    public static func porterFolders(environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        var folders: [String] = []
        for base in [XDG.dataHome(environment: environment), XDG.stateHome(environment: environment), XDG.cacheHome(environment: environment),
                     XDG.configHome(environment: environment), XDG.runtimeDirectory(environment: environment)] {
            if let base { folders.append(base + "/porter") }
        }
        // The stores fall back on the account's home folder when HOME is not usable.
        let account = NSHomeDirectory()
        if account.hasPrefix("/") {
            for tail in ["/.local/share", "/.local/state", "/.cache", "/.config"] { folders.append(account + tail + "/porter") }
        }
        folders.append("/tmp/porter-\(getuid())")
        var seen = Set<String>()
        return folders.filter { seen.insert($0).inserted }
    }
}
