import Foundation
import Porter

/// Writes to a file descriptor, all of it, retrying on EINTR.
func writeAll(_ fd: Int32, _ data: Data) -> Bool {
    data.withUnsafeBytes { raw in
        var off = 0
        while off < raw.count {
            let n = write(fd, raw.baseAddress! + off, raw.count - off)
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            off += n
        }
        return true
    }
}

func writeAll(_ fd: Int32, _ text: String) -> Bool { writeAll(fd, Data(text.utf8)) }

/// The one cleaning of text from elsewhere (a server's status line and fields, an error's
/// detail, a challenge's realm) before it reaches a terminal: control characters (C0 but
/// HTAB, DEL, C1) become spaces, as `HTTPField` already does to a field value's C0 bytes,
/// so no escape sequence or carriage return a server wrote is acted on.
enum TerminalText {
    static func clean(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0 != "\t" && PathText.isControl($0) }) else { return text }
        var scalars = String.UnicodeScalarView()
        for s in text.unicodeScalars { scalars.append(s != "\t" && PathText.isControl(s) ? " " : s) }
        return String(scalars)
    }
}

/// One line on stderr, cleaned (`TerminalText`); line breaks Porter itself put in stay.
func note(_ text: String) {
    _ = writeAll(2, text.split(separator: "\n", omittingEmptySubsequences: false).map { TerminalText.clean(String($0)) }
        .joined(separator: "\n") + "\n")
}

/// The response head as `-i` / `-I` / `-D` print it: a status line for HTTP, then the
/// fields, each cleaned (`TerminalText`).
func responseHead(_ r: Response) -> String {
    var s = ""
    if let line = r.statusLine { s += TerminalText.clean(line) + "\r\n" } else if let status = r.statusCode { s += "HTTP \(status)\r\n" }
    var fields = r.headerFields
    if fields.combined(.contentType) == nil, let mime = r.mimeType { fields[.contentType] = mime }
    if fields.combined(.contentLength) == nil, r.expectedContentLength >= 0 { fields[.contentLength] = String(r.expectedContentLength) }
    for f in fields { s += "\(f.name.rawName): \(TerminalText.clean(f.value))\r\n" }
    return s + "\r\n"
}

/// A one-line progress bar on stderr, redrawn at most ten times a second.
final class ProgressBar: @unchecked Sendable {
    private var last = DispatchTime(uptimeNanoseconds: 0)
    private let start = DispatchTime.now()
    func update(_ done: Int64, of total: Int64, force: Bool = false) {
        let now = DispatchTime.now()
        guard force || now.uptimeNanoseconds - last.uptimeNanoseconds > 100_000_000 else { return }
        last = now
        let secs = max(0.001, Double(now.uptimeNanoseconds - start.uptimeNanoseconds) / 1e9)
        let rate = Double(done) / secs
        var line = "\r"
        if total > 0 {
            let frac = min(1, Double(done) / Double(total))
            let width = 30
            let filled = Int(frac * Double(width))
            line += "[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled) + "]"
            line += String(format: " %5.1f%%", frac * 100)
        }
        line += " " + human(Double(done)) + " " + human(rate) + "/s "
        _ = writeAll(2, line)
    }
    func finish() { _ = writeAll(2, "\n") }
    private func human(_ v: Double) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var v = v, i = 0
        while v >= 1024, i < units.count - 1 { v /= 1024; i += 1 }
        return String(format: i == 0 ? "%.0f %@" : "%.1f %@", v, units[i])
    }
}

