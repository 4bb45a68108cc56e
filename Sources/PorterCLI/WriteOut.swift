import Foundation
import Porter

/// curl's `-w FORMAT`: text with `%{variable}`s, `%%`, and the escapes `\n`, `\r`, `\t`,
/// `\\`; `%{json}` is every variable as one JSON object.
enum WriteOut {
    enum Value {
        case text(String)
        case int(Int64)
        case seconds(Double)
        case null
    }

    /// The variables of one finished transfer, in curl's names (plus Porter's earlier
    /// -w json keys: url, scheme, status, mime_type, bytes, elapsed, error, error_code).
    static func values(for t: Transfer) -> [(String, Value)] {
        let last = t.metrics?.transactionMetrics.last
        let start = last?.fetchStartDate
        func since(_ d: Date?) -> Value {
            guard let d, let start else { return .seconds(0) }
            return .seconds(max(0, d.timeIntervalSince(start)))
        }
        let total = Double(DispatchTime.now().uptimeNanoseconds - t.start.uptimeNanoseconds) / 1e9
        let status = t.response?.statusCode
        let version: String
        switch last?.networkProtocolName {
        case "h2"?: version = "2"
        case "http/1.1"?: version = "1.1"
        case "http/1.0"?: version = "1.0"
        default: version = "0"
        }
        let exit = t.exitCode
        let effective = t.response?.url.maskingPassword ?? last?.request.url.maskingPassword ?? t.urlText
        return [
            ("url", .text(t.urlText)),
            ("url_effective", .text(effective)),
            ("scheme", .text(URL(string: effective)?.scheme?.lowercased() ?? "")),
            ("num_redirects", .int(Int64(t.metrics?.redirectCount ?? 0))),
            ("http_code", status.map { .text(String(format: "%03d", $0)) } ?? .text("000")),
            ("response_code", .int(Int64(status ?? 0))),
            ("status", status.map { .int(Int64($0)) } ?? .null),
            ("http_version", .text(version)),
            ("remote_ip", .text(last?.remoteAddress ?? "")),
            ("remote_port", .int(Int64(last?.remotePort ?? 0))),
            ("local_ip", .text(last?.localAddress ?? "")),
            ("local_port", .int(Int64(last?.localPort ?? 0))),
            ("time_namelookup", since(last?.domainLookupEndDate)),
            ("time_connect", since(last?.secureConnectionStartDate ?? last?.connectEndDate)),
            ("time_appconnect", last?.secureConnectionStartDate == nil ? .seconds(0) : since(last?.connectEndDate)),
            ("time_pretransfer", since(last?.requestStartDate)),
            ("time_starttransfer", since(last?.responseStartDate)),
            ("time_total", .seconds(total)),
            ("elapsed", .seconds(total)),
            ("size_download", .int(t.bytes)),
            ("bytes", .int(t.bytes)),
            ("size_upload", .int(last?.countOfRequestBodyBytesSent ?? 0)),
            ("speed_download", .int(total > 0 ? Int64(Double(t.bytes) / total) : 0)),
            ("content_type", .text(t.response?.value(forHeader: "Content-Type") ?? "")),
            ("mime_type", t.response?.mimeType.map { .text($0) } ?? .null),
            ("exitcode", .int(Int64(exit.rawValue))),
            ("errormsg", .text(t.error?.message ?? "")),
            ("error", t.error.map { .text($0.code.description) } ?? .null),
            ("error_code", t.error.map { .int(Int64($0.code.rawValue)) } ?? .null),
        ]
    }

    static func render(_ format: String, _ values: [(String, Value)]) -> String {
        var out = ""
        var i = format.startIndex
        while i < format.endIndex {
            let c = format[i]
            if c == "%", format[i...].hasPrefix("%{"), let close = format[i...].firstIndex(of: "}") {
                let name = String(format[format.index(i, offsetBy: 2)..<close])
                if name == "json" {
                    out += json(values)
                } else if let v = values.first(where: { $0.0 == name })?.1 {
                    out += plain(v)
                }
                i = format.index(after: close)
                continue
            }
            if c == "%", format[i...].hasPrefix("%%") {
                out += "%"
                i = format.index(i, offsetBy: 2)
                continue
            }
            if c == "\\", format.index(after: i) < format.endIndex {
                let n = format[format.index(after: i)]
                switch n {
                case "n": out += "\n"
                case "r": out += "\r"
                case "t": out += "\t"
                case "\\": out += "\\"
                default: out += "\\" + String(n)
                }
                i = format.index(i, offsetBy: 2)
                continue
            }
            out.append(c)
            i = format.index(after: i)
        }
        return out
    }

    static func plain(_ v: Value) -> String {
        switch v {
        case .text(let s): return s
        case .int(let n): return String(n)
        case .seconds(let d): return String(format: "%.6f", d)
        case .null: return ""
        }
    }

    static func json(_ values: [(String, Value)]) -> String {
        "{" + values.map { name, v -> String in
            let value: String
            switch v {
            case .text(let s): value = quote(s)
            case .int(let n): value = String(n)
            case .seconds(let d): value = String(format: "%.6f", d)
            case .null: value = "null"
            }
            return quote(name) + ":" + value
        }.joined(separator: ",") + "}"
    }

    static func quote(_ s: String) -> String {
        var o = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": o += "\\\""
            case "\\": o += "\\\\"
            case "\n": o += "\\n"
            case "\r": o += "\\r"
            case "\t": o += "\\t"
            default:
                if u.value < 0x20 { o += String(format: "\\u%04x", u.value) } else { o.unicodeScalars.append(u) }
            }
        }
        return o + "\""
    }
}
