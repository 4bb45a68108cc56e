import Foundation
import PorterCore
import PorterSession
import PorterEngine
import HTTPTypes

/// One attempt of the opening handshake, and what carries over between attempts
/// (redirects followed, the credential a challenge gave).
struct WebSocketOpening {
    var key = ""
    var head: [UInt8] = []
    var redirects = 0
    /// What the next request answers a challenge with (WebSocketTask+Authentication).
    var answer: HandshakeAnswer?
    /// Credentials used per scheme (a challenge's previousFailureCount).
    var failures: [AuthenticationMethod: Int] = [:]
    /// Schemes rejected by the delegate, or that cannot succeed (Negotiate without tickets).
    var closedSchemes: Set<AuthenticationMethod> = []
    /// A stale Digest nonce was answered again without asking.
    var staleRetried = false
    var usedCredential: (Credential, ProtectionSpace)?
}

/// The opening handshake (RFC 6455 §4): connect, send the upgrade request, check the
/// answer; follow a redirect or answer an authentication challenge as a data task would.
extension WebSocketTask {
    /// The http(s) form of a ws(s) URL: cookies, credentials and redirect rules are
    /// those of http (RFC 6455 §4.1: ws is http, wss https).
    static func httpForm(_ url: URL) -> URL {
        var c = URLComponents(url: url, resolvingAgainstBaseURL: false)
        switch c?.scheme?.lowercased() {
        case "ws": c?.scheme = "http"
        case "wss": c?.scheme = "https"
        default: break
        }
        return c?.url ?? url
    }

    /// Opens the connection of the current attempt (the machine's `connect`).
    func connect() {
        var asked = lock.withLock { $0.currentRequest }
        // RFC 6797 §8.3 with RFC 6455's "ws is http": a known HSTS host gets no plain
        // connection, so ws:// is taken as wss:// (as Chromium and Firefox do; Fetch applies
        // HSTS to the http URL a WebSocket connects with). Not a redirect: not counted.
        if let store = session?.configuration.hstsStore,
           let upgraded = store.upgradedURL(for: WebSocketTask.httpForm(asked.url)) {
            var c = URLComponents(url: upgraded, resolvingAgainstBaseURL: false)
            c?.scheme = "wss"
            if let secure = c?.url {
                asked.url = secure
                lock.withLock { [asked] in $0.currentRequest = asked }
            }
        }
        let request = asked
        let url = request.url
        if invalidatedAtCreation {
            return finish(PorterError(.sessionInvalidated, "the session was invalidated", url: url), code: nil)
        }
        let secure: Bool
        switch url.scheme?.lowercased() ?? "" {
        case "ws", "http": secure = false
        case "wss", "https": secure = true
        default:
            return finish(PorterError(.unsupportedURL, "a WebSocket URL starts with ws:// or wss://", url: url), code: nil)
        }
        guard let host = url.host, !host.isEmpty, url.fragment == nil else {
            return finish(PorterError(.badURL, "a WebSocket URL needs a host and no fragment (RFC 6455 §3)", url: url), code: nil)
        }
        // The host goes into the Host field: no controls, spaces or separators of a field.
        guard host.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ",") && $0 != UInt8(ascii: "/") }) else {
            return finish(PorterError(.badURL, "the URL's host is not a host name or address", url: url), code: nil)
        }
        // Subprotocols are tokens (RFC 6455 §4.1, RFC 7230 §3.2.6).
        guard protocols.allSatisfy(HTTPSyntax.isToken) else {
            return finish(PorterError(.unsupportedConfiguration, "a subprotocol name must be a token (letters, digits and !#$%&'*+-.^_`|~)", url: url), code: nil)
        }
        guard let session else { return finish(PorterError(.sessionInvalidated, "the session is gone", url: url), code: nil) }
        let port = url.port ?? (secure ? 443 : 80)
        maximumSizes()
        guard let stream = session.openStream(to: ByteStreamTarget(host: host, port: port, secure: secure),
                                              scheme: secure ? "https" : "http") else {
            return finish(PorterError(.unsupportedURL, "no registered handler carries streams (is the http handler registered? Porter.bootstrap())", url: url), code: nil)
        }
        self.stream = stream
        target = (request, host, port, secure)
        let attempt = self.attempt
        stream.open { error in
            self.queue.async {
                if let error { return self.finish(error, code: nil, attempt: attempt) }
                self.handle(.connected(attempt: attempt))
            }
        }
    }

    func maximumSizes() {
        let limit = lock.withLock { $0.maximumMessageSize }
        parser = WebSocketFrameParser(maximumPayload: limit)
        assembler = WebSocketMessageAssembler(maximumMessageSize: limit)
    }

    func sendHandshake(_ request: Request, host: String, port: Int, secure: Bool) {
        guard let stream, let session else { return }
        var nonce = [UInt8](repeating: 0, count: 16)
        var rng = SystemRandomNumberGenerator()
        for i in nonce.indices { nonce[i] = rng.next() }
        handshake.key = Data(nonce).base64EncodedString()
        let url = request.url
        // The path and query as they are encoded in the URL: decoding them would let a
        // %0D%0A in a URL into the request line.
        let parts = URLComponents(url: url, resolvingAgainstBaseURL: false)
        var target = parts?.percentEncodedPath ?? "/"
        if target.isEmpty { target = "/" }
        if let query = parts?.percentEncodedQuery { target += "?" + query }
        guard !target.utf8.contains(where: { $0 <= 0x20 || $0 >= 0x7F }) else {
            return finish(PorterError(.badURL, "the URL's path has characters a request line cannot carry", url: url), code: nil)
        }
        let defaultPort = secure ? 443 : 80
        let hostField = (host.contains(":") ? "[\(host)]" : host) + (port == defaultPort ? "" : ":\(port)")
        var lines = ["GET \(target) HTTP/1.1", "Host: \(hostField)", "Upgrade: websocket", "Connection: Upgrade",
                     "Sec-WebSocket-Key: \(handshake.key)", "Sec-WebSocket-Version: 13"]
        if !protocols.isEmpty { lines.append("Sec-WebSocket-Protocol: " + protocols.joined(separator: ", ")) }
        if let deflate = lock.withLock({ $0.offeredDeflate }) { lines.append("Sec-WebSocket-Extensions: " + deflate.offer) }
        var reserved: Set<String> = ["host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
                                     "sec-websocket-protocol", "sec-websocket-extensions", "content-length", "transfer-encoding"]
        if let authorization = handshake.nextAuthorization(target: target) {
            reserved.insert("authorization")
            lines.append("Authorization: \(authorization)")
        }
        var named = Set<String>()
        for field in request.headerFields where !reserved.contains(field.name.canonicalName) {
            guard !field.value.contains(where: { $0 == "\r" || $0 == "\n" }) else { continue }
            named.insert(field.name.canonicalName)
            lines.append("\(field.name.rawName): \(field.value)")
        }
        for field in session.configuration.additionalHeaders
        where !reserved.contains(field.name.canonicalName) && !named.contains(field.name.canonicalName) {
            guard !field.value.contains(where: { $0 == "\r" || $0 == "\n" }) else { continue }
            lines.append("\(field.name.rawName): \(field.value)")
        }
        if session.configuration.httpShouldSetCookies, !named.contains("cookie"),
           let cookies = session.configuration.cookieStore?.cookieHeader(for: WebSocketTask.httpForm(url), mainDocumentURL: nil) {
            lines.append("Cookie: \(cookies)")
        }
        let text = lines.joined(separator: "\r\n") + "\r\n\r\n"
        let attempt = self.attempt
        stream.write(Data(text.utf8)) { error in
            if let error { self.queue.async { self.finish(error, code: nil, attempt: attempt) } }
        }
        readHead()
    }

    static let headLimit = 16 * 1024

    func readHead() {
        guard let stream else { return }
        let attempt = self.attempt
        stream.read(maxLength: 4096) { result in
            self.queue.async {
                // What a connection given up (or closed at the end) reads is not this task's.
                guard self.stream === stream else { return }
                switch result {
                case .failure(let error): self.finish(error, code: nil, attempt: attempt)
                case .success(let data):
                    if data.isEmpty { return self.handle(.peerClosed) }
                    self.handshake.head.append(contentsOf: data)
                    self.headArrived()
                }
            }
        }
    }

    func headArrived() {
        let request = currentRequest
        let url = request.url
        guard let end = WebSocketTask.endOfHead(handshake.head) else {
            if handshake.head.count > WebSocketTask.headLimit {
                return finish(PorterError(.badServerResponse, "the handshake answer is longer than 16 KiB", url: url), code: nil)
            }
            return readHead()
        }
        let rest = Array(handshake.head[(end + 4)...])
        let bytes = Array(handshake.head[..<end])
        handshake.head = []
        do {
            let parsed = try WebSocketHandshake.parseHead(bytes)
            var fields = HTTPFields()
            for f in parsed.fields {
                if let name = HTTPField.Name(f.name) { fields.append(HTTPField(name: name, value: f.value)) }
            }
            var response = Response(url: url, mimeType: nil, expectedContentLength: -1, statusCode: parsed.status, headerFields: fields)
            response.statusLine = "HTTP/1.1 \(parsed.status) \(parsed.reason)"
            lock.withLock { $0.response = response }
            if let store = session?.configuration.cookieStore, session?.configuration.httpShouldSetCookies == true {
                let setCookies = parsed.values("Set-Cookie")
                if !setCookies.isEmpty { store.storeCookies(fromHeaders: setCookies, for: WebSocketTask.httpForm(url), mainDocumentURL: nil) }
            }
            if [301, 302, 303, 307, 308].contains(parsed.status), let location = parsed.values("Location").first {
                return redirect(to: location, from: request)
            }
            if parsed.status == 401, !parsed.values("WWW-Authenticate").isEmpty {
                return authenticationRequired(parsed, response: response, request: request, rest: rest)
            }
            guard parsed.status == 101 else {
                return finish(PorterError(.badServerResponse, "the server refused the WebSocket upgrade: \(parsed.status) \(parsed.reason)",
                                          url: url), code: nil)
            }
            let offered = lock.withLock { $0.offeredDeflate }
            let (agreed, deflate) = try WebSocketHandshake.validate(parsed, key: handshake.key, offered: protocols, deflate: offered)
            if let failure = mutualAuthenticationFailure(parsed) {
                return finish(PorterError(.userAuthenticationRequired, "the server's Negotiate answer does not authenticate it: \(failure)",
                                          url: url), code: nil)
            }
            // A wss 101 teaches HSTS as an https response would; a ws one never (RFC 6797 §8.1).
            session?.configuration.noteStrictTransportSecurity(parsed.values("Strict-Transport-Security"), from: url)
            if let (credential, space) = handshake.usedCredential, credential.persistence != .none {
                session?.configuration.credentialStore?.set(credential, for: space)
            }
            if let deflate {
                guard let inflater = WebSocketDeflateStream.inflater() else {
                    return finish(PorterError(.unknown, "zlib could not make an inflater", url: url), code: nil)
                }
                parser.allowsRSV1 = true
                assembler.inflater = inflater
                assembler.resetsInflaterPerMessage = deflate.serverNoContextTakeover
                deflater = WebSocketDeflateStream.deflater(windowBits: deflate.clientMaxWindowBits ?? 15)
                deflaterResetsPerMessage = deflate.clientNoContextTakeover
            }
            lock.withLock { s in
                s.agreedProtocol = agreed
                s.agreedDeflate = deflate
            }
            // The machine reports the opening and lets the sends that waited for it go.
            handle(.opened(attempt: attempt))
            parser.append(rest)
            processFrames()
            readMore()
        } catch {
            finish(PorterError(.badServerResponse, "the WebSocket handshake failed: \(error.message)", url: url), code: nil)
        }
    }

    static func endOfHead(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i
        }
        return nil
    }

    /// Starts the handshake again on a new connection (after a redirect or a challenge),
    /// unless the machine gave the attempt up (the task ended meanwhile).
    func reconnect(_ request: Request) {
        lock.withLock { $0.currentRequest = request }
        handle(.retry(attempt: attempt, url: request.url))
    }

    // MARK: - redirects

    /// A 3xx during the handshake: followed within the session's redirect policy (count
    /// and schemes, seen as http and https), credentials dropped when it leaves the
    /// origin, an http(s) Location taken as ws(s).
    private func redirect(to location: String, from request: Request) {
        let url = request.url
        let base = WebSocketTask.httpForm(url)
        guard let session, let target = URL(string: location, relativeTo: base)?.absoluteURL else {
            return finish(PorterError(.badServerResponse, "the handshake redirect has a Location that is not a URL", url: url), code: nil)
        }
        let resolved = WebSocketTask.httpForm(target)
        let config = session.configuration
        let policy = RedirectPolicy(maximumRedirects: config.maximumRedirects, allowedSchemes: config.allowedRedirectSchemes)
        var probe = request
        probe.url = resolved
        var from = request
        from.url = base
        guard ["http", "https"].contains(resolved.scheme?.lowercased() ?? ""), policy.allows(from: from, to: probe) else {
            return finish(PorterError(.redirectNotAllowed, "the handshake redirect leads to a scheme this session does not allow: \(resolved)",
                                      url: url), code: nil)
        }
        guard handshake.redirects < policy.maximumRedirects else {
            return finish(PorterError(.tooManyRedirects, "more than \(policy.maximumRedirects) redirects in the WebSocket handshake",
                                      url: url), code: nil)
        }
        handshake.redirects += 1
        var next = RedirectPolicy.prepare(probe, from: from)
        var c = URLComponents(url: resolved, resolvingAgainstBaseURL: false)
        c?.scheme = resolved.scheme?.lowercased() == "https" ? "wss" : "ws"
        next.url = c?.url ?? resolved
        // A credential a challenge gave belongs to its origin.
        handshake.redirected(sameOrigin: RedirectPolicy.sameOrigin(base, resolved))
        reconnect(next)
    }
}
