import Foundation
import HTTPTypes
import PorterCore

/// The header lines libcurl gets for a request (CURLOPT_HTTPHEADER), in libcurl's own
/// syntax: "Name: value" adds, "Name:" removes a header libcurl would add itself, and
/// "Name;" sends one with an empty value.
enum RequestHead {
    /// Every coding ContentDecoder decodes, most compact first in the server's eyes (it
    /// picks; the order carries no weight without q-values).
    static let defaultAcceptEncoding = "gzip, deflate, br, zstd"
    /// Bodies from this size on (or of unknown size) may ask `Expect: 100-continue`, as
    /// curl does; smaller ones never wait for a "100 Continue".
    static let expectThreshold: Int64 = 1 << 20

    /// What a request's head asks of libcurl: the custom lines (CURLOPT_HTTPHEADER) and
    /// the User-Agent libcurl writes itself (CURLOPT_USERAGENT, nil: none).
    struct Plan: Equatable {
        var lines: [String] = []
        var userAgent: String?
    }

    /// The default User-Agent goes through CURLOPT_USERAGENT, not as a custom line: libcurl
    /// then writes it where curl's own goes (after Host, before Accept), and a plain GET
    /// carries one custom line (Accept-Encoding) instead of two — each custom line costs
    /// a formatted copy and a scan per header libcurl considers adding. Accept-Encoding
    /// stays a line: CURLOPT_ACCEPT_ENCODING would also make libcurl parse Content-Encoding
    /// itself (and refuse a response that stacks more than five codings), which Porter's
    /// ContentDecoder does.
    static func plan(for request: Request, bodyLength: Int64?, userAgent: String, decodes: Bool = true) -> Plan {
        var plan = Plan()
        var lines: [String] = []
        if let range = request.resumeRange, range.offset > 0 {
            // Resume: ask for the rest, only if the resource is unchanged. A 200 instead of
            // a 206 means "changed or no ranges": the download task starts over cleanly.
            lines.append("Range: bytes=\(range.offset)-")
            if let validator = range.validator { lines.append("If-Range: \(validator)") }
        }
        let suppressedSet = request.suppressedHeaders
        let suppressed = suppressedSet.isEmpty ? suppressedSet : Set(suppressedSet.map { $0.lowercased() })
        // RFC 6265 §5.4: one Cookie field on HTTP/1.1. HTTPFields keeps one field per
        // cookie pair (HTTP/2's way); they are joined back here, in their order.
        var cookies: [String] = []
        var cookieLine: Int?
        let fields = request.headerFields
        for field in fields {
            // A value cannot carry CR, LF or NUL: drop such a field rather than let it split the request.
            if field.value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) { continue }
            if field.name == .cookie {
                if field.value.isEmpty { continue }
                if cookieLine == nil { cookieLine = lines.count; lines.append("") }
                cookies.append(field.value)
                continue
            }
            lines.append(field.value.isEmpty ? "\(field.name.rawName);" : "\(field.name.rawName): \(field.value)")
        }
        if let cookieLine { lines[cookieLine] = "Cookie: " + cookies.joined(separator: "; ") }
        let hasFields = !fields.isEmpty
        func present(_ name: HTTPField.Name) -> Bool { hasFields && fields[name] != nil }
        // libcurl also sends CURLOPT_USERAGENT in a proxy's CONNECT (custom lines never go
        // there), as curl sends its -A: the request's own User-Agent when it has one (its
        // line still goes to the server: libcurl adds no second one), else the default.
        if !suppressed.contains("user-agent") {
            if !present(.userAgent) {
                plan.userAgent = userAgent
            } else if let own = fields[.userAgent], !own.isEmpty, !own.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) {
                plan.userAgent = own
            }
        }
        // Offered only when Porter decodes what comes back (decodesContentEncoding).
        if !present(.acceptEncoding), !suppressed.contains("accept-encoding"), decodes {
            lines.append(acceptEncodingLine)
        }
        // A small body never waits on a server that ignores Expect (curl: only large uploads ask).
        if let bodyLength, bodyLength < expectThreshold, !present(.expect) { lines.append("Expect:") }
        if !suppressed.isEmpty {
            for name in suppressed.sorted() where !lines.contains(where: { $0.lowercased().hasPrefix(name + ":") }) {
                lines.append("\(name):")
            }
        }
        plan.lines = lines
        return plan
    }

    private static let acceptEncodingLine = "Accept-Encoding: \(defaultAcceptEncoding)"
}
