import Foundation
import PorterCore

/// The Netscape `cookies.txt` format that curl (`-b` / `-c`) and browser extensions use:
/// one cookie per line, seven tab-separated fields —
/// `domain  include-subdomains  path  secure  expires  name  value` —
/// with `TRUE` / `FALSE` flags, `expires` in seconds since 1970 (0: a session cookie), a
/// leading `.` on the domain of a domain cookie, and `#HttpOnly_` before the domain of an
/// HttpOnly cookie. Other lines starting with `#` and blank lines are comments.
public enum NetscapeCookieFile {
    public static func serialize(_ cookies: [Cookie]) -> String {
        var out = "# Netscape HTTP Cookie File\n# Written by Porter \(porterVersion). Edit at your own risk.\n\n"
        for c in cookies {
            let domain = (c.httpOnly ? "#HttpOnly_" : "") + (c.hostOnly ? "" : ".") + c.domain
            let expires = c.expires.map { String(max(1, Cookie.wholeSeconds($0))) } ?? "0"
            out += [domain, c.hostOnly ? "FALSE" : "TRUE", c.path, c.secure ? "TRUE" : "FALSE", expires, c.name, c.value]
                .joined(separator: "\t") + "\n"
        }
        return out
    }

    /// The cookies of a file's text; malformed lines are skipped (and counted).
    public static func parse(_ text: String, now: Date = Date()) -> (cookies: [Cookie], skipped: Int) {
        var cookies: [Cookie] = []
        var skipped = 0
        for raw in text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" }) {
            var line = Substring(raw)
            var httpOnly = false
            if line.hasPrefix("#HttpOnly_") {
                httpOnly = true
                line = line.dropFirst("#HttpOnly_".count)
            } else if line.hasPrefix("#") || line.allSatisfy({ $0 == " " || $0 == "\t" }) {
                continue
            }
            let f = line.split(separator: "\t", maxSplits: 6, omittingEmptySubsequences: false).map(String.init)
            guard f.count >= 6, let expiry = Int64(f[4]) else { skipped += 1; continue }
            var domain = f[0].lowercased()
            let sub = f[1].uppercased() == "TRUE"
            if domain.hasPrefix(".") { domain.removeFirst() }
            // One leading dot marks a domain cookie; what is left must be a name (".." left
            // "." and was written back as a line that no longer parses).
            guard !domain.isEmpty, !domain.hasPrefix(".") else { skipped += 1; continue }
            let cookie = Cookie(name: f[5], value: f.count > 6 ? f[6] : "", domain: domain, hostOnly: !sub,
                                path: f[2].isEmpty ? "/" : f[2],
                                expires: expiry == 0 ? nil : Date(timeIntervalSince1970: TimeInterval(expiry)),
                                secure: f[3].uppercased() == "TRUE", httpOnly: httpOnly, creation: now)
            if cookie.isExpired(at: now) { continue }
            cookies.append(cookie)
        }
        return (cookies, skipped)
    }
}
