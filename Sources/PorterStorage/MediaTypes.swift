import Foundation
import PorterCore

/// File-name extension → MIME type, from the system's table (`/etc/mime.types`,
/// Debian's `media-types` package). Read once, on first use.
public enum MediaTypes {
    public static let tablePath = "/etc/mime.types"

    private static let table: [String: String] = load(path: tablePath)

    static func load(path: String) -> [String: String] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [:] }
        var map: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let fields = trimmed.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count >= 2 else { continue }
            let type = String(fields[0]).lowercased()
            for ext in fields.dropFirst() where map[ext.lowercased()] == nil { map[ext.lowercased()] = type }
        }
        return map
    }

    /// True when the system table was found and read.
    public static var isAvailable: Bool { !table.isEmpty }

    /// The MIME type for a path's extension; `application/octet-stream` when unknown.
    public static func mimeType(forPath path: String) -> String {
        let name = (path as NSString).lastPathComponent
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "application/octet-stream" }
        let ext = name[name.index(after: dot)...].lowercased()
        return table[ext] ?? "application/octet-stream"
    }
}
