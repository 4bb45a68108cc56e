import CPorterFileCopy
import Foundation

/// The one way Porter copies bytes from one open file to another descriptor: in the
/// kernel when it can, so the bytes never pass through Porter's memory —
/// `copy_file_range(2)` between two regular files (a reflink or a server-side copy where
/// the file system has one), `sendfile(2)` from a regular file to anything else (a pipe,
/// a socket, /dev/null) — and `read(2)` / `write(2)` when neither applies (a source that
/// is not a regular file, a file system or kernel that refuses the call).
/// Both descriptors' offsets advance, as with read and write.
public enum FileCopy {
    /// Why a copy stopped: the errno, and whether it was the writing side (a full disk,
    /// a closed pipe) or the reading side.
    public struct Failure: Error, Sendable {
        public let code: Int32
        public let writing: Bool
    }

    /// How the bytes move; a copy starts with the best its descriptors allow and steps
    /// down when the kernel refuses.
    enum Method: Comparable { case copyFileRange, sendfile, readWrite }

    /// The way for `source` → `destination`: copy_file_range between regular files,
    /// sendfile from a regular file, read/write otherwise.
    static func method(from source: Int32, to destination: Int32) -> Method {
        var s = stat(), d = stat()
        guard fstat(source, &s) == 0, (s.st_mode & S_IFMT) == S_IFREG else { return .readWrite }
        guard fstat(destination, &d) == 0 else { return .readWrite }
        return (d.st_mode & S_IFMT) == S_IFREG ? .copyFileRange : .sendfile
    }

    /// Copies up to `limit` bytes (to the source's end when nil) and returns how many it
    /// copied: fewer than `limit` only when the source ended.
    @discardableResult
    public static func copy(from source: Int32, to destination: Int32, limit: Int64? = nil) throws(Failure) -> Int64 {
        var way = method(from: source, to: destination)
        var total: Int64 = 0
        var buffer: UnsafeMutableRawPointer?
        defer { buffer?.deallocate() }
        while limit.map({ total < $0 }) ?? true {
            // At most 1 GiB a call: the kernel caps a call near 2 GiB anyway.
            let want = Int(min(limit.map { $0 - total } ?? Int64.max, 1 << 30))
            let n: Int
            switch way {
            case .copyFileRange:
                n = porter_copy_file_range(source, destination, want)
            case .sendfile:
                n = sendfile(destination, source, nil, want)
            case .readWrite:
                let size = min(want, 128 << 10)
                if buffer == nil { buffer = UnsafeMutableRawPointer.allocate(byteCount: 128 << 10, alignment: 16) }
                let got = read(source, buffer!, size)
                if got < 0 {
                    if errno == EINTR { continue }
                    throw Failure(code: errno, writing: false)
                }
                if got == 0 { return total }
                try writeAll(destination, buffer!, got)
                n = got
            }
            if n < 0 {
                let e = errno
                if e == EINTR { continue }
                // Refused for this pair of files (not a failure of either): step down, as
                // long as nothing was copied by the refusing call.
                if way != .readWrite, [EXDEV, EINVAL, ENOSYS, EOPNOTSUPP, ENOTSUP, EBADF].contains(e) {
                    way = way == .copyFileRange ? .sendfile : .readWrite
                    continue
                }
                throw Failure(code: e, writing: [ENOSPC, EDQUOT, EFBIG, EPIPE, EROFS, EAGAIN].contains(e))
            }
            if n == 0 { return total }
            total += Int64(n)
        }
        return total
    }

    private static func writeAll(_ fd: Int32, _ bytes: UnsafeMutableRawPointer, _ count: Int) throws(Failure) {
        var off = 0
        while off < count {
            let w = write(fd, bytes + off, count - off)
            if w < 0 {
                if errno == EINTR { continue }
                throw Failure(code: errno, writing: true)
            }
            off += w
        }
    }
}
