import Foundation
import HTTPTypes
import PorterCore

/// Records what a session loads — request and response heads and bodies, timings and
/// metrics — as an HTTP Archive (HAR 1.2) that browsers' developer tools open and
/// `HARReplay` plays back:
///
///     let recorder = HARRecorder()
///     var configuration = SessionConfiguration.ephemeral
///     recorder.attach(to: &configuration)
///     let session = Session(configuration: configuration)
///     _ = try await session.data(from: url)
///     try recorder.write(to: URL(fileURLWithPath: "session.har"))
///
/// It sits in front of the handlers the configuration had (attach it last), so each load
/// — and each redirect hop — becomes one entry with what the handler was asked and what
/// it answered. Header fields a handler's library adds on the wire by itself (curl's
/// `Accept`, `User-Agent`, `Cookie` from the cookie store) are not seen.
public final class HARRecorder: @unchecked Sendable {
    /// Bodies larger than this are recorded by size only (`content.comment` says so).
    public let bodyLimit: Int
    /// Request header fields whose values are written as "***" (lower case), so an
    /// archive kept with the tests holds no secret. A password in a URL is always masked.
    public let redactedHeaders: Set<String>
    private let lock = NSLock()
    private var recorded: [(order: UInt64, entry: HAR.Entry)] = []
    private var counter: UInt64 = 0

    public init(bodyLimit: Int = 16 << 20, redactedHeaders: Set<String> = ["authorization", "proxy-authorization"]) {
        self.bodyLimit = bodyLimit
        self.redactedHeaders = Set(redactedHeaders.map { $0.lowercased() })
    }

    /// Records the loads of `schemes` made with this configuration (and sessions made
    /// from it afterwards).
    public func attach(to configuration: inout SessionConfiguration, schemes: Set<String> = ["http", "https"]) {
        let factory = InterposingFactory(name: "HARRecorder", schemes: schemes, configuration: configuration) { [self] request, make, client, cached in
            let order = self.nextOrder()
            let recording = RecordingClient(target: client, recorder: self, order: order, request: request, cached: cached)
            let handler = WrappingHandler(inner: make(recording.teedRequest, recording))
            handler.onStop = { recording.finish(error: PorterError(.cancelled, "stopped", url: request.url), stopped: true) }
            return handler
        }
        factory.install(on: &configuration)
    }

    private func nextOrder() -> UInt64 { lock.withLock { counter += 1; return counter } }

    func add(_ entry: HAR.Entry, order: UInt64) {
        lock.withLock { recorded.append((order, entry)) }
    }

    /// The entries so far, in the order their loads started.
    public var entries: [HAR.Entry] { lock.withLock { recorded.sorted { $0.order < $1.order }.map(\.entry) } }

    /// Forgets what was recorded.
    public func reset() { lock.withLock { recorded.removeAll() } }

    /// The recording as a HAR 1.2 archive.
    public var har: HAR {
        HAR(log: HAR.Log(version: "1.2", creator: HAR.Creator(name: "Porter", version: "PorterTesting"), pages: nil,
                         entries: entries, comment: nil))
    }

    public func write(to url: URL) throws { try har.write(to: url) }
}

/// A request body stream that keeps a copy of what is read (up to a limit).
final class TeeBodyStream: BodyStream, @unchecked Sendable {
    let source: any BodyStream
    let limit: Int
    private let lock = NSLock()
    private var copy = Data()
    private var overflow = false
    init(_ source: any BodyStream, limit: Int) {
        self.source = source
        self.limit = limit
    }
    var knownLength: Int64? { source.knownLength }
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        let n = try source.read(into: buffer)
        if n > 0 {
            lock.withLock {
                if copy.count + n <= limit { copy.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[0..<n])) } else { overflow = true }
            }
        }
        return n
    }
    var captured: Data? { lock.withLock { overflow ? nil : copy } }
}

final class RecordingClient: ForwardingClient, @unchecked Sendable {
    private weak var recorder: HARRecorder?
    private let order: UInt64
    private let request: Request
    let teedRequest: Request
    private let tee: TeeBodyStream?
    private let cached: CachedResponse?
    private let started = Date()
    private let lock = NSLock()
    private var response: Response?
    private var body = Data()
    private var bodyTruncated = false
    private var bodyCount = 0
    private var metrics: TransactionMetrics?
    private var done = false

    init(target: any ProtocolClient, recorder: HARRecorder, order: UInt64, request: Request, cached: CachedResponse?) {
        self.recorder = recorder
        self.order = order
        self.request = request
        self.cached = cached
        if case .stream(let s) = request.body {
            let t = TeeBodyStream(s, limit: recorder.bodyLimit)
            tee = t
            var r = request
            r.body = .stream(t)
            teedRequest = r
        } else {
            tee = nil
            teedRequest = request
        }
        super.init(target: target)
    }

    override func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy) {
        lock.withLock { if self.response == nil { self.response = response } }
        super.didReceive(response, cacheStoragePolicy: cacheStoragePolicy)
    }
    override func didLoad(_ data: Data) {
        let limit = recorder?.bodyLimit ?? 0
        lock.withLock {
            bodyCount += data.count
            if body.count + data.count <= limit { body.append(data) } else { bodyTruncated = true }
        }
        super.didLoad(data)
    }
    override func didCollect(_ metrics: TransactionMetrics) {
        lock.withLock { self.metrics = metrics }
        super.didCollect(metrics)
    }
    override func wasRedirected(to request: Request, redirectResponse: Response) {
        lock.withLock { if self.response == nil { self.response = redirectResponse } }
        finish(error: nil, redirect: request.url)
        super.wasRedirected(to: request, redirectResponse: redirectResponse)
    }
    override func didFinishLoading() {
        finish(error: nil)
        super.didFinishLoading()
    }
    override func didFail(with error: PorterError) {
        finish(error: error)
        super.didFail(with: error)
    }
    override func cachedResponseIsValid(serving response: Response, revalidated: Bool) {
        servedFromCache(response)
        super.cachedResponseIsValid(serving: response, revalidated: revalidated)
    }
    override func cachedResponseIsValid() {
        if let cached { servedFromCache(cached.response) }
        super.cachedResponseIsValid()
    }
    private func servedFromCache(_ head: Response) {
        lock.withLock {
            response = head
            body = cached?.data ?? Data()
            bodyCount = body.count
        }
        finish(error: nil)
    }

    func finish(error: PorterError?, redirect: URL? = nil, stopped: Bool = false) {
        let snapshot: (Response?, Data, Bool, Int, TransactionMetrics?)? = lock.withLock {
            if done { return nil }
            done = true
            return (response, body, bodyTruncated, bodyCount, metrics)
        }
        guard let (response, body, truncated, count, metrics) = snapshot, let recorder else { return }
        if stopped && response == nil { return }   // cancelled before anything came back: nothing to replay
        let entry = HARBuilder.entry(request: request, redacting: recorder.redactedHeaders, requestBody: requestBody(limit: recorder.bodyLimit), started: started,
                                     response: response, body: truncated ? nil : body, bodyCount: count,
                                     metrics: metrics, redirect: redirect, error: stopped ? nil : error)
        recorder.add(entry, order: order)
    }

    private func requestBody(limit: Int) -> Data? {
        switch request.body {
        case .none: return nil
        case .data(let d)?: return d.count <= limit ? d : nil
        case .file(let url)?:
            guard let size = RequestBody.file(url).knownLength, size <= Int64(limit) else { return nil }
            return try? Data(contentsOf: url)
        case .stream?: return tee?.captured
        }
    }
}

/// Porter values to HAR entries and back.
enum HARBuilder {
    static func entry(request: Request, redacting: Set<String> = [], requestBody: Data?, started: Date, response: Response?, body: Data?, bodyCount: Int,
                      metrics: TransactionMetrics?, redirect: URL?, error: PorterError?) -> HAR.Entry {
        let httpVersion = version(response: response, metrics: metrics)
        let reqHeaders = request.headerFields.map {
            HAR.NameValue(name: $0.name.canonicalName, value: redacting.contains($0.name.canonicalName.lowercased()) ? "***" : $0.value)
        }
        let query = URLComponents(url: request.url, resolvingAgainstBaseURL: false)?.queryItems?
            .map { HAR.NameValue(name: $0.name, value: $0.value ?? "") } ?? []
        var postData: HAR.PostData?
        if let requestBody {
            let (text, encoding) = textOrBase64(requestBody)
            postData = HAR.PostData(mimeType: request.value(forHeader: "Content-Type") ?? "application/octet-stream",
                                    text: text, _encoding: encoding, params: nil)
        }
        let harRequest = HAR.HTTPRequest(
            method: request.method.uppercased(), url: request.url.maskingPassword, httpVersion: httpVersion,
            cookies: cookies(request.value(forHeader: "Cookie")), headers: reqHeaders, queryString: query, postData: postData,
            headersSize: -1, bodySize: requestBody?.count ?? (request.body == nil ? 0 : -1))

        var harResponse: HAR.HTTPResponse
        if let response {
            let status = response.statusCode ?? 200
            var statusText = ""
            if let line = response.statusLine {
                let parts = line.split(separator: " ", maxSplits: 2)
                if parts.count == 3 { statusText = String(parts[2]).trimmingCharacters(in: .whitespacesAndNewlines) }
            }
            if statusText.isEmpty { statusText = HTTPResponse.Status(code: status).reasonPhrase }
            var mime = response.value(forHeader: "Content-Type") ?? response.mimeType ?? "x-unknown"
            if response.value(forHeader: "Content-Type") == nil, let charset = response.textEncodingName, response.mimeType != nil {
                mime += "; charset=\(charset)"
            }
            var content = HAR.Content(size: bodyCount, compression: nil, mimeType: mime, text: nil, encoding: nil, comment: nil)
            if let body {
                let (text, encoding) = textOrBase64(body)
                content.text = text
                content.encoding = encoding
            } else {
                content.comment = "body not recorded: larger than the recorder's bodyLimit"
            }
            let setCookies = response.headerFields.filter { $0.name == .setCookie }.map(\.value)
            let received = metrics.map { Int($0.countOfResponseBodyBytesReceived) } ?? 0
            harResponse = HAR.HTTPResponse(
                status: status, statusText: statusText, httpVersion: httpVersion,
                cookies: setCookies.flatMap { cookies($0, setCookie: true) },
                headers: response.headerFields.map { HAR.NameValue(name: $0.name.canonicalName, value: $0.value) },
                content: content,
                redirectURL: redirect?.absoluteString ?? response.value(forHeader: "Location") ?? "",
                headersSize: -1, bodySize: received > 0 ? received : bodyCount)
        } else {
            harResponse = HAR.HTTPResponse(status: 0, statusText: "", httpVersion: "", cookies: [], headers: [],
                                           content: HAR.Content(size: 0, compression: nil, mimeType: "x-unknown", text: nil, encoding: nil, comment: nil),
                                           redirectURL: "", headersSize: -1, bodySize: -1)
        }
        let timings = self.timings(metrics, started: started)
        let total = [timings.blocked, timings.dns, timings.connect, timings.send, timings.wait, timings.receive].filter { $0 > 0 }.reduce(0, +)
        var entry = HAR.Entry(pageref: nil, startedDateTime: HAR.timestamp(metrics?.fetchStartDate ?? started),
                              time: total, request: harRequest, response: harResponse, cache: HAR.Cache(), timings: timings,
                              serverIPAddress: metrics?.remoteAddress, connection: metrics?.localPort.map(String.init), comment: nil)
        if let error {
            entry._error = "\(error.code): \(error.message)"
            entry._errorCode = error.code.rawValue
        }
        return entry
    }

    static func version(response: Response?, metrics: TransactionMetrics?) -> String {
        if let line = response?.statusLine, let first = line.split(separator: " ").first, first.hasPrefix("HTTP/") {
            return String(first) == "HTTP/2" ? "HTTP/2.0" : String(first)
        }
        switch metrics?.networkProtocolName?.lowercased() {
        case "h2"?, "http/2"?: return "HTTP/2.0"
        case "http/1.0"?: return "HTTP/1.0"
        default: return "HTTP/1.1"
        }
    }

    static func textOrBase64(_ data: Data) -> (String, String?) {
        if let text = String(data: data, encoding: .utf8) { return (text, nil) }
        return (data.base64EncodedString(), "base64")
    }

    static func cookies(_ header: String?, setCookie: Bool = false) -> [HAR.Cookie] {
        guard let header, !header.isEmpty else { return [] }
        let pairs = setCookie ? [header.split(separator: ";", maxSplits: 1).first.map(String.init) ?? ""]
                              : header.split(separator: ";").map(String.init)
        return pairs.compactMap { pair in
            let kv = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard let name = kv.first, !name.isEmpty else { return nil }
            return HAR.Cookie(name: name, value: kv.count > 1 ? kv[1] : "", path: nil, domain: nil, expires: nil, httpOnly: nil, secure: nil)
        }
    }

    static func timings(_ m: TransactionMetrics?, started: Date) -> HAR.Timings {
        func ms(_ a: Date?, _ b: Date?) -> Double {
            guard let a, let b else { return -1 }
            return max(0, (b.timeIntervalSince(a) * 1000 * 1000).rounded() / 1000)
        }
        guard let m else { return HAR.Timings(blocked: -1, dns: -1, connect: -1, send: 0, wait: 0, receive: 0, ssl: -1) }
        let fetch = m.fetchStartDate ?? started
        let blocked = ms(fetch, m.domainLookupStartDate ?? m.connectStartDate ?? m.requestStartDate)
        let dns = ms(m.domainLookupStartDate, m.domainLookupEndDate)
        let connect = ms(m.connectStartDate, m.connectEndDate)   // includes ssl, as HAR asks
        let ssl = ms(m.secureConnectionStartDate, m.connectEndDate)
        let wait = ms(m.requestStartDate, m.responseStartDate)
        let receive = ms(m.responseStartDate, m.responseEndDate)
        return HAR.Timings(blocked: blocked, dns: dns, connect: connect, send: 0, wait: max(0, wait), receive: max(0, receive), ssl: ssl)
    }
}
