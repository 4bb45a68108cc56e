import Foundation

/// Porter's one format for directory listings, used by every handler that lists a
/// folder (file:, ftp:, sftp:), so a program parses one format whatever the scheme.
///
/// MIME type `text/x-porter-listing; charset=utf-8`. One entry per line, sorted by
/// name, four fields separated by single spaces:
///
///     <kind> <size> <modified> <name>
///
/// - kind: `d` folder, `f` regular file, `l` symbolic link, `o` anything else;
/// - size: bytes, decimal (`-` when unknown);
/// - modified: UTC, `YYYY-MM-DDTHH:MM:SSZ` (`-` when unknown);
/// - name: the rest of the line, with `%`, CR and LF percent-encoded.
public struct DirectoryListing: Sendable, Equatable {
    public static let mimeType = "text/x-porter-listing"
    public static let contentType = "text/x-porter-listing; charset=utf-8"

    public struct Entry: Sendable, Equatable {
        public enum Kind: String, Sendable { case directory = "d", file = "f", symlink = "l", other = "o" }
        public var name: String
        public var kind: Kind
        public var size: Int64?
        public var modified: Date?
        public init(name: String, kind: Kind, size: Int64?, modified: Date?) {
            self.name = name
            self.kind = kind
            self.size = size
            self.modified = modified
        }
    }

    public var entries: [Entry]
    public init(entries: [Entry]) { self.entries = entries.sorted { $0.name < $1.name } }

    private static func formatDate(_ d: Date) -> String {
        var t = time_t(d.timeIntervalSince1970.rounded(.down))
        var tmv = tm()
        gmtime_r(&t, &tmv)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", Int(tmv.tm_year) + 1900, Int(tmv.tm_mon) + 1,
                      Int(tmv.tm_mday), Int(tmv.tm_hour), Int(tmv.tm_min), Int(tmv.tm_sec))
    }

    private static func parseDate(_ s: Substring) -> Date? {
        let parts = s.split(whereSeparator: { "-T:Z".contains($0) }).compactMap { Int($0) }
        // Each part must fit the Int32 fields of `tm` (a longer run of digits would trap).
        guard parts.count == 6, s.hasSuffix("Z"), parts.allSatisfy({ (0...Int(Int32.max)).contains($0) }) else { return nil }
        var tmv = tm()
        tmv.tm_year = Int32(parts[0] - 1900)
        tmv.tm_mon = Int32(parts[1] - 1)
        tmv.tm_mday = Int32(parts[2])
        tmv.tm_hour = Int32(parts[3])
        tmv.tm_min = Int32(parts[4])
        tmv.tm_sec = Int32(parts[5])
        return Date(timeIntervalSince1970: TimeInterval(timegm(&tmv)))
    }

    private static func escape(_ name: String) -> String {
        var out = ""
        for ch in name.unicodeScalars {
            switch ch {
            case "%": out += "%25"
            case "\n": out += "%0A"
            case "\r": out += "%0D"
            default: out.unicodeScalars.append(ch)
            }
        }
        return out
    }

    public func serialized() -> Data {
        var text = ""
        for e in entries {
            text += e.kind.rawValue + " " + (e.size.map(String.init) ?? "-") + " "
                + (e.modified.map(DirectoryListing.formatDate) ?? "-") + " " + DirectoryListing.escape(e.name) + "\n"
        }
        return Data(text.utf8)
    }

    /// Parses a listing; throws `.cannotParseResponse` on a malformed line.
    public static func parse(_ data: Data) throws -> DirectoryListing {
        var entries: [Entry] = []
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true) {
            let fields = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
            guard fields.count == 4, let kind = Entry.Kind(rawValue: String(fields[0])) else {
                throw PorterError(.cannotParseResponse, "bad listing line: \(line)")
            }
            let size = fields[1] == "-" ? nil : Int64(fields[1])
            let date = fields[2] == "-" ? nil : parseDate(fields[2])
            let name = String(fields[3]).removingPercentEncoding ?? String(fields[3])
            entries.append(Entry(name: name, kind: kind, size: size, modified: date))
        }
        return DirectoryListing(entries: entries)
    }
}
