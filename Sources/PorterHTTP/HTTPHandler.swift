import CCurl
import Foundation
import HTTPTypes
import PorterCore
import PorterCurl

/// The handler for `http:` and `https:` on libcurl, through the public contract only.
///
/// - libcurl never follows redirects: each 3xx with a Location is reported to the
///   client (`wasRedirected`), which lets the delegate decide. 301/302 turn POST into
///   GET and 303 turns anything but HEAD into GET (dropping the body); 307/308 keep the
///   method and body.
/// - A 401 or 407 with a challenge header becomes an `AuthenticationChallenge`
///   (Basic, Digest, NTLM, Negotiate); a credential retries the request with it, and
///   default handling delivers the 401/407 as the response.
/// - TLS is verified against the system CAs or `caCertificateFile`; `expectedContentLength`
///   is the Content-Length as sent (the *encoded* length when libcurl decodes gzip,
///   deflate or br for you), -1 when absent.
/// - Back-pressure pauses libcurl (`CURL_WRITEFUNC_PAUSE`) until resumed.
public final class HTTPHandler: ProtocolHandler, @unchecked Sendable {
    public static var schemes: Set<String> { ["http", "https"] }
    /// The task's life cycle runs on the libcurl loop that carries the transfer.
    public static func executor(for request: Request, context: SessionContext) -> (any TaskExecutor)? {
        CurlLoop.loop(for: context.configuration)
    }
    public static let defaultUserAgent = "Porter/\(porterVersion)"
    /// A request property (`Request.setProperty(true, forKey:)`): a 3xx is the response,
    /// body and all, and is not reported as a redirect — curl without -L. (A delegate that
    /// refuses a redirect gets the 3xx's head only.)
    public static let deliversRedirectsProperty = "porter.http.deliversRedirects"
    /// See `CurlOptions.debugProperty` (curl -v / --trace: the request head as sent).
    public static let debugProperty = CurlOptions.debugProperty
    /// See `CurlOptions.ipResolveProperty` (4 or 6: curl's -4 / -6) and
    /// `CurlOptions.connectToProperty` (curl's --connect-to); ftp and ftps honour them too.
    public static let ipResolveProperty = CurlOptions.ipResolveProperty
    public static let connectToProperty = CurlOptions.connectToProperty
    /// Stream and WebSocket tasks: a connect-only libcurl connection on the session's loop.
    public static func openStream(to target: ByteStreamTarget, context: SessionContext) -> (any ByteStream)? {
        CurlStream(target: target, configuration: context.configuration)
    }

    /// The request being sent; an authentication retry may give it a fresh body stream.
    private var request: Request  // loop thread after init
    private let client: any ProtocolClient
    private let loop: CurlLoop
    private let stager: BodyStager
    private let state = CurlLoadState()
    static let receiveBufferSize = 256 * 1024
    static let stagingBufferSize = BodyStager.bufferSize

    // Loop thread only:
    private var transfer: CurlTransfer? {  // loop thread; kept in `state` so stopLoading can end it
        get { state.transfer }
        set { state.transfer = newValue }
    }
    private var head = Head()
    private var mode = Mode.waiting
    private var credential: Credential?
    private var authMethod: AuthenticationMethod?
    private var proxyCredential: Credential?
    private var proxyAuthMethod: AuthenticationMethod?
    private var trustedKeyPin: String?
    private var trustAsked = false
    private var failures = 0
    /// Decodes the current response's body (gzip, deflate); nil: delivered as it came.
    private var decoder: ContentDecoder?
    private var decodeError: PorterError?
    private var tlsFacts: (version: String, cipher: String)?
    private var started = Date()

    private enum Mode {
        case waiting
        case body
        case redirect(Response)
        case challenge(Response, Data)
        /// A 416 to a resume request: load again from the start.
        case restart
        /// A 304 to our conditional request: the cached response is still good.
        case notModified(Response)
    }

    private struct Head {
        var status = 0
        var fields = HTTPFields()
        var version = ""
        var line = ""
    }

    /// The cache's stored response for this request (GET / HEAD), if any.
    private let cached: CachedResponse?
    /// Set when this load asks the server whether `cached` is still good.
    private var revalidating = false

    public init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.cached = cachedResponse
        self.client = client
        // The task runs on the loop executor(for:context:) named; the same one by its settings.
        self.loop = (client.context.executor as? CurlLoop) ?? CurlLoop.loop(for: client.context.configuration)
        self.stager = BodyStager(client: client, loop: loop)
    }

    private var isStopped: Bool { state.isStopped }

    public func startLoading() {
        // RFC 9111 §4: a fresh stored response is served without the network (unless the
        // request's policy is to revalidate); a stale one with validators is revalidated.
        let now = Date()
        let onlyIfCached = CacheControl(request.headerFields[values: .cacheControl]).onlyIfCached
        if let cached {
            let policy = request.cachePolicy == .useProtocolCachePolicy
                ? client.context.configuration.requestCachePolicy : request.cachePolicy
            if policy != .reloadRevalidatingCacheData, HTTPCacheRules.isFresh(cached, request: request, now: now) {
                serveFromCache(cached, now: now)
                return
            }
            // RFC 5861: stale, but inside its stale-while-revalidate window: served now,
            // revalidated in the background.
            if policy != .reloadRevalidatingCacheData, !onlyIfCached,
               HTTPCacheRules.mayServeWhileRevalidating(cached, request: request, now: now) {
                serveFromCache(cached, now: now)
                BackgroundRevalidation.start(request: request, cached: cached, context: client.context)
                return
            }
        }
        // §5.2.1.7: only-if-cached and nothing fresh stored: 504, without the network.
        if onlyIfCached {
            var r = Response(url: request.url, mimeType: nil, expectedContentLength: 0, statusCode: 504, headerFields: [:])
            r.statusLine = "HTTP/1.1 504 Gateway Timeout"
            r.headerFields[.contentLength] = "0"
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didFinishLoading()
            return
        }
        if let cached {
            let validators = HTTPCacheRules.conditionalHeaders(for: cached)
            let ownConditions = request.value(forHeader: "If-None-Match") != nil || request.value(forHeader: "If-Modified-Since") != nil
            if !validators.isEmpty, !ownConditions, request.resumeRange == nil {
                for (name, value) in validators { _ = request.setValue(value, forHeader: name) }
                revalidating = true
            }
        }
        loop.enqueue { [self] in begin() }
    }

    /// A fresh stored response answers: as it is; as a 304 when the client's own
    /// validators match it (RFC 9110 §13.1); or one range of it as a 206 for a Range
    /// request.
    private func serveFromCache(_ cached: CachedResponse, now: Date) {
        let served = HTTPCacheRules.serving(cached, now: now)
        if request.method.uppercased() == "GET" || request.method.uppercased() == "HEAD",
           HTTPCacheRules.clientConditionMatches(request, served) {
            var r = served
            r.statusCode = 304
            r.statusLine = "HTTP/1.1 304 Not Modified"
            r.headerFields[.contentLength] = nil
            r.expectedContentLength = 0
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didFinishLoading()
            return
        }
        if let (r, body) = HTTPCacheRules.rangeAnswer(for: request, CachedResponse(response: served, data: cached.data)) {
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            if !body.isEmpty, request.method.uppercased() != "HEAD" { client.didLoad(body) }
            client.didFinishLoading()
            return
        }
        client.cachedResponseIsValid(serving: served, revalidated: false)
    }

    public func stopLoading() { state.stopLoading(on: loop, stager: stager) }
    public func pauseDelivery() { state.setPaused(true) }
    public func resumeDelivery() { state.resumeDelivery(on: loop) }

    // MARK: - set-up (loop thread)

    private func begin() {
        guard !isStopped else { return }
        let config = client.context.configuration
        guard let t = CurlTransfer.make(on: loop, reportingTo: client, url: request.url) else { return }
        transfer = t
        head = Head()
        mode = .waiting
        started = Date()

        t.set(CURLOPT_URL, request.url.absoluteString)
        t.set(CURLOPT_FOLLOWLOCATION, 0)
        // Porter decodes gzip and deflate itself (ContentDecoder): libcurl passes the
        // bytes as they came, so a paused transfer holds compressed bytes only.
        t.set(CURLOPT_HTTP_CONTENT_DECODING, 0)
        t.set(CURLOPT_BUFFERSIZE, HTTPHandler.receiveBufferSize)
        t.set(CURLOPT_HTTP_VERSION, config.http2Enabled ? Int(CURL_HTTP_VERSION_2TLS) : Int(CURL_HTTP_VERSION_1_1))
        // Requests that start together wait for the first connection to say whether it
        // multiplexes (HTTP/2) instead of each opening a connection of its own.
        if config.http2Enabled { t.set(CURLOPT_PIPEWAIT, 1) }
        CurlOptions.apply(to: t, request: request, configuration: config, protocols: "http,https", pinnedKey: trustedKeyPin)

        if let credential, let user = credential.user, let password = credential.password {
            t.set(CURLOPT_USERNAME, user)
            t.set(CURLOPT_PASSWORD, password)
            t.set(CURLOPT_HTTPAUTH, HTTPHandler.curlAuth(authMethod))
        }
        if let proxyCredential, let user = proxyCredential.user, let password = proxyCredential.password {
            t.set(CURLOPT_PROXYUSERNAME, user)
            t.set(CURLOPT_PROXYPASSWORD, password)
            t.set(CURLOPT_PROXYAUTH, HTTPHandler.curlAuth(proxyAuthMethod))
        }

        configureMethodAndBody(t)
        state.limitRate(config.maximumBytesPerSecond)
        // A large or streamed body may still ask Expect: 100-continue; a server that
        // ignores it costs a quarter of a second, not libcurl's whole second.
        t.set(CURLOPT_EXPECT_100_TIMEOUT_MS, 250)

        let bodyLength: Int64? = state.body.map { $0.length ?? -1 }.map { $0 < 0 ? Int64.max : $0 }
        let lines = RequestHead.lines(for: request, bodyLength: bodyLength, userAgent: HTTPHandler.defaultUserAgent)
        t.set(CURLOPT_HTTPHEADER, list: lines)

        t.onHeader = { [unowned self] line in header(line) }
        t.onData = { [unowned self] bytes in data(bytes) }
        t.onRead = { [state] buffer in state.read(buffer) }
        t.onProgress = { [state, client] _, _, ulTotal, ulNow in state.progress(uploadTotal: ulTotal, uploaded: ulNow, client: client) }
        t.onComplete = { [self] code in complete(code) }
        t.onFlush = { [unowned self] in stager.handOver() }
        t.start()
    }

    private func configureMethodAndBody(_ t: CurlTransfer) {
        let method = request.method.uppercased()
        state.startUpload(request.body, on: loop)
        if method == "HEAD" {
            t.set(CURLOPT_NOBODY, 1)
            return
        }
        guard let body = state.body else {
            if method == "GET" { t.set(CURLOPT_HTTPGET, 1) } else { t.set(CURLOPT_CUSTOMREQUEST, request.method) }
            return
        }
        let length = body.length ?? -1
        if method == "POST" {
            t.set(CURLOPT_POST, 1)
            t.set(CURLOPT_POSTFIELDSIZE_LARGE, offset: length)
        } else {
            t.set(CURLOPT_UPLOAD, 1)
            t.set(CURLOPT_INFILESIZE_LARGE, offset: length)
            if method != "PUT" { t.set(CURLOPT_CUSTOMREQUEST, request.method) }
        }
    }

    static func curlAuth(_ method: AuthenticationMethod?) -> Int {
        switch method {
        case .httpBasic?: return Int(porter_curlauth_basic)
        case .httpDigest?: return Int(porter_curlauth_digest)
        case .ntlm?: return Int(porter_curlauth_ntlm)
        case .negotiate?: return Int(porter_curlauth_negotiate)
        default: return Int(porter_curlauth_any)
        }
    }

    // MARK: - callbacks (loop thread)

    private func header(_ raw: UnsafeRawBufferPointer) -> Bool {
        guard !isStopped else { return false }
        // The bytes are parsed by ResponseHeadParser; the fields move into it and back
        // (swap: no copy, so appending stays in place).
        var parser = ResponseHeadParser(status: head.status, version: head.version, statusLine: head.line)
        swap(&parser.fields, &head.fields)
        let kind = parser.feed(line: raw)
        swap(&parser.fields, &head.fields)
        head.status = parser.status
        swap(&parser.version, &head.version)
        swap(&parser.statusLine, &head.line)
        if kind == .end, parser.isFinal { endOfHead() }
        return true
    }

    private func makeResponse() -> Response {
        // The effective URL is the request's unless libcurl moved (it follows no redirect
        // itself, so almost never): parse it only then.
        let effective = transfer?.info(string: CURLINFO_EFFECTIVE_URL)
        let url = effective.flatMap { $0 == request.url.absoluteString ? nil : URL(string: $0) } ?? request.url
        let contentType = head.fields.combined(.contentType).flatMap { MIMEType(parsing: $0) }
        let length = head.fields.combined(.contentLength).flatMap { Int64($0) } ?? -1  // values arrive trimmed
        var r = Response(url: url, mimeType: contentType?.essence, expectedContentLength: length,
                         textEncodingName: contentType?.parameter("charset"), statusCode: head.status,
                         headerFields: head.fields)
        r.validator = head.fields.combined(.eTag) ?? head.fields.combined(.lastModified)
        r.statusLine = head.line.isEmpty ? nil : head.line
        if head.status == 206, let range = head.fields.combined(.contentRange), let start = HTTPHandler.rangeStart(range) {
            r.resumeOffset = start
        }
        return r
    }

    /// "bytes 100-199/200" → 100.
    static func rangeStart(_ value: String) -> Int64? {
        guard value.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = value.dropFirst(6)
        guard let dash = spec.firstIndex(of: "-") else { return nil }
        return Int64(spec[..<dash].trimmingCharacters(in: .whitespaces))
    }

    private func endOfHead() {
        // The TLS session is only at hand while the transfer runs.
        if tlsFacts == nil, request.url.scheme?.lowercased() == "https" { tlsFacts = transfer?.tlsInfo() }
        let response = makeResponse()
        let status = head.status
        decoder = ContentDecoder(contentEncoding: head.fields.combined(.contentEncoding),
                                 maximumRatio: client.context.configuration.maximumDecodingRatio)
        decodeError = nil
        if [301, 302, 303, 307, 308].contains(status), head.fields.combined(.location) != nil,
           request.property(forKey: HTTPHandler.deliversRedirectsProperty) as? Bool != true {
            mode = .redirect(response)
            return
        }
        let challengeHeader: HTTPField.Name = status == 407 ? .proxyAuthenticate : .wwwAuthenticate
        if status == 401 || status == 407, head.fields[challengeHeader] != nil {
            mode = .challenge(response, Data())
            return
        }
        if status == 416, request.resumeRange != nil {
            mode = .restart
            return
        }
        if status == 304, revalidating, let cached {
            mode = .notModified(HTTPCacheRules.freshened(cached.response, with: response))
            return
        }
        mode = .body
        // The decoded length is unknown when libcurl decodes a content coding.
        stager.reset(expectedLength: decoder == nil ? response.expectedContentLength : -1)
        // Only a session with a cache pays for the RFC 9111 decision (this runs per response).
        // A response over a connection the delegate trusted by hand (a server-trust
        // challenge) is never stored: no later load could say it trusts that server too.
        let cacheable = client.context.configuration.responseCache != nil && trustedKeyPin == nil
            && HTTPCacheRules.isStorable(request: request, response: response) ? CacheStoragePolicy.allowed : .notAllowed
        client.didReceive(response, cacheStoragePolicy: cacheable)
    }

    private func data(_ bytes: UnsafeRawBufferPointer) -> CurlTransfer.WriteResult {
        if isStopped { return .abort }
        switch mode {
        case .body:
            if state.wantsPause {
                stager.handOver()
                return .pause
            }
            if !state.admit(bytes.count, on: loop) {
                stager.handOver()
                return .pause
            }
            guard let transfer else { break }
            guard let decoder else {
                stager.stage(bytes, transfer: transfer)
                break
            }
            do {
                try decoder.decode(bytes) { stager.stage($0, transfer: transfer) }
            } catch {
                decodeError = decodingFailure(error)
                return .abort
            }
        case .waiting:
            // Body bytes with no header block (HTTP/0.9 or a broken server).
            return .abort
        case .redirect, .restart, .notModified:
            break  // the redirect's (or the 416's, or the 304's) own body is not wanted
        case .challenge(let r, var kept):
            func keep(_ b: UnsafeRawBufferPointer) {
                if kept.count < 64 * 1024 { kept.append(contentsOf: b.prefix(64 * 1024 - kept.count)) }
            }
            if let decoder { try? decoder.decode(bytes, keep) } else { keep(bytes) }
            mode = .challenge(r, kept)
        }
        return .consumed
    }

    private func complete(_ code: CURLcode) {
        guard !isStopped, let t = transfer else { stager.drop(); return }
        stager.handOver()
        state.closeUpload()
        reportMetrics(t)
        if code == CURLE_PEER_FAILED_VERIFICATION, !trustAsked, request.url.scheme?.lowercased() == "https" {
            trustAsked = true
            askServerTrust(failure: .curl(code, url: request.url, detail: t.errorText))
            return
        }
        if code != CURLE_OK {
            if code == CURLE_WRITE_ERROR, let decodeError {
                client.didFail(with: decodeError)
            } else if case .waiting = mode, code == CURLE_WRITE_ERROR {
                client.didFail(with: PorterError(.badServerResponse, "the server sent a body without a response head",
                                                 url: request.url))
            } else if case .waiting = mode, code == CURLE_OUT_OF_MEMORY {
                // libcurl's word for a response field over its 100 KiB limit: the server's
                // fault, not this machine's memory (300 KiB in all is CURLE_RECV_ERROR,
                // mapped in PorterError.curl).
                client.didFail(with: PorterError(.badServerResponse, "the server's response head is too large",
                                                 url: request.url, cause: PorterError.curl(code, url: request.url, detail: t.errorText).cause))
            } else {
                client.didFail(with: .curl(code, url: request.url, detail: t.errorText))
            }
            return
        }
        switch mode {
        case .waiting:
            client.didFail(with: PorterError(.badServerResponse, "no response from the server", url: request.url))
        case .body:
            if let decoder, decoder.consumed > 0, !decoder.isFinished {
                client.didFail(with: PorterError(.cannotDecodeContentData,
                    "the \(head.fields.combined(.contentEncoding) ?? "encoded") body ends before its compressed stream does", url: request.url))
                return
            }
            client.didFinishLoading()
        case .redirect(let response):
            redirect(response, target: t.info(string: CURLINFO_REDIRECT_URL))
        case .challenge(let response, let kept):
            challenge(response, body: kept)
        case .restart:
            request.resumeRange = nil
            transfer = nil
            begin()
        case .notModified(let response):
            client.cachedResponseIsValid(serving: response, revalidated: true)
        }
    }

    private func reportMetrics(_ t: CurlTransfer) {
        var m = TransactionMetrics(request: request, fetchType: "networkLoad")
        func at(_ info: CURLINFO) -> Date? {
            let us = t.info(offset: info)
            return us > 0 ? started.addingTimeInterval(Double(us) / 1e6) : nil
        }
        m.fetchStartDate = started
        // libcurl's own timings (all from the transfer's start). A reused connection made
        // no lookup and no connection: those dates stay nil, as in URLSession.
        m.isReusedConnection = t.info(CURLINFO_NUM_CONNECTS) == 0
        if !m.isReusedConnection {
            m.domainLookupStartDate = started
            m.domainLookupEndDate = at(CURLINFO_NAMELOOKUP_TIME_T) ?? started
            m.connectStartDate = m.domainLookupEndDate
            m.connectEndDate = at(CURLINFO_APPCONNECT_TIME_T) ?? at(CURLINFO_CONNECT_TIME_T)
            m.secureConnectionStartDate = request.url.scheme?.lowercased() == "https" ? at(CURLINFO_CONNECT_TIME_T) : nil
        }
        m.remoteAddress = t.info(string: CURLINFO_PRIMARY_IP).flatMap { $0.isEmpty ? nil : $0 }
        m.remotePort = m.remoteAddress == nil ? nil : t.info(CURLINFO_PRIMARY_PORT)
        m.localAddress = t.info(string: CURLINFO_LOCAL_IP).flatMap { $0.isEmpty ? nil : $0 }
        m.localPort = m.localAddress == nil ? nil : t.info(CURLINFO_LOCAL_PORT)
        // Read while the head arrived (endOfHead); plain http asks nothing per request.
        if let tls = tlsFacts {
            m.negotiatedTLSProtocolVersion = tls.version
            m.negotiatedTLSCipherSuite = tls.cipher
        }
        m.requestStartDate = at(CURLINFO_PRETRANSFER_TIME_T)
        m.responseStartDate = at(CURLINFO_STARTTRANSFER_TIME_T)
        m.responseEndDate = at(CURLINFO_TOTAL_TIME_T)
        switch t.info(CURLINFO_HTTP_VERSION) {
        case Int(CURL_HTTP_VERSION_2_0): m.networkProtocolName = "h2"
        case Int(CURL_HTTP_VERSION_1_0): m.networkProtocolName = "http/1.0"
        case Int(CURL_HTTP_VERSION_1_1): m.networkProtocolName = "http/1.1"
        default: break
        }
        m.countOfResponseBodyBytesReceived = t.info(offset: CURLINFO_SIZE_DOWNLOAD_T)
        m.countOfRequestBodyBytesSent = t.info(offset: CURLINFO_SIZE_UPLOAD_T)
        client.didCollect(m)
    }

    private func decodingFailure(_ error: ContentDecoder.Failure) -> PorterError {
        switch error {
        case .damaged:
            return PorterError(.cannotDecodeContentData, "the \(head.fields.combined(.contentEncoding) ?? "encoded") body is damaged",
                               url: request.url)
        case .ratio(let limit):
            return PorterError(.dataLengthExceedsMaximum,
                               "the body decodes to more than \(limit) times its size (maximumDecodingRatio)", url: request.url)
        }
    }

    // MARK: - redirects

    private func redirect(_ response: Response, target: String?) {
        guard let target, let url = URL(string: target) else {
            // A Location libcurl cannot resolve: the 3xx is the answer.
            client.didReceive(response, cacheStoragePolicy: .notAllowed)
            client.didFinishLoading()
            return
        }
        var next = request
        next.url = url
        let method = request.method.uppercased()
        let status = response.statusCode ?? 0
        if (status == 303 && method != "HEAD") || ((status == 301 || status == 302) && method == "POST") {
            next.method = "GET"
            next.body = nil
            next.headerFields[.contentType] = nil
            next.headerFields[.contentLength] = nil
            next.headerFields[.transferEncoding] = nil
        }
        client.wasRedirected(to: next, redirectResponse: response)
    }

    // MARK: - authentication

    private func challenge(_ response: Response, body kept: Data) {
        let isProxy = response.statusCode == 407
        let header = response.headerFields[isProxy ? .proxyAuthenticate : .wwwAuthenticate] ?? ""
        let (method, realm) = HTTPHandler.parseChallenge(header)
        let url = request.url
        let target = isProxy ? (client.context.configuration.proxies.proxy(for: url) ?? url) : url
        let space = ProtectionSpace(host: target.host ?? "", port: target.port ?? (target.scheme == "https" ? 443 : 80),
                                    protocol: target.scheme?.lowercased() ?? "http", realm: realm,
                                    authenticationMethod: method, isProxy: isProxy)
        var proposed: Credential?
        let proxyURL = isProxy ? client.context.configuration.proxies.proxy(for: url) : nil
        if isProxy, proxyCredential == nil, let user = proxyURL?.user, let password = proxyURL?.password {
            proposed = Credential(user: user.removingPercentEncoding ?? user, password: password.removingPercentEncoding ?? password)
        } else if !isProxy, credential == nil, let user = url.user, let password = url.password {
            proposed = Credential(user: user.removingPercentEncoding ?? user, password: password.removingPercentEncoding ?? password)
        }
        let challenge = AuthenticationChallenge(protectionSpace: space, proposedCredential: proposed,
                                                previousFailureCount: failures, failureResponse: response) { [self] disposition in
            loop.enqueue { [self] in answer(disposition, method: method, response: response, body: kept) }
        }
        client.didReceive(challenge)
    }

    private func answer(_ disposition: ChallengeDisposition, method: AuthenticationMethod, response: Response, body kept: Data) {
        guard !isStopped else { return }
        switch disposition {
        case .useCredential(let c) where c.user != nil:
            if response.statusCode == 407 {
                proxyCredential = c
                proxyAuthMethod = method
            } else {
                credential = c
                authMethod = method
            }
            failures += 1
            if case .stream = request.body {
                client.needNewBodyStream { [self] stream in
                    loop.enqueue { [self] in
                        guard let stream else {
                            client.didFail(with: PorterError(.requestBodyStreamExhausted,
                                "authentication needs the body again and no new stream was given", url: request.url))
                            return
                        }
                        retry(with: .stream(stream))
                    }
                }
            } else {
                retry(with: request.body)
            }
        case .cancelAuthenticationChallenge:
            break  // the session ends the task and stops this handler
        default:
            // Default handling, a rejected space or an unusable credential: the 401/407 is the answer.
            client.didReceive(response, cacheStoragePolicy: .notAllowed)
            if !kept.isEmpty { client.didLoad(kept) }
            client.didFinishLoading()
        }
    }

    private func retry(with body: RequestBody?) {
        request.body = body
        transfer = nil
        begin()
    }

    // MARK: - server trust

    /// The default check refused the server: fetch its chain (a connect-only handshake
    /// without verification) and let the delegate decide. Trusting it pins its key.
    private func askServerTrust(failure: PorterError) {
        guard let probe = CurlTransfer.make(on: loop, reportingTo: client, url: request.url) else { return }
        transfer = probe
        let url = request.url
        let config = client.context.configuration
        probe.set(CURLOPT_URL, url.absoluteString)
        // The same proxy, address overrides and client certificate as the load; only
        // verification is off, to fetch the chain the delegate is shown.
        CurlOptions.apply(to: probe, request: request, configuration: config, protocols: "https", verify: false)
        probe.set(CURLOPT_CONNECT_ONLY, 1)
        probe.set(CURLOPT_CERTINFO, 1)
        probe.onComplete = { [self] code in
            guard !isStopped else { return }
            let chain = code == CURLE_OK ? probe.certificateChain() : []
            transfer = nil
            guard !chain.isEmpty else {
                client.didFail(with: failure)
                return
            }
            let trust = ServerTrust(certificateChain: chain, evaluationFailure: failure.cause?.message ?? failure.message)
            let space = ProtectionSpace(host: url.host ?? "", port: url.port ?? 443, protocol: "https", realm: nil,
                                        authenticationMethod: .serverTrust, serverTrust: trust)
            let challenge = AuthenticationChallenge(protectionSpace: space, proposedCredential: nil, previousFailureCount: 0,
                                                    error: failure) { [self] disposition in
                loop.enqueue { [self] in
                    guard !isStopped else { return }
                    switch disposition {
                    case .useCredential(let c):
                        guard case .trust(let accepted) = c.kind, let leaf = accepted.certificateChain.first,
                              let pin = HTTPHandler.publicKeyPin(ofDER: leaf) else {
                            client.didFail(with: failure)
                            return
                        }
                        trustedKeyPin = pin
                        begin()
                    case .cancelAuthenticationChallenge:
                        break  // the session ends the task
                    default:
                        client.didFail(with: failure)
                    }
                }
            }
            client.didReceive(challenge)
        }
        probe.start()
    }

    /// "sha256//BASE64" of a DER certificate's public key, as CURLOPT_PINNEDPUBLICKEY takes it.
    static func publicKeyPin(ofDER der: Data) -> String? {
        var digest = [UInt8](repeating: 0, count: 32)
        let ok = der.withUnsafeBytes { raw -> Bool in
            guard let base = raw.bindMemory(to: UInt8.self).baseAddress else { return false }
            return porter_spki_sha256(base, raw.count, &digest) == 0
        }
        return ok ? "sha256//" + Data(digest).base64EncodedString() : nil
    }

    /// "Digest realm="x", nonce=..." → (.httpDigest, "x").
    static func parseChallenge(_ header: String) -> (AuthenticationMethod, String?) {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        let scheme = trimmed.prefix { $0 != " " }.lowercased()
        let method: AuthenticationMethod
        switch scheme {
        case "basic": method = .httpBasic
        case "digest": method = .httpDigest
        case "ntlm": method = .ntlm
        case "negotiate": method = .negotiate
        default: method = .custom(scheme)
        }
        var realm: String?
        if let r = trimmed.range(of: "realm=", options: .caseInsensitive) {
            var rest = trimmed[r.upperBound...]
            if rest.hasPrefix("\"") {
                rest = rest.dropFirst()
                realm = String(rest.prefix { $0 != "\"" })
            } else {
                realm = String(rest.prefix { $0 != "," && $0 != " " })
            }
        }
        return (method, realm)
    }
}

