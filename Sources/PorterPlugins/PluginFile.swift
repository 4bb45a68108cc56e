import Foundation
import PorterCore
#if canImport(Glibc)
import Glibc
#endif

/// A plugin candidate opened once and checked by its descriptor, the way OpenSSH's
/// `safe_path` checks a file it is about to trust:
/// - the file is a regular file, owned by this user or root, writable by no one else;
/// - the folder that holds it, and every folder above up to `/`, is owned by this user
///   or root and writable by no one else — except that a root-owned sticky folder (such
///   as `/tmp`) is accepted *above* a plugin folder, never as the plugin folder itself;
/// - for a symbolic link, the same holds for the folder holding the link and for the
///   link's own owner, as well as for the file it leads to: whoever may change the link
///   may choose the code, so the link counts as much as its target.
/// Only then is the descriptor handed to dlopen (as /proc/self/fd/N): what was checked
/// is what is mapped, whatever happens to the names meanwhile.
struct PluginFile {
    let fd: Int32
    /// device:inode of what was opened: one plugin file loads once, whatever it is called.
    let identity: String

    struct Problem: Error {
        let reason: String
    }

    static func open(_ path: String) -> Result<PluginFile, Problem> {
        func fail(_ reason: String) -> Result<PluginFile, Problem> { .failure(Problem(reason: reason)) }
        var lst = stat()
        guard lstat(path, &lst) == 0 else { return fail("no such file (\(String(cString: strerror(errno))))") }
        let isLink = lst.st_mode & S_IFMT == S_IFLNK
        // The folder the name lives in (for a link: the link's folder).
        guard let folder = realFolder(of: path) else { return fail("cannot resolve the folder of \(path)") }
        if let p = unsafeFolder(folder) { return fail(p) }
        if isLink, let p = ownershipProblem(lst, what: "symbolic link") { return fail(p) }
        // A name that was not a link when looked at must not become one before the open.
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (isLink ? 0 : O_NOFOLLOW))
        guard fd >= 0 else {
            let e = errno
            if isLink && e == ENOENT { return fail("dangling symbolic link") }
            if e == ELOOP { return fail("the name was replaced by a symbolic link while it was checked") }
            return fail("cannot open it (\(String(cString: strerror(e))))")
        }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            close(fd)
            return fail("cannot inspect it (\(String(cString: strerror(errno))))")
        }
        let type = st.st_mode & S_IFMT
        var problem: String?
        if type == S_IFDIR {
            problem = "a folder, not a plugin file"
        } else if type != S_IFREG {
            problem = "not a regular file"
        } else if let p = ownershipProblem(st, what: "file") {
            problem = p
        } else if isLink {
            // The file the link led to: its own folders count as well.
            if let real = resolvedPath(of: fd), let realFolder = realFolder(of: real) {
                problem = unsafeFolder(realFolder)
            } else {
                problem = "cannot resolve where the symbolic link leads"
            }
        }
        if let problem {
            close(fd)
            return fail(problem)
        }
        return .success(PluginFile(fd: fd, identity: "\(st.st_dev):\(st.st_ino)"))
    }

    /// Why `folder` (a real path) or a folder above it cannot be trusted; nil when all can.
    static func unsafeFolder(_ folder: String) -> String? {
        var current = folder
        var isPluginFolder = true
        while true {
            var st = stat()
            guard lstat(current, &st) == 0 else { return "cannot inspect the folder \(current)" }
            guard st.st_mode & S_IFMT == S_IFDIR else { return "\(current) is not a folder" }
            let what = isPluginFolder ? "folder \(current)" : "folder \(current) (above the plugin's folder)"
            let me = geteuid()
            if st.st_uid != me && st.st_uid != 0 {
                return "the \(what) is owned by uid \(st.st_uid), neither this user (\(me)) nor root"
            }
            if st.st_mode & (S_IWGRP | S_IWOTH) != 0 {
                // /tmp and the like: others may add names but not replace a folder root or
                // this user owns, so it is safe above the plugin folder, not as it.
                let stickyRoot = st.st_uid == 0 && st.st_mode & S_ISVTX != 0
                if isPluginFolder || !stickyRoot {
                    let who = st.st_mode & S_IWOTH != 0 ? "others" : "group"
                    return "the \(what) is writable by \(who) (mode \(String(st.st_mode & 0o7777, radix: 8)))"
                }
            }
            if current == "/" { return nil }
            current = PathText.parent(of: current)
            isPluginFolder = false
        }
    }

    static func ownershipProblem(_ st: stat, what: String) -> String? {
        let me = geteuid()
        if st.st_uid != me && st.st_uid != 0 {
            return "the \(what) is owned by uid \(st.st_uid), neither this user (\(me)) nor root"
        }
        // A link's own mode bits mean nothing on Linux; its owner and folder do.
        if st.st_mode & S_IFMT != S_IFLNK, st.st_mode & (S_IWGRP | S_IWOTH) != 0 {
            let who = st.st_mode & S_IWOTH != 0 ? "others" : "group"
            return "the \(what) is writable by \(who) (mode \(String(st.st_mode & 0o7777, radix: 8)))"
        }
        return nil
    }

    /// The real path of the folder holding `path` (links in the folder part resolved;
    /// the last component itself is not followed).
    static func realFolder(of path: String) -> String? {
        let folder = PathText.parent(of: path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path)
        guard let resolved = realpath(folder, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// What an open descriptor's file is called now.
    static func resolvedPath(of fd: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

}
