import Foundation

/// Path arithmetic on the text of a path, byte by byte: Foundation's NSString path
/// methods trap on some names (a one-character relative name did), and Porter's rule is
/// that no user input traps.
public enum PathText {
    /// The folder holding `path`: "." for a bare name, "/" for a name in the root.
    public static func parent(of path: String) -> String {
        var p = Substring(path)
        while p.count > 1, p.hasSuffix("/") { p = p.dropLast() }
        guard let slash = p.lastIndex(of: "/") else { return "." }
        let up = p[..<slash]
        return up.isEmpty ? "/" : String(up)
    }

    /// The last component of `path` ("" for "/").
    public static func lastComponent(of path: String) -> String {
        var p = Substring(path)
        while p.count > 1, p.hasSuffix("/") { p = p.dropLast() }
        if p == "/" { return "" }
        guard let slash = p.lastIndex(of: "/") else { return String(p) }
        return String(p[p.index(after: slash)...])
    }
}

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
