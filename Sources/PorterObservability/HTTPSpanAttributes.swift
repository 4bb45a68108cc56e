import Foundation
import HTTPTypes
import PorterCore
import Tracing

/// Span names and attributes after the OpenTelemetry HTTP client conventions
/// (`http.request.method`, `url.full`, `server.address`, `server.port`,
/// `http.response.status_code`, `network.protocol.version`, `error.type`), and the
/// propagation of a span's context into a request's header fields.
enum HTTPSpanAttributes {
    /// The methods the conventions know; any other is reported as `_OTHER`.
    private static let knownMethods: Set<String> = ["CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT",
                                                    "TRACE", "QUERY"]

    static func isHTTP(_ request: Request) -> Bool { request.scheme == "http" || request.scheme == "https" }

    /// "GET" (the method, as the conventions name HTTP client spans), "HTTP" for a
    /// method they do not know, and the scheme for other protocols ("ftp").
    static func spanName(for request: Request) -> String {
        guard isHTTP(request) else { return request.scheme.isEmpty ? "request" : request.scheme }
        let method = request.method.uppercased()
        return knownMethods.contains(method) ? method : "HTTP"
    }

    static func describe(_ request: Request, on span: any Span) {
        let url = request.url
        span.updateAttributes { a in
            if isHTTP(request) {
                let method = request.method.uppercased()
                if knownMethods.contains(method) {
                    a["http.request.method"] = method
                } else {
                    a["http.request.method"] = "_OTHER"
                    a["http.request.method_original"] = request.method
                }
            }
            if let full = redacted(url) { a["url.full"] = full }
            if !request.scheme.isEmpty { a["url.scheme"] = request.scheme }
            if let host = url.host, !host.isEmpty {
                a["server.address"] = host
                if let port = url.port ?? HandlerRegistry.shared.defaultPort(forScheme: request.scheme) { a["server.port"] = port }
            }
        }
    }

    static func describe(_ response: Response, on span: any Span) {
        span.updateAttributes { a in
            if let status = response.statusCode {
                a["http.response.status_code"] = status
                if status >= 400 { a["error.type"] = String(status) }
            }
            if let version = protocolVersion(response.statusLine) { a["network.protocol.version"] = version }
        }
        // A client span fails on 4xx and 5xx alike (the server span only on 5xx).
        if let status = response.statusCode, status >= 400 { span.setStatus(SpanStatus(code: .error)) }
    }

    /// Records `error` on `span` with nothing secret in it: a URL's credentials are
    /// redacted (PorterError's description shows its URL), resume data is dropped.
    static func record(_ error: PorterError, on span: any Span) {
        var shown = error
        shown.resumeData = nil
        if let url = error.url {
            shown.url = redacted(url).flatMap { URL(string: $0) }
            if let password = url.password(percentEncoded: false), !password.isEmpty {
                shown.message = shown.message.replacingOccurrences(of: password, with: "REDACTED")
            }
        }
        span.recordError(shown)
        span.attributes["error.type"] = error.code.description
        span.setStatus(SpanStatus(code: .error, message: shown.message))
    }

    /// Writes `context` into `request` as `tracer` propagates it (W3C `traceparent` and
    /// `tracestate` with an OpenTelemetry tracer). HTTP only: other protocols have no
    /// header fields a server would read. A field the tracer writes replaces one of
    /// the same name, so the server sees one parent.
    static func inject(_ context: ServiceContext, into request: inout Request, using tracer: any Tracer) {
        guard isHTTP(request) else { return }
        var written = PropagationFields()
        tracer.inject(context, into: &written, using: PropagationFields.Writer())
        for (name, value) in written.fields {
            guard let field = HTTPField.Name(name) else { continue }
            request.headerFields[field] = value
        }
    }

    /// `url` as text with any user name and password replaced by `REDACTED`, and the
    /// values of query parameters that carry signatures (`AWSAccessKeyId`, `Signature`,
    /// `sig`, `X-Goog-Signature`) too, as the conventions ask. nil when the URL cannot
    /// be taken apart: better no `url.full` than one with a secret in it.
    static func redacted(_ url: URL) -> String? {
        guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return nil }
        if parts.percentEncodedUser != nil { parts.percentEncodedUser = "REDACTED" }
        if parts.percentEncodedPassword != nil { parts.percentEncodedPassword = "REDACTED" }
        if let items = parts.percentEncodedQueryItems, items.contains(where: { sensitiveQueryNames.contains($0.name) }) {
            parts.percentEncodedQueryItems = items.map {
                sensitiveQueryNames.contains($0.name) ? URLQueryItem(name: $0.name, value: "REDACTED") : $0
            }
        }
        return parts.string
    }

    private static let sensitiveQueryNames: Set<String> = ["AWSAccessKeyId", "Signature", "sig", "X-Goog-Signature"]

    /// "HTTP/1.1 200 OK" → "1.1", "HTTP/2 200" → "2".
    static func protocolVersion(_ statusLine: String?) -> String? {
        guard let line = statusLine, line.hasPrefix("HTTP/") else { return nil }
        let version = line.dropFirst(5).prefix { $0 != " " }
        return version.isEmpty ? nil : String(version)
    }
}

/// The carrier a tracer writes its propagation fields into; names as the tracer
/// gives them (lower case for W3C: `traceparent`, `tracestate`).
struct PropagationFields {
    var fields: [(String, String)] = []

    struct Writer: Injector {
        func inject(_ value: String, forKey key: String, into carrier: inout PropagationFields) {
            carrier.fields.removeAll { $0.0.lowercased() == key.lowercased() }
            carrier.fields.append((key, value))
        }
    }
}
