import Foundation

/// The process's file-creation mask, read without changing it: umask(2) can only be read
/// by setting it, and between the two calls another thread would create files with the
/// temporary mask. Linux shows it in /proc/self/status ("Umask:"); the set-and-restore
/// read is the fallback where that line is missing.
public enum FileCreationMask {
    public static var current: mode_t {
        if let value = fromProcStatus() { return value }
        let m = umask(0o022)
        umask(m)
        return m
    }

    /// The "Umask:" line of /proc/self/status, read with read(2) into a buffer and parsed
    /// as bytes: every CLI run asks once before its first byte, and going through
    /// `String(contentsOfFile:)` and `split` cost 1.6 M instructions there.
    static func fromProcStatus() -> mode_t? {
        let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 8192)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            count += n
        }
        return parse(bytes[..<count])
    }

    /// The octal value of the "Umask:" line in the text of a /proc/PID/status file.
    static func parse(_ status: ArraySlice<UInt8>) -> mode_t? {
        let key = Array("Umask:".utf8)
        let blank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        for line in status.split(separator: UInt8(ascii: "\n")) where line.starts(with: key) {
            var field = line.dropFirst(key.count)
            while let b = field.first, blank(b) { field = field.dropFirst() }
            while let b = field.last, blank(b) { field = field.dropLast() }
            guard (1...6).contains(field.count),
                  field.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "7")).contains($0) }) else { return nil }
            return field.reduce(0) { $0 << 3 | mode_t($1 - UInt8(ascii: "0")) }
        }
        return nil
    }
}
