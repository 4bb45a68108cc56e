import Foundation
import PorterCore

/// The one rule for putting a transfer's bytes at a path a user named: the CLI's `-o`,
/// the file: handler's uploads, porterd's `--background -o` and anything else that writes
/// an output go through it (a rule kept in one writer came back through another before).
///
/// - A folder is refused.
/// - A character or block device, a FIFO or a socket is written through, never replaced
///   (renaming a file over `/dev/null` as root destroys the device).
/// - Anything else (absent, a regular file, a link to one) is written beside the target
///   under a private name and renamed over it when whole: nothing partial is ever at the
///   target. A new file gets 0666 less the umask, as curl's do; an existing regular file
///   keeps its mode.
public enum OutputFile {
    public enum Kind: Equatable, Sendable {
        /// Absent, or a regular file (or a link to one): written beside, renamed over.
        case file
        /// A folder: refused.
        case folder
        /// A device, a FIFO or a socket: written through.
        case special
    }

    /// What `path` is now (links followed, as opening it would).
    public static func kind(of path: String) -> Kind {
        var st = stat()
        guard stat(path, &st) == 0 else { return .file }
        switch st.st_mode & S_IFMT {
        case S_IFREG: return .file
        case S_IFDIR: return .folder
        default: return .special
        }
    }

    /// The mode a finished output gets at `path`: an existing regular file keeps its own;
    /// a new file gets 0666 less `umask`.
    public static func mode(forReplacing path: String, umask: mode_t = FileCreationMask.current) -> mode_t {
        var st = stat()
        if stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG { return st.st_mode & 0o7777 }
        return 0o666 & ~umask
    }

    /// Throws unless something may be written at `path` (a folder may not); for checks made
    /// before a transfer starts (porterd refuses such a task when it is queued).
    public static func check(_ path: String) throws(PorterError) {
        if kind(of: path) == .folder {
            throw PorterError(.cannotCreateFile, "cannot write to \(path): it is a folder")
        }
    }

    /// Opens `path` for writing a device or FIFO through (never created, never truncated).
    /// `nonBlocking`: a FIFO without a reader fails at once (ENXIO) instead of waiting for
    /// one (a daemon must not stall on it); the descriptor is made blocking again after.
    public static func openThrough(_ path: String, nonBlocking: Bool = false) throws(PorterError) -> Int32 {
        let fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | (nonBlocking ? O_NONBLOCK : 0))
        guard fd >= 0 else {
            let e = errno
            throw PorterError(.cannotWriteToFile, e == ENXIO ? "cannot write to \(path): nothing reads it" : "cannot open \(path) for writing",
                              cause: .errno(e))
        }
        if nonBlocking {
            let flags = fcntl(fd, F_GETFL)
            if flags >= 0 { _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) }
        }
        return fd
    }

    /// A private file beside `path` (0600, same folder, so the final rename stays on one
    /// file system): its descriptor and name.
    public static func makeTemporary(beside path: String) throws(PorterError) -> (fd: Int32, path: String) {
        let folder = PathText.parent(of: path)
        let base = PathText.lastComponent(of: path)
        var template = Array((folder + "/." + (base.isEmpty ? "output" : base) + ".porter-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else {
            let e = errno
            throw PorterError(e == ENOENT ? .fileDoesNotExist : .cannotCreateFile, "cannot create a file in \(folder)", cause: .errno(e))
        }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        return (fd, template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
    }

    /// Gives `temporary` (written whole and open as `fd`) its final mode, syncs it and
    /// renames it over `path`. The temporary file is removed if any step fails.
    public static func commit(temporary: String, fd: Int32, to path: String, umask: mode_t = FileCreationMask.current) throws(PorterError) {
        _ = fchmod(fd, mode(forReplacing: path, umask: umask))
        guard fsync(fd) == 0 else {
            let e = errno
            unlink(temporary)
            throw PorterError(.cannotWriteToFile, "cannot flush \(temporary)", cause: .errno(e))
        }
        guard rename(temporary, path) == 0 else {
            let e = errno
            unlink(temporary)
            throw PorterError(e == EACCES || e == EPERM ? .noPermissionsToReadFile : .cannotMoveFile,
                              "cannot move the output into place at \(path)", cause: .errno(e))
        }
    }

    /// Puts the finished file `source` (a download's private file) at `path` by the rule:
    /// into a device or FIFO its bytes are copied (and `source` removed); over anything
    /// else it is renamed with the output's mode (copied beside and renamed when it lies
    /// on another file system). `source` is gone afterwards, whatever the outcome.
    public static func place(_ source: String, at path: String, umask: mode_t = FileCreationMask.current,
                             nonBlocking: Bool = false) throws(PorterError) {
        defer { unlink(source) }
        switch kind(of: path) {
        case .folder:
            throw PorterError(.cannotCreateFile, "cannot write to \(path): it is a folder")
        case .special:
            let out = try openThrough(path, nonBlocking: nonBlocking)
            defer { close(out) }
            try copy(from: source, to: out, naming: path)
        case .file:
            let src = open(source, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard src >= 0 else { throw PorterError(.cannotMoveFile, "cannot open \(source)", cause: .errno(errno)) }
            defer { close(src) }
            _ = fchmod(src, mode(forReplacing: path, umask: umask))
            if rename(source, path) == 0 { return }
            let e = errno
            guard e == EXDEV else {
                throw PorterError(e == EACCES || e == EPERM ? .noPermissionsToReadFile : .cannotMoveFile,
                                  "cannot move the output into place at \(path)", cause: .errno(e))
            }
            let (fd, temp) = try makeTemporary(beside: path)
            defer { close(fd) }
            do {
                try copy(from: source, to: fd, naming: temp)
            } catch {
                unlink(temp)
                throw error
            }
            try commit(temporary: temp, fd: fd, to: path, umask: umask)
        }
    }

    /// Copies the whole of the file at `source` into `out` (FileCopy: in the kernel when it can).
    public static func copy(from source: String, to out: Int32, naming target: String) throws(PorterError) {
        let src = open(source, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard src >= 0 else { throw PorterError(.cannotMoveFile, "cannot open \(source)", cause: .errno(errno)) }
        defer { close(src) }
        do {
            try FileCopy.copy(from: src, to: out)
        } catch {
            throw error.writing ? PorterError(.cannotWriteToFile, "cannot write \(target)", cause: .errno(error.code))
                                : PorterError(.cannotMoveFile, "cannot read \(source)", cause: .errno(error.code))
        }
    }
}
