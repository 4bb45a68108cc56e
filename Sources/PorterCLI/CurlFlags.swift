import ArgumentParser
import Foundation
import Porter

/// curl flags that scripts written for curl use, each with curl's meaning (curl's
/// docs/cmdline-opts). Part of `porter fetch` (an option group, so the other options
/// stay where they were).
struct CurlFlags: ParsableArguments {
    @Option(name: .customLong("url"), help: ArgumentHelp("One more URL to load (curl's --url; repeatable).", valueName: "URL"))
    var url: [String] = []

    @Flag(name: .customLong("ssl-reqd"), help: "ftp://: require TLS on the control and data connections (AUTH TLS), or fail.")
    var sslReqd = false

    @Flag(name: .customLong("ssl"), help: "ftp://: use TLS (AUTH TLS) if the server offers it, plain text otherwise.")
    var ssl = false

    @Flag(name: .customLong("fail-with-body"), help: "Like -f (exit 22 on an HTTP status of 400 or more), but write the body.")
    var failWithBody = false

    @Option(name: .customLong("data-raw"), help: "Like -d, but '@' has no special meaning.")
    var dataRaw: [String] = []

    @Flag(name: [.customShort("Z"), .customLong("parallel")], help: "Load the URLs in parallel (--parallel-max at once, 50 unless set).")
    var parallel = false

    @Option(name: .customLong("parallel-max"), help: "With -Z: at most N transfers at once (1 to 300).")
    var parallelMax: Int?

    @Flag(name: .customLong("tlsv1.2"), help: "TLS 1.2 or later.")
    var tlsv12 = false

    @Flag(name: .customLong("tlsv1.3"), help: "TLS 1.3 or later.")
    var tlsv13 = false

    @Option(name: .customLong("tls-max"), help: ArgumentHelp("At most this TLS version: 1.0, 1.1, 1.2, 1.3 or default.", valueName: "VERSION"))
    var tlsMax: String?

    @Flag(name: [.customShort("4"), .customLong("ipv4")], help: "Resolve names to IPv4 addresses only.")
    var ipv4 = false

    @Flag(name: [.customShort("6"), .customLong("ipv6")], help: "Resolve names to IPv6 addresses only.")
    var ipv6 = false

    @Option(name: .customLong("oauth2-bearer"), help: ArgumentHelp("Send 'Authorization: Bearer TOKEN' (http, https).", valueName: "TOKEN"))
    var oauth2Bearer: String?

    @Option(name: .customLong("output-dir"), help: ArgumentHelp("Put -o and -O files in DIR (with --create-dirs, made if missing).", valueName: "DIR"))
    var outputDir: String?

    @Option(name: .customLong("connect-to"), help: ArgumentHelp("HOST1:PORT1:HOST2:PORT2: a request for HOST1:PORT1 connects to HOST2:PORT2 (repeatable; an empty part matches any).", valueName: "SPEC"))
    var connectTo: [String] = []

    @Option(name: .customLong("noproxy"), help: ArgumentHelp("Hosts (comma-separated; '*' for all) reached without the proxy.", valueName: "LIST"))
    var noproxy: String?

    @Option(name: [.customShort("U"), .customLong("proxy-user")], help: ArgumentHelp("USER:PASSWORD for the proxy (Basic).", valueName: "USER:PASSWORD"))
    var proxyUser: String?

    @Flag(name: [.customShort("#"), .customLong("progress-bar")], help: "Show a progress bar for downloads to files, even when stderr is not a terminal.")
    var progressBar = false

    @Option(name: .customLong("trace-ascii"), help: ArgumentHelp("Write everything sent and received (http, ftp) to FILE ('-': stdout) as text.", valueName: "FILE"))
    var traceASCII: String?

    @Option(name: .customLong("trace"), help: ArgumentHelp("Like --trace-ascii, with a hex dump.", valueName: "FILE"))
    var trace: String?

    @Option(name: .customLong("etag-save"), help: ArgumentHelp("Save the response's ETag to FILE.", valueName: "FILE"))
    var etagSave: String?

    @Option(name: .customLong("etag-compare"), help: ArgumentHelp("Send If-None-Match with the ETag saved in FILE (by --etag-save).", valueName: "FILE"))
    var etagCompare: String?

    @Option(name: [.customShort("z"), .customLong("time-cond")], parsing: .unconditional, help: ArgumentHelp("Load only if changed since TIME (an HTTP date, or a FILE's modification time); '-TIME': only if not changed since.", valueName: "TIME"))
    var timeCond: String?

    @Option(name: .customLong("proto"), help: ArgumentHelp("Protocols allowed for the URLs, as curl: 'https', '=https,ftps', '-all,+https', '+ftp'.", valueName: "LIST"))
    var proto: String?

    @Option(name: .customLong("proto-redir"), help: ArgumentHelp("Protocols a redirect (-L) may lead to (default http, https, ftp, ftps).", valueName: "LIST"))
    var protoRedir: String?

    @Flag(name: .customLong("remote-name-all"), help: "-O for every URL (porter's -O already is).")
    var remoteNameAll = false

    static func tlsVersion(_ text: String) -> TLSVersion? {
        switch text {
        case "1.0", "1": return .tls1_0
        case "1.1": return .tls1_1
        case "1.2": return .tls1_2
        case "1.3": return .tls1_3
        default: return nil
        }
    }

    /// The protocols porter knows for --proto's "all".
    static let allProtocols: Set<String> = ["http", "https", "ftp", "ftps", "file", "data"]

    /// curl's --proto syntax: comma-separated words, each optionally prefixed with '+'
    /// (add), '-' (remove) or '=' (only these); "all" means every protocol. A list that
    /// starts with a plain word or '+' adds to `base`. nil when malformed.
    static func protocols(_ list: String, base: Set<String>) -> Set<String>? {
        var result = base
        for raw in list.split(separator: ",", omittingEmptySubsequences: true) {
            var word = raw.trimmingCharacters(in: .whitespaces).lowercased()
            var action: Character = "+"
            while let first = word.first, "+-=".contains(first) {
                action = first
                word.removeFirst()
            }
            guard !word.isEmpty, word.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." }) else { return nil }
            let set: Set<String> = word == "all" ? allProtocols : [word]
            switch action {
            case "=": result = set
            case "-": result.subtract(set)
            default: result.formUnion(set)
            }
        }
        return result
    }

    /// -z: (the date, true for If-Modified-Since / false for If-Unmodified-Since).
    static func timeCondition(_ text: String) -> (Date, Bool)? {
        var t = text
        var modifiedSince = true
        if t.hasPrefix("-") { modifiedSince = false; t.removeFirst() } else if t.hasPrefix("+") { t.removeFirst() }
        if let date = HTTPDate.parse(t) { return (date, modifiedSince) }
        if let attrs = try? FileManager.default.attributesOfItem(atPath: t), let date = attrs[.modificationDate] as? Date {
            return (date, modifiedSince)
        }
        return nil
    }
}

extension CurlFlags {
    /// An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") for -z.
    static func httpDate(_ date: Date) -> String {
        var t = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&t, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        return String(format: "%@, %02d %@ %04d %02d:%02d:%02d GMT", days[Int(parts.tm_wday)], parts.tm_mday,
                      months[Int(parts.tm_mon)], parts.tm_year + 1900, parts.tm_hour, parts.tm_min, parts.tm_sec)
    }
}

/// --trace-ascii / --trace FILE: what libcurl sent and received, in curl's trace format
/// ("=> Send header, N bytes (0xN)", then the bytes as offset-numbered lines).
final class TraceWriter: @unchecked Sendable {
    private let fd: Int32
    private let hex: Bool
    private let lock = NSLock()

    init?(path: String, hex: Bool) {
        self.hex = hex
        if path == "-" { fd = 1 } else {
            let opened = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard opened >= 0 else { return nil }
            fd = opened
        }
    }

    deinit { if fd > 2 { close(fd) } }

    /// `kind` is curl_infotype (0 text, 1 header in, 2 header out, 3 data in, 4 data out).
    func record(_ kind: Int, _ bytes: Data) {
        let label: String
        switch kind {
        case 0:
            lock.withLock { _ = writeAll(fd, "== Info: " + String(decoding: bytes, as: UTF8.self)) }
            return
        case 1: label = "<= Recv header"
        case 2: label = "=> Send header"
        case 3: label = "<= Recv data"
        case 4: label = "=> Send data"
        default: return
        }
        var text = String(format: "%@, %ld bytes (0x%lx)\n", label, bytes.count, bytes.count)
        let b = [UInt8](bytes)
        func printable(_ c: UInt8) -> Character { c >= 0x20 && c < 0x7F ? Character(Unicode.Scalar(c)) : "." }
        if hex {
            var i = 0
            while i < b.count {
                let row = b[i..<min(i + 16, b.count)]
                text += String(format: "%04lx: ", i)
                text += (0..<16).map { j in i + j < b.count ? String(format: "%02x ", b[i + j]) : "   " }.joined()
                text += String(row.map(printable)) + "\n"
                i += 16
            }
        } else {
            // As curl's --trace-ascii: up to 64 bytes a line, a CR LF (or LF) ends one.
            var i = 0
            while i < b.count {
                var line = ""
                var j = i
                while j < b.count, j - i < 64 {
                    if b[j] == 0x0D, j + 1 < b.count, b[j + 1] == 0x0A { j += 2; break }
                    if b[j] == 0x0A { j += 1; break }
                    line.append(printable(b[j]))
                    j += 1
                }
                text += String(format: "%04lx: ", i) + line + "\n"
                i = j
            }
        }
        lock.withLock { _ = writeAll(fd, text) }
    }
}
