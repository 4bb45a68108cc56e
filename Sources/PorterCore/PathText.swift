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

    /// The one rule for a file name that came from elsewhere (a server's Content-Disposition,
    /// a URL's last path segment, a handler's suggestion) before Porter names a file with it:
    /// its last component only (a backslash counts as a slash, so "..\\x" is "x"), control
    /// characters (C0, DEL, C1) replaced by "_" so no escape sequence lands in a name a
    /// terminal later shows; nil when nothing usable is left ("", ".", "..").
    public static func fileName(from raw: String) -> String? {
        let last = lastComponent(of: raw.replacingOccurrences(of: "\\", with: "/"))
        var scalars = String.UnicodeScalarView()
        for s in last.unicodeScalars {
            scalars.append(isControl(s) ? "_" : s)
        }
        let name = String(scalars)
        return name.isEmpty || name == "." || name == ".." ? nil : name
    }

    /// C0 controls, DEL and the C1 controls (U+0080–U+009F, which some terminals read as
    /// escape sequences: U+009B is CSI).
    public static func isControl(_ s: Unicode.Scalar) -> Bool {
        s.value < 0x20 || (s.value >= 0x7F && s.value <= 0x9F)
    }
}

