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

    /// Every folder Porter keeps its own files in — `porter` under the data, state, cache,
    /// config and runtime folders, each as this environment names it and as the stores'
    /// fallback (the password database's home folder) would, and the runtime fallback
    /// `/tmp/porter-UID` — for the plugin sandbox, which never grants any of them.
    public static func porterFolders(environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        var folders: [String] = []
        for base in [dataHome(environment: environment), stateHome(environment: environment), cacheHome(environment: environment),
                     configHome(environment: environment), runtimeDirectory(environment: environment)] {
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

    private static func base(_ environment: [String: String], _ variable: String, _ underHome: String) -> String? {
        if let v = environment[variable], v.hasPrefix("/") { return v }
        if let home = environment["HOME"], home.hasPrefix("/") { return home + underHome }
        return nil
    }
}

/// The persistent stores' files: folders 0700, files 0600, never read when others may
/// read them, replaced whole by rename.
public enum PrivateFiles {
    /// Creates `folder` (and its parents) with mode 0700, then insists that the folder is
    /// really this user's: a real folder (not a symbolic link), owned by this user, and
    /// 0700 afterwards. A folder someone else owns (whose chmod would fail) or a planted
    /// link is refused, never used.
    package static func makeFolder(_ folder: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw PorterError(.cannotCreateFile, "cannot create \(folder): \(error.localizedDescription)")
        }
        try checkOwnFolder(folder)
    }

    /// Throws unless `folder` is a real folder owned by this user, mode 0700 (set here).
    package static func checkOwnFolder(_ folder: String) throws {
        var st = stat()
        guard lstat(folder, &st) == 0 else {
            throw PorterError(.cannotOpenFile, "cannot inspect \(folder)", cause: .errno(errno))
        }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            throw PorterError(.noPermissionsToReadFile,
                              "refusing \(folder): it is \(st.st_mode & S_IFMT == S_IFLNK ? "a symbolic link" : "not a folder"); a store folder must be a real folder of this user's")
        }
        guard st.st_uid == geteuid() else {
            throw PorterError(.noPermissionsToReadFile,
                              "refusing \(folder): it is owned by uid \(st.st_uid), not by this user (\(geteuid()))")
        }
        if st.st_mode & 0o7777 != 0o700, chmod(folder, 0o700) != 0 {
            throw PorterError(.noPermissionsToReadFile, "cannot make \(folder) private (chmod 700)", cause: .errno(errno))
        }
    }

    /// Throws when `path` exists and is not a regular file of this user's (a planted
    /// symbolic link, a FIFO, someone else's file).
    package static func refuseIfNotOwnRegularFile(_ path: String, what: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        guard st.st_mode & S_IFMT == S_IFREG else {
            throw PorterError(.noPermissionsToReadFile,
                              "refusing \(what) \(path): it is \(st.st_mode & S_IFMT == S_IFLNK ? "a symbolic link" : "not a regular file")")
        }
        guard st.st_uid == geteuid() else {
            throw PorterError(.noPermissionsToReadFile, "refusing \(what) \(path): it is owned by uid \(st.st_uid)")
        }
    }

    /// Throws `.noPermissionsToReadFile` when `path` exists and its group or others have
    /// any access. `what` names the file in the message ("the cookie store").
    package static func refuseIfOthersCanRead(_ path: String, what: String) throws {
        try refuseIfNotOwnRegularFile(path, what: what)
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        if st.st_mode & (S_IRWXG | S_IRWXO) != 0 {
            throw PorterError(.noPermissionsToReadFile,
                              "refusing \(what.isEmpty ? "" : what + " ")\(path): others may read it (mode \(String(st.st_mode & 0o777, radix: 8))); chmod 600 it")
        }
    }

    /// Creates `path` with mode 0600 when it does not exist (before SQLite opens it: SQLite
    /// gives its -wal and -shm files the database's own mode).
    package static func createFile(_ path: String) {
        let fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        if fd >= 0 { close(fd) }
    }

    /// Writes `data` to a new temporary file (0600) beside `path`, flushes it and renames
    /// it over `path`: readers see the old file or the new one. False on any failure (the
    /// temporary file is then removed).
    public static func writeAtomically(_ data: Data, to path: String) -> Bool {
        let temp = path + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(temp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return false }
        let written = data.withUnsafeBytes { raw -> Bool in
            var offset = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n <= 0 { return false }
                offset += n
            }
            return true
        }
        let synced = fsync(fd) == 0
        close(fd)
        guard written, synced, rename(temp, path) == 0 else {
            unlink(temp)
            return false
        }
        return true
    }
}
