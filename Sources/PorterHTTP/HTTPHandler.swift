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
///   for the strongest scheme offered (Negotiate, NTLM, Digest, Basic; a rejected space
///   brings the next); a credential retries the request with it, Negotiate's default
///   handling uses the user's Kerberos tickets, and otherwise default handling
///   delivers the 401/407 as the response.
/// - TLS is verified against the system CAs or `caCertificateFile`; `expectedContentLength`
///   is the Content-Length as sent (the *encoded* length when libcurl decodes gzip,
///   deflate or br for you), -1 when absent.
/// - Back-pressure pauses libcurl (`CURL_WRITEFUNC_PAUSE`) until resumed.
public final class HTTPHandler: ProtocolHandler, @unchecked Sendable {
    public static var schemes: Set<String> { ["http", "https"] }
    /// What the registry answers for http and https (curl's `defport`).
    public static func defaultPort(for scheme: String) -> Int? {
        switch scheme { case "http": 80; case "https": 443; default: nil }
    }
    /// HTTP is the protocol of cookies (RFC 6265): every hop sends and stores them.
    /// (Asked twice per load: compared directly, not through a `Set` built per call.)
    public static func carriesCookies(for scheme: String) -> Bool { scheme == "http" || scheme == "https" }
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
    var request: Request  // loop thread after init
    let client: any ProtocolClient
    let loop: CurlLoop
    let stager: BodyStager
    let state = CurlLoadState()
    static let receiveBufferSize = 256 * 1024
    static let stagingBufferSize = BodyStager.bufferSize

    // Loop thread only:
    var transfer: CurlTransfer? {  // loop thread; kept in `state` so stopLoading can end it
        get { state.transfer }
        set { state.transfer = newValue }
    }
    /// The head being parsed, moved into and out of the parser per line (`header`):
    /// loop-thread only and never reached from inside those moves, so it skips the
    /// runtime's exclusivity check (ten per load).
    @exclusivity(unchecked) var head = Head()
    var mode = Mode.waiting
    var credential: Credential?
    var authMethod: AuthenticationMethod?
    var proxyCredential: Credential?
    var proxyAuthMethod: AuthenticationMethod?
    var trustedKeyPin: String?
    /// `trustedKeyPin` came from `TrustedServers` (an earlier load's decision), not from
    /// this load's own challenge: a server showing another key is checked afresh.
    var pinFromEarlierDecision = false
    var skipStoredPin = false
    var trustAsked = false
    /// Refused credentials per scheme ("server-basic", "proxy-ntlm"): the challenge's
    /// previousFailureCount.
    var failures: [String: Int] = [:]
    /// Schemes not to offer again in this load (rejected by the delegate, or a failed Negotiate).
    var closedSchemes: Set<String> = []
    /// Decodes the current response's body (gzip, deflate, br, zstd); nil: delivered as it came.
    var decoder: ContentDecoder?
    /// Why the write callback aborted the transfer (a damaged coding, a decoding bomb, the
    /// caller's `BodyDestination` refusing a write): the load fails with it.
    var decodeError: PorterError?
    /// A response brought an Alt-Svc field for the session's cache (libcurl writes the file
    /// when the handle closes).
    var altSvcLearned = false
    var tlsFacts: (version: String, cipher: String)?
    var started = Date()

    enum Mode {
        case waiting
        case body
        case redirect(Response)
        case challenge(Response, Data)
        /// A 416 to a resume request: load again from the start.
        case restart
        /// A 304 to our conditional request: the cached response is still good.
        case notModified(Response)
    }

    struct Head {
        var status = 0
        var fields = HTTPFields()
        var version = ""
        var line = ""
    }

    /// The cache's stored response for this request (GET / HEAD), if any.
    let cached: CachedResponse?
    /// Set when this load asks the server whether `cached` is still good.
    var revalidating = false
    /// Set when this load asks for the rest of `cached`, a stored part (RFC 9111 §3.4).
    var completing: CachedResponse?
    /// The fields the cache added (validators, Range / If-Range): a redirect's request
    /// goes without them, as the client made it.
    var cacheFields: [String] = []

    public init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.cached = cachedResponse
        self.client = client
        // The task runs on the loop executor(for:context:) named; the same one by its settings.
        self.loop = (client.context.executor as? CurlLoop) ?? CurlLoop.loop(for: client.context.configuration)
        self.stager = BodyStager(client: client, loop: loop)
    }

    var isStopped: Bool { state.isStopped }

    /// A fresh stored response answers as it is (`HTTPCacheRules.answer` says `.stored`)
    /// unless the request is one HSTS upgrades: what `startLoading` would serve, asked
    /// before any handler is made.
    public static func freshAnswer(for request: Request, cached: CachedResponse, configuration: SessionConfiguration) -> Response? {
        guard case .cache(.stored(let served)) = firstStep(for: request, cached: cached, configuration: configuration) else {
            return nil
        }
        return served
    }

    /// What a load does before anything else, decided once for `startLoading` and for
    /// `freshAnswer`: RFC 6797 §8.3 — a known HSTS host is never loaded over plain http,
    /// not even from the cache, so the load becomes https first; else RFC 9111 §4 — what
    /// is stored answers, or says what to ask the server (`HTTPCacheRules.answer`).
    enum FirstStep {
        case upgrade(URL)
        case cache(HTTPCacheRules.Answer)
    }

    static func firstStep(for request: Request, cached: CachedResponse?, configuration: SessionConfiguration) -> FirstStep {
        if let upgraded = configuration.hstsStore?.upgradedURL(for: request.url) { return .upgrade(upgraded) }
        let policy = request.cachePolicy == .useProtocolCachePolicy ? configuration.requestCachePolicy : request.cachePolicy
        return .cache(HTTPCacheRules.answer(for: request, cached: cached, policy: policy, now: Date()))
    }

    public func startLoading() {
        // `firstStep` decides (HSTS, then the cache); this carries it out.
        let answer: HTTPCacheRules.Answer
        switch Self.firstStep(for: request, cached: cached, configuration: client.context.configuration) {
        case .upgrade(let upgraded):
            upgradeForHSTS(to: upgraded)
            return
        case .cache(let a):
            answer = a
        }
        switch answer {
        case .stored(let served):
            client.cachedResponseIsValid(serving: served, revalidated: false)
        case .made(let response, let body):
            client.didReceive(response, cacheStoragePolicy: .notAllowed)
            if !body.isEmpty, request.method.uppercased() != "HEAD" { client.didLoad(body) }
            client.didFinishLoading()
        case .storedWhileRevalidating(let served):
            client.cachedResponseIsValid(serving: served, revalidated: false)
            if let cached { BackgroundRevalidation.start(request: request, cached: cached, context: client.context) }
        case .gatewayTimeout(let response):
            client.didReceive(response, cacheStoragePolicy: .notAllowed)
            client.didFinishLoading()
        case .network(let fields, let revalidating, let completing):
            for (name, value) in fields { _ = request.setValue(value, forHeader: name) }
            cacheFields = fields.map(\.0)
            self.revalidating = revalidating
            self.completing = completing ? cached : nil
            loop.enqueue { [self] in begin() }
        }
    }

    /// The HSTS upgrade, as browsers report it: a "307 Internal Redirect" made up here,
    /// without the network (`Response.isInternalRedirect`; its metrics' fetch type is
    /// "local"), that the session follows to the https URL with the request's method,
    /// body and fields.
    func upgradeForHSTS(to upgraded: URL) {
        var fields = HTTPFields()
        fields[.location] = upgraded.absoluteString
        fields[HTTPField.Name("Non-Authoritative-Reason")!] = "HSTS"
        fields[.contentLength] = "0"
        var r = Response(url: request.url, mimeType: nil, expectedContentLength: 0, statusCode: 307, headerFields: fields)
        r.statusLine = "HTTP/1.1 307 Internal Redirect"
        r.isInternalRedirect = true
        var next = request
        next.url = upgraded
        var m = TransactionMetrics(request: request, fetchType: "local")
        m.response = r
        let now = Date()
        (m.fetchStartDate, m.responseEndDate) = (now, now)
        client.didCollect(m)
        client.wasRedirected(to: next, redirectResponse: r)
    }

    /// RFC 6797 §8.1, as `SessionConfiguration.noteStrictTransportSecurity` applies it
    /// (a server the delegate trusted by hand, trustedKeyPin, teaches nothing).
    func noteStrictTransportSecurity() {
        let config = client.context.configuration
        // Nothing to learn (no store, or not https): the field is not even looked up.
        guard config.hstsStore != nil, request.scheme == "https" else { return }
        config.noteStrictTransportSecurity(head.fields[values: .strictTransportSecurity], from: request.url,
                                           trustedByHand: trustedKeyPin != nil)
    }

    public func stopLoading() { state.stopLoading(on: loop, stager: stager) }
    public func pauseDelivery() { state.setPaused(true) }
    public func resumeDelivery() { state.resumeDelivery(on: loop) }

    // MARK: - set-up (loop thread)

    func begin() {
        guard !isStopped else { return }
        let config = client.context.configuration
        guard let t = CurlTransfer.make(on: loop, reportingTo: client, url: request.url) else { return }
        transfer = t
        head = Head()
        mode = .waiting
        started = Date()

        t.set(CURLOPT_URL, request.url.absoluteString)
        t.set(CURLOPT_FOLLOWLOCATION, 0)
        // Porter decodes gzip, deflate, br and zstd itself (ContentDecoder): libcurl passes the
        // bytes as they came, so a paused transfer holds compressed bytes only.
        t.set(CURLOPT_HTTP_CONTENT_DECODING, 0)
        t.set(CURLOPT_BUFFERSIZE, HTTPHandler.receiveBufferSize)
        t.set(CURLOPT_HTTP_VERSION, config.http2Enabled ? Int(CURL_HTTP_VERSION_2TLS) : Int(CURL_HTTP_VERSION_1_1))
        // Requests that start together wait for the first connection to say whether it
        // multiplexes (HTTP/2) instead of each opening a connection of its own.
        if config.http2Enabled { t.set(CURLOPT_PIPEWAIT, 1) }
        if trustedKeyPin == nil, !trustAsked, !skipStoredPin, let key = TrustedServers.Key(request.url, session: client.context.sessionIdentifier),
           let pin = TrustedServers.pin(for: key) {
            trustedKeyPin = pin
            pinFromEarlierDecision = true
        }
        CurlOptions.apply(to: t, request: request, configuration: config, protocols: "http,https", pinnedKey: trustedKeyPin)
        CurlOptions.applyAltSvc(to: t, configuration: config)

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
        let plan = RequestHead.plan(for: request, bodyLength: bodyLength, userAgent: HTTPHandler.defaultUserAgent,
                                    decodes: config.decodesContentEncoding)
        if let agent = plan.userAgent { t.set(CURLOPT_USERAGENT, agent) }
        if !plan.lines.isEmpty { t.set(CURLOPT_HTTPHEADER, list: plan.lines) }

        // Each closure holds the handler strongly, as onComplete always did: the transfer
        // drops them all when it ends (finish or cancel), so the cycle lasts as long as
        // the transfer. A closure of one strong reference needs no box (an unowned one
        // did: an allocation per closure per load) and no unowned-to-strong retain on
        // each call (every header line and body chunk).
        t.onHeader = { [self] line in header(line) }
        t.onData = { [self] bytes in data(bytes) }
        // Only a load that sends a body reads one and reports its progress.
        if state.body != nil {
            t.onRead = { [state] buffer in state.read(buffer) }
            t.onProgress = { [state, client] _, _, ulTotal, ulNow in state.progress(uploadTotal: ulTotal, uploaded: ulNow, client: client) }
        }
        t.onComplete = { [self] code in complete(code) }
        t.onFlush = { [self] in stager.handOver() }
        t.start()
    }

    func configureMethodAndBody(_ t: CurlTransfer) {
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

    func header(_ raw: UnsafeRawBufferPointer) -> Bool {
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

    func makeResponse() -> Response {
        // The effective URL is the request's unless libcurl moved (it follows no redirect
        // itself, so almost never): parse it only then.
        let effective = transfer?.info(string: CURLINFO_EFFECTIVE_URL)
        let url = effective.flatMap { $0 == request.url.absoluteString ? nil : URL(string: $0) } ?? request.url
        let typeField = head.fields.combined(.contentType)
        // A bare "type/subtype" (most responses) is its own essence, with no charset.
        let bare = typeField.flatMap(MIMEType.bareEssence)
        let contentType = bare == nil ? typeField.flatMap { MIMEType(parsing: $0) } : nil
        let length = head.fields.combined(.contentLength).flatMap { Int64($0) } ?? -1  // values arrive trimmed
        var r = Response(url: url, mimeType: bare ?? contentType?.essence, expectedContentLength: length,
                         textEncodingName: contentType?.parameter("charset"), statusCode: head.status,
                         headerFields: head.fields)
        r.validator = head.fields.combined(.eTag) ?? head.fields.combined(.lastModified)
        r.statusLine = head.line.isEmpty ? nil : head.line
        if head.status == 206, let range = head.fields.combined(.contentRange), let start = HTTPHandler.rangeStart(range) {
            r.resumeOffset = start
        }
        return r
    }

    /// 301, 302, 303, 307 and 308: the statuses a Location makes a redirect.
    static func isRedirectStatus(_ status: Int) -> Bool {
        switch status {
        case 301, 302, 303, 307, 308: true
        default: false
        }
    }

    /// "bytes 100-199/200" → 100.
    static func rangeStart(_ value: String) -> Int64? {
        guard value.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = value.dropFirst(6)
        guard let dash = spec.firstIndex(of: "-") else { return nil }
        return Int64(spec[..<dash].trimmingCharacters(in: .whitespaces))
    }

    func endOfHead() {
        // The TLS session is only at hand while the transfer runs.
        if tlsFacts == nil, request.scheme == "https" { tlsFacts = transfer?.tlsInfo() }
        let response = makeResponse()
        let status = head.status
        noteStrictTransportSecurity()
        if client.context.configuration.altSvcCache != nil, head.fields[HTTPField.Name("Alt-Svc")!] != nil, let transfer {
            CurlOptions.altSvcFieldArrived(transfer, configuration: client.context.configuration)
            altSvcLearned = true
        }
        decoder = client.context.configuration.decodesContentEncoding
            ? ContentDecoder(contentEncoding: head.fields.combined(.contentEncoding),
                             maximumRatio: client.context.configuration.maximumDecodingRatio)
            : nil
        decodeError = nil
        if HTTPHandler.isRedirectStatus(status), head.fields.combined(.location) != nil,
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
        // The rest of a stored part: the 206 that continues it is delivered as the whole
        // (its head as a 200, the stored bytes first); one that does not is refused, since
        // the client asked for all of it (a 200 is the whole and goes as it is).
        var delivered = response
        var prefix: Data?
        if let stored = completing, status == 206 {
            guard let whole = HTTPCacheRules.completed(stored, by: response) else {
                client.context.configuration.responseCache?.removeCachedResponse(for: Request(url: request.url))
                decodeError = PorterError(.badServerResponse, "the server's 206 does not continue the stored part of the response",
                                          url: request.url)
                mode = .waiting
                return
            }
            delivered = whole
            prefix = stored.data
        }
        mode = .body
        // Only a session with a cache pays for the RFC 9111 decision (this runs per response).
        // A response over a connection the delegate trusted by hand (a server-trust
        // challenge) is never stored: no later load could say it trusts that server too.
        let cacheable = client.context.configuration.responseCache != nil && trustedKeyPin == nil
            && HTTPCacheRules.isStorable(request: request, response: delivered) ? CacheStoragePolicy.allowed : .notAllowed
        // The caller's BodyDestination takes the body straight from libcurl's buffer, unless
        // the cache needs it or a stored prefix goes to the client first (order).
        let destination = cacheable == .notAllowed && prefix == nil
            ? request.property(forKey: BodyDestination.property) as? BodyDestination : nil
        // The decoded length is unknown when libcurl decodes a content coding.
        stager.reset(expectedLength: decoder == nil ? response.expectedContentLength : -1, destination: destination)
        client.didReceive(delivered, cacheStoragePolicy: cacheable)
        if let prefix, !prefix.isEmpty { client.didLoad(prefix) }
    }

    func data(_ bytes: UnsafeRawBufferPointer) -> CurlTransfer.WriteResult {
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
                if !stager.stage(bytes, transfer: transfer) { return failWriting() }
                break
            }
            do {
                let spent = try decoder.decode(bytes, { _ = stager.stage($0, transfer: transfer) }) == .budgetSpent
                if stager.writeError != nil { return failWriting() }
                if spent {
                    // A chunk that decodes to more than the budget (brotli and zstd have no
                    // worst ratio): hand over what is decoded, pause, and let the loop turn
                    // (the consumer's back-pressure gets its say) before going on with the
                    // same chunk, which libcurl delivers again.
                    stager.handOver()
                    loop.enqueue { [self] in
                        guard !isStopped, !state.wantsPause else { return }
                        self.transfer?.resume()
                    }
                    return .pause
                }
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
            // The kept body is at most 64 KiB: once it is full, nothing more is decoded.
            if let decoder {
                if kept.count < 64 * 1024 { _ = try? decoder.decode(bytes, budget: 64 * 1024 - kept.count, keep) }
            } else {
                keep(bytes)
            }
            mode = .challenge(r, kept)
        }
        return .consumed
    }

    /// Writing the body to the caller's `BodyDestination` failed: the load fails with it.
    private func failWriting() -> CurlTransfer.WriteResult {
        var failure = stager.writeError ?? PorterError(.cannotWriteToFile, "cannot write the body")
        failure.url = request.url
        decodeError = failure
        return .abort
    }

    func complete(_ code: CURLcode) {
        guard !isStopped, let t = transfer else { stager.drop(); return }
        stager.handOver()
        state.closeUpload()
        reportMetrics(t)
        if code == CURLE_SSL_PINNEDPUBKEYNOTMATCH, pinFromEarlierDecision, let pin = trustedKeyPin {
            // The server shows another key than the one trusted earlier (a new connection):
            // forget that decision and load verified again; a failure asks the delegate.
            if let key = TrustedServers.Key(request.url, session: client.context.sessionIdentifier) { TrustedServers.forget(key, pin: pin) }
            trustedKeyPin = nil
            pinFromEarlierDecision = false
            trustAsked = false
            transfer = nil
            skipStoredPin = true   // this load decides afresh: no pin from the table again
            begin()
            return
        }
        if code == CURLE_PEER_FAILED_VERIFICATION, !trustAsked, request.scheme == "https" {
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
        if altSvcLearned {
            // libcurl writes the alt-svc cache file when the handle closes: let it close
            // (the loop drops its last reference once this returns), then report the end,
            // so the next load, or the next process, finds the alternative.
            altSvcLearned = false
            let target = t.info(string: CURLINFO_REDIRECT_URL)
            transfer = nil
            loop.enqueue { [self] in
                guard !isStopped else { return }
                finishLoad(redirectTarget: target)
            }
            return
        }
        finishLoad(redirectTarget: t.info(string: CURLINFO_REDIRECT_URL))
    }

    /// The transfer ended well: the response's end, a redirect, a challenge, or another try.
    func finishLoad(redirectTarget: String?) {
        switch mode {
        case .waiting:
            client.didFail(with: decodeError ?? PorterError(.badServerResponse, "no response from the server", url: request.url))
        case .body:
            if let decoder, decoder.consumed > 0, !decoder.isFinished {
                client.didFail(with: PorterError(.cannotDecodeContentData,
                    "the \(decoder.coding) body ends before its compressed stream does", url: request.url))
                return
            }
            client.didFinishLoading()
        case .redirect(let response):
            redirect(response, target: redirectTarget)
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

    func reportMetrics(_ t: CurlTransfer) {
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
            m.secureConnectionStartDate = request.scheme == "https" ? at(CURLINFO_CONNECT_TIME_T) : nil
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

    func decodingFailure(_ error: ContentDecoder.Failure) -> PorterError {
        switch error {
        case .damaged:
            return PorterError(.cannotDecodeContentData, "the \(head.fields.combined(.contentEncoding) ?? "encoded") body is damaged",
                               url: request.url)
        case .ratio(let limit):
            return PorterError(.dataLengthExceedsMaximum,
                               "the body decodes to more than \(limit) times its size (maximumDecodingRatio)", url: request.url)
        }
    }
}
