import Foundation

/// The process's file-creation mask, read without changing it: umask(2) can only be read
/// by setting it, and between the two calls another thread would create files with the
/// temporary mask. Linux shows it in /proc/self/status ("Umask:"); the set-and-restore
/// read is the fallback where that line is missing.
public enum FileCreationMask {
    public static var current: mode_t {
        if let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
           let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
           let value = mode_t(line.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8) {
            return value
        }
        let m = umask(0o022)
        umask(m)
        return m
    }
}
