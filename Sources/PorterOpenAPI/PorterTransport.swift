import Foundation
import HTTPTypes
import OpenAPIRuntime
import PorterCore
import PorterSession

/// A `ClientTransport` for clients made by Swift OpenAPI Generator that loads through a
/// Porter `Session`, with the session's handlers, cookies, cache, credentials, proxies,
/// TLS settings and timeouts.
///
///     Porter.bootstrap()
///     let client = Client(serverURL: try Servers.Server1.url(), transport: PorterTransport())
///
/// Bodies stream both ways. A request `HTTPBody` is read as the upload goes out, never
/// collected first: with a known length it is sent with `Content-Length`, else chunked
/// (HTTP/1.1). The response `HTTPBody` yields the body as it arrives, and a reader that
/// stops reading pauses the transfer once `receiveBufferLimit` bytes wait.
///
/// HTTP error statuses (4xx, 5xx) come back as responses. Failures to load (no
/// connection, a timeout, a broken body, a bad URL) are thrown as `PorterError`, which the
/// generated client wraps in `ClientError`. Cancelling the calling task cancels the load
/// and `send` (or reading the response body) throws `CancellationError`.
public struct PorterTransport: ClientTransport {
    /// What `PorterTransport` loads with.
    public struct Configuration: Sendable {
        /// The session every request is loaded in. Default: `Session.shared` (call
        /// `Porter.bootstrap()` once before, as for any Porter program, so that it has its
        /// http and https handlers).
        public var session: Session

        /// The idle timeout of each request in seconds: how long it may go without
        /// receiving (or sending) anything before it fails with `PorterError` `.timedOut`,
        /// as `URLRequest.timeoutInterval`. Nil: the session's
        /// `timeoutIntervalForRequest`. A bound on a whole request is the session's
        /// `timeoutIntervalForResource`.
        public var timeout: TimeInterval?

        /// Called with each Porter `Request` just before it is loaded, and the ID of the
        /// OpenAPI operation it is for: the place for what an `HTTPRequest` cannot say
        /// (a cache policy, a timeout for one operation, `suppressedHeaders`,
        /// properties for a handler of your own).
        public var prepare: (@Sendable (_ request: inout Request, _ operationID: String) -> Void)?

        public init(session: Session = .shared, timeout: TimeInterval? = nil,
                    prepare: (@Sendable (_ request: inout Request, _ operationID: String) -> Void)? = nil) {
            self.session = session
            self.timeout = timeout
            self.prepare = prepare
        }
    }

    public var configuration: Configuration

    public init(configuration: Configuration = .init()) {
        self.configuration = configuration
    }

    public func send(_ request: HTTPRequest, body: HTTPBody?, baseURL: URL,
                     operationID: String) async throws -> (HTTPResponse, HTTPBody?) {
        try Task.checkCancellation()
        let url = try Self.url(for: request, baseURL: baseURL)
        var fields = request.headerFields
        // The framing is the body's business: libcurl writes Content-Length or
        // Transfer-Encoding from what the body says of its length.
        let declaredLength = fields[.contentLength].flatMap { Int64($0) }.flatMap { $0 >= 0 ? $0 : nil }
        fields[.contentLength] = nil
        fields[.transferEncoding] = nil
        var porterRequest = Request(url: url, method: request.method.rawValue, headerFields: fields,
                                    timeoutInterval: configuration.timeout ?? 0)

        var source: RequestBodySource?
        if let body {
            let length: Int64?
            if case .known(let n) = body.length { length = n } else { length = declaredLength }
            if length == 0 {
                porterRequest.body = .data(Data())
            } else {
                let s = RequestBodySource(body: body, length: length, url: url)
                porterRequest.body = s.makePipe().map { .stream($0) }
                source = s
            }
        }
        configuration.prepare?(&porterRequest, operationID)

        let watcher = TransportTaskDelegate(source: source)
        let bytes: AsyncBytes
        let response: Response
        do {
            (bytes, response) = try await configuration.session.bytes(for: porterRequest, delegate: watcher)
        } catch {
            source?.close()
            throw Self.surfaced(error, source: source)
        }
        do {
            let head = try Self.httpResponse(response)
            return (head, try await Self.body(of: head, request: request, bytes: bytes))
        } catch {
            bytes.task.cancel()
            source?.close()
            throw Self.surfaced(error, source: source)
        }
    }

    // MARK: - request

    /// `baseURL` with the request's path and query after it: "https://host/v1" and
    /// "/pets?limit=2" make "https://host/v1/pets?limit=2" (a query of the base URL is
    /// kept before the request's). A path that names a scheme or a host of its own
    /// ("//elsewhere/x") is refused: the base URL decides where requests go.
    static func url(for request: HTTPRequest, baseURL: URL) throws -> URL {
        let target = request.path ?? ""
        guard var url = URLComponents(url: baseURL.absoluteURL, resolvingAgainstBaseURL: true),
              let tail = URLComponents(string: target), tail.scheme == nil, tail.host == nil else {
            throw PorterError(.badURL, "the request path \(target.debugDescription) does not follow \(baseURL.absoluteString)",
                              url: baseURL)
        }
        var path = url.percentEncodedPath
        var extra = tail.percentEncodedPath
        if !extra.isEmpty, !extra.hasPrefix("/") { extra = "/" + extra }
        if path.hasSuffix("/"), extra.hasPrefix("/") { path.removeLast() }
        url.percentEncodedPath = path + extra
        let queries = [url.percentEncodedQuery, tail.percentEncodedQuery].compactMap { $0 }.filter { !$0.isEmpty }
        url.percentEncodedQuery = queries.isEmpty ? nil : queries.joined(separator: "&")
        guard let result = url.url else {
            throw PorterError(.badURL, "the request path \(target.debugDescription) does not follow \(baseURL.absoluteString)",
                              url: baseURL)
        }
        return result
    }

    // MARK: - response

    /// The response head. A response of a scheme without statuses (file:, data:, your
    /// own) reads as 200 OK with its MIME type as Content-Type.
    static func httpResponse(_ response: Response) throws -> HTTPResponse {
        guard let code = response.statusCode else {
            var fields = response.headerFields
            if fields[.contentType] == nil, let mime = response.mimeType {
                fields[.contentType] = response.textEncodingName.map { "\(mime); charset=\($0)" } ?? mime
            }
            if fields[.contentLength] == nil, response.expectedContentLength >= 0 {
                fields[.contentLength] = String(response.expectedContentLength)
            }
            return HTTPResponse(status: .ok, headerFields: fields)
        }
        // HTTPResponse.Status traps outside 0...999; a status is three digits.
        guard (100...999).contains(code) else {
            throw PorterError(.badServerResponse, "the server answered with status \(code)", url: response.url)
        }
        return HTTPResponse(status: .init(code: code, reasonPhrase: reasonPhrase(response.statusLine)),
                            headerFields: response.headerFields)
    }

    /// "HTTP/1.1 404 Not Found" → "Not Found" (HTTP/2 has none).
    static func reasonPhrase(_ statusLine: String?) -> String {
        guard let line = statusLine else { return "" }
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        return parts.count == 3 ? parts[2].trimmingCharacters(in: .whitespacesAndNewlines) : ""
    }

    /// The response body: nil for HEAD (which has none); else the bytes as they come.
    static func body(of head: HTTPResponse, request: HTTPRequest, bytes: AsyncBytes) async throws -> HTTPBody? {
        if request.method == .head {
            // Nothing comes; waiting for the end keeps the connection for the next request.
            for try await _ in bytes.chunks {}
            return nil
        }
        let length: HTTPBody.Length
        if head.status.code == 204 || head.status.code == 304 || head.status.kind == .informational {
            length = .known(0)
        } else if let value = head.headerFields[.contentLength], let n = Int64(value), n >= 0,
                  (head.headerFields[.contentEncoding] ?? "identity").lowercased() == "identity" {
            // Porter decodes gzip and deflate bodies itself: with a coding, the length
            // the server gave is not the length that is read.
            length = .known(n)
        } else {
            length = .unknown
        }
        return HTTPBody(ResponseBodyChunks(chunks: bytes.chunks), length: length, iterationBehavior: .single)
    }

    /// What the caller sees of a failure: the request body's own error when it was the
    /// cause, `CancellationError` when the caller's task was cancelled, else the error.
    static func surfaced(_ error: any Error, source: RequestBodySource?) -> any Error {
        if let bodyError = source?.bodyError { return bodyError }
        if Task.isCancelled, let e = error as? PorterError, e.code == .cancelled { return CancellationError() }
        return error
    }
}
