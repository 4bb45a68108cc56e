import Foundation
import HTTPTypes
import PorterCore

/// Plays a HAR archive back through a stub handler, so tests of an application run with
/// no server: each request is answered with the recorded response whose request has the
/// same method, URL, body bytes and the values of the header fields the response's `Vary`
/// names (the canonical request). Several recordings of one request answer in turn (the
/// last one repeats). A request with no recording fails with `.resourceUnavailable`,
/// naming the request and what was recorded, and is listed in `misses`.
///
///     var configuration = SessionConfiguration.ephemeral
///     try HARReplay(contentsOf: harFile).attach(to: &configuration)
///
/// Redirects replay hop by hop (the session follows them as it would from the network);
/// recorded failures (`_error`) fail the same way; the body arrives in 64 KiB chunks
/// and honours back-pressure.
public final class HARReplay: @unchecked Sendable {
    public let har: HAR
    private let lock = NSLock()
    private var used: [Int: Int] = [:]   // first entry index of a key -> times served
    private var missed: [String] = []

    public init(_ har: HAR) { self.har = har }

    public convenience init(contentsOf url: URL) throws {
        self.init(try HAR.read(from: url))
    }

    /// The schemes of the recorded URLs.
    public var schemes: Set<String> {
        Set(har.log.entries.compactMap { URL(string: $0.request.url)?.scheme?.lowercased() })
    }

    /// The stub handler's factory (put it in `SessionConfiguration.handlers` yourself, or
    /// use `attach(to:)`).
    public var factory: any ProtocolHandlerFactory { ReplayFactory(replay: self, schemes: schemes.union(["http", "https"])) }

    /// Puts the replay in front of every other handler of the configuration.
    public func attach(to configuration: inout SessionConfiguration) {
        configuration.handlers.insert(factory, at: 0)
    }

    /// Requests that found no recording, as "METHOD URL".
    public var misses: [String] { lock.withLock { missed } }

    /// The entry that answers `request`, or an error that says why none does.
    func answer(for request: Request) -> Result<HAR.Entry, PorterError> {
        let method = request.method.uppercased()
        let url = request.url.maskingPassword   // as the recorder wrote it
        let body = Self.bodyBytes(request.body)
        let entries = har.log.entries
        let candidates = entries.indices.filter { i in
            let e = entries[i]
            guard e.request.method.uppercased() == method, e.request.url == url else { return false }
            if e._errorCode == PorterError.Code.cancelled.rawValue { return false }
            guard Self.recordedBody(e.request) == body else { return false }
            return Self.varyMatches(e, request)
        }
        guard let first = candidates.first else {
            let known = entries.map { "\($0.request.method) \($0.request.url)" }
            let line = "\(method) \(url)" + (body.isEmpty ? "" : " (body \(body.count) bytes)")
            lock.withLock { missed.append(line) }
            let same = entries.contains { $0.request.method.uppercased() == method && $0.request.url == url }
            let why = same ? "recorded with another body or other values of the fields its Vary names" : "not recorded"
            return .failure(PorterError(.resourceUnavailable,
                "HARReplay: no recorded response for \(line): \(why); the archive has \(known.count) entries"
                + (known.isEmpty ? "" : " (" + known.prefix(8).joined(separator: ", ") + (known.count > 8 ? ", …" : "") + ")"),
                url: request.url))
        }
        let served = lock.withLock { () -> Int in
            let n = used[first, default: 0]
            used[first] = n + 1
            return n
        }
        return .success(entries[candidates[min(served, candidates.count - 1)]])
    }

    static func bodyBytes(_ body: RequestBody?) -> Data {
        switch body {
        case .none: return Data()
        case .data(let d)?: return d
        case .file(let url)?: return (try? Data(contentsOf: url)) ?? Data()
        case .stream(let s)?:
            var out = Data()
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let n = (try? buffer.withUnsafeMutableBytes { try s.read(into: $0) }) ?? 0
                if n <= 0 { break }
                out.append(contentsOf: buffer[0..<n])
            }
            return out
        }
    }

    static func recordedBody(_ r: HAR.HTTPRequest) -> Data {
        guard let post = r.postData else { return Data() }
        if post._encoding == "base64" { return Data(base64Encoded: post.text) ?? Data() }
        return Data(post.text.utf8)
    }

    static func varyMatches(_ e: HAR.Entry, _ request: Request) -> Bool {
        let vary = e.response.headers.filter { $0.name.lowercased() == "vary" }
            .flatMap { $0.value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() } }
        for name in vary where name != "*" && !name.isEmpty {
            let recorded = e.request.headers.filter { $0.name.lowercased() == name }.map(\.value)
            let now = request.headerFields.filter { $0.name.canonicalName.lowercased() == name }.map(\.value)
            if recorded != now { return false }
        }
        return true
    }

    static func response(for e: HAR.Entry, url: URL, bodyLength: Int) -> Response {
        var fields = HTTPFields()
        for h in e.response.headers {
            if let name = HTTPField.Name(h.name) { fields.append(HTTPField(name: name, value: h.value)) }
        }
        let typeParts = e.response.content.mimeType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        let mime = typeParts.first.flatMap { $0.isEmpty || $0 == "x-unknown" ? nil : $0 }
        let charset = typeParts.dropFirst().first { $0.lowercased().hasPrefix("charset=") }.map { String($0.dropFirst(8)) }
        var r = Response(url: url, mimeType: mime, expectedContentLength: Int64(bodyLength), textEncodingName: charset,
                         statusCode: e.response.status, headerFields: fields)
        r.statusLine = "\(e.response.httpVersion) \(e.response.status) \(e.response.statusText)"
        return r
    }

    static func content(_ e: HAR.Entry) -> Data {
        guard let text = e.response.content.text else { return Data() }
        if e.response.content.encoding == "base64" { return Data(base64Encoded: text) ?? Data() }
        return Data(text.utf8)
    }
}

private enum HTTPSchemes {
    static let defaultPort = ["http": 80, "https": 443]
}

struct ReplayFactory: ProtocolHandlerFactory {
    let replay: HARReplay
    let schemes: Set<String>
    var name: String { "HARReplay" }
    func canHandle(_ request: Request) -> Bool { true }
    func canonicalRequest(for request: Request) -> Request { request }
    func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool { a.url == b.url }
    /// A HAR file records HTTP: replayed http and https loads keep HTTP's declarations,
    /// so a session that replays without the HTTP handler registered still carries cookies.
    func defaultPort(for scheme: String) -> Int? { HTTPSchemes.defaultPort[scheme] }
    func carriesCookies(for scheme: String) -> Bool { HTTPSchemes.defaultPort[scheme] != nil }
    func makeHandler(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) -> any ProtocolHandler {
        switch replay.answer(for: request) {
        case .failure(let error): return FailingHandler(error: error, client: client)
        case .success(let entry): return ReplayHandler(entry: entry, request: request, client: client)
        }
    }
}

/// Serves one recorded entry.
final class ReplayHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { [] }
    let entry: HAR.Entry
    let request: Request
    let client: any ProtocolClient
    private let flow = FlowControl()
    private static let queue = DispatchQueue(label: "porter.har-replay", attributes: .concurrent)

    init(entry: HAR.Entry, request: Request, client: any ProtocolClient) {
        self.entry = entry
        self.request = request
        self.client = client
    }
    convenience init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.init(entry: HAR.Entry(startedDateTime: "", time: 0,
                                   request: HAR.HTTPRequest(method: "GET", url: "", httpVersion: "", cookies: [], headers: [], queryString: [],
                                                            postData: nil, headersSize: -1, bodySize: 0),
                                   response: HAR.HTTPResponse(status: 0, statusText: "", httpVersion: "", cookies: [], headers: [],
                                                              content: HAR.Content(size: 0, mimeType: "x-unknown"), redirectURL: "",
                                                              headersSize: -1, bodySize: 0),
                                   cache: HAR.Cache(), timings: HAR.Timings(blocked: -1, dns: -1, connect: -1, send: 0, wait: 0, receive: 0, ssl: -1),
                                   _errorCode: PorterError.Code.resourceUnavailable.rawValue),
                  request: request, client: client)
    }

    func startLoading() {
        Self.queue.async { self.deliver() }
    }
    func stopLoading() { flow.stop() }
    func pauseDelivery() { flow.pause() }
    func resumeDelivery() { flow.resume() }

    private func deliver() {
        let e = entry
        if let code = e._errorCode, e.response.status == 0 {
            client.didFail(with: PorterError(PorterError.Code(rawValue: code) ?? .unknown,
                                             "replayed: " + (e._error ?? "the recorded load failed"), url: request.url))
            return
        }
        var metrics = TransactionMetrics(request: request, fetchType: "local")
        metrics.fetchStartDate = Date()
        let body = HARReplay.content(e)
        let response = HARReplay.response(for: e, url: request.url, bodyLength: body.count)
        if (300...399).contains(e.response.status), !e.response.redirectURL.isEmpty,
           let target = URL(string: e.response.redirectURL, relativeTo: request.url)?.absoluteURL {
            var next = request
            next.url = target
            let status = e.response.status
            if status == 303 || ((status == 301 || status == 302) && request.method.uppercased() == "POST") {
                if request.method.uppercased() != "HEAD" { next.method = "GET" }
                next.body = nil
            }
            client.didCollect(metrics)
            client.wasRedirected(to: next, redirectResponse: response)
            return
        }
        metrics.responseStartDate = Date()
        metrics.response = response
        client.didReceive(response, cacheStoragePolicy: .notAllowed)
        var offset = 0
        while offset < body.count {
            guard flow.waitWhilePaused() else { return }
            let end = min(body.count, offset + (64 << 10))
            client.didLoad(body.subdata(in: offset..<end))
            offset = end
        }
        if flow.isStopped { return }
        metrics.responseEndDate = Date()
        metrics.countOfResponseBodyBytesReceived = Int64(body.count)
        client.didCollect(metrics)
        client.didFinishLoading()
    }
}

extension HAR.Content {
    init(size: Int, mimeType: String) {
        self.init(size: size, compression: nil, mimeType: mimeType, text: nil, encoding: nil, comment: nil)
    }
}

extension HAR.Entry {
    init(startedDateTime: String, time: Double, request: HAR.HTTPRequest, response: HAR.HTTPResponse, cache: HAR.Cache,
         timings: HAR.Timings, _errorCode: Int?) {
        self.init(pageref: nil, startedDateTime: startedDateTime, time: time, request: request, response: response, cache: cache,
                  timings: timings, serverIPAddress: nil, connection: nil, comment: nil, _error: nil, _errorCode: _errorCode)
    }
}
