import Foundation
import PorterCore

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
