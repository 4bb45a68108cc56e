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

