import CCurl
import Foundation
import HTTPTypes
import PorterCore
import PorterCurl

// HTTPHandler's answers to 3xx, 401 and 407: the next hop's request, and the
// challenge for the strongest scheme offered.

extension HTTPHandler {
    // MARK: - redirects

    func redirect(_ response: Response, target: String?) {
        guard let target, let url = URL(string: target) else {
            // A Location libcurl cannot resolve: the 3xx is the answer.
            client.didReceive(response, cacheStoragePolicy: .notAllowed)
            client.didFinishLoading()
            return
        }
        var next = request
        next.url = url
        for name in cacheFields { if let n = HTTPField.Name(name) { next.headerFields[n] = nil } }
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

    /// "server-ntlm", "proxy-basic": the key of the per-scheme bookkeeping below.
    static func key(_ method: AuthenticationMethod, proxy: Bool) -> String { "\(proxy ? "proxy" : "server")-\(method)" }

    /// A 401 / 407 becomes a challenge for the strongest scheme offered (Negotiate, NTLM,
    /// Digest, Basic) that is still open: a scheme the delegate rejected
    /// (`rejectProtectionSpace`), or a Negotiate that failed (the Kerberos tickets will not
    /// do better the second time), gives way to the next. With none left, the 401 / 407
    /// is the response.
    func challenge(_ response: Response, body kept: Data) {
        let isProxy = response.statusCode == 407
        let offered = HTTPHandler.parseChallenges(response.headerFields[fields: isProxy ? .proxyAuthenticate : .wwwAuthenticate].map(\.value))
        if (isProxy ? proxyAuthMethod : authMethod) == .negotiate {
            closedSchemes.insert(HTTPHandler.key(.negotiate, proxy: isProxy))
        }
        guard let (method, realm) = offered.first(where: { !closedSchemes.contains(HTTPHandler.key($0.0, proxy: isProxy)) }) else {
            deliver(response, body: kept)
            return
        }
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
        let failed = failures[HTTPHandler.key(method, proxy: isProxy)] ?? 0
        let challenge = AuthenticationChallenge(protectionSpace: space, proposedCredential: proposed,
                                                previousFailureCount: failed, failureResponse: response) { [self] disposition in
            loop.enqueue { [self] in answer(disposition, method: method, response: response, body: kept) }
        }
        client.didReceive(challenge)
    }

    func answer(_ disposition: ChallengeDisposition, method: AuthenticationMethod, response: Response, body kept: Data) {
        guard !isStopped else { return }
        let isProxy = response.statusCode == 407
        var use: Credential?
        switch disposition {
        case .useCredential(let c) where c.user != nil:
            use = c
        case .performDefaultHandling where method == .negotiate:
            // Negotiate's default: the user's own Kerberos tickets (GSS-API's default
            // credential cache, KRB5CCNAME), as URLSession uses the system's. libcurl
            // takes no user name or password for it; an empty one turns it on.
            use = Credential(user: "", password: "", persistence: .none)
        case .rejectProtectionSpace:
            // The next scheme offered, if any (URLSession's meaning of rejecting a space).
            closedSchemes.insert(HTTPHandler.key(method, proxy: isProxy))
            challenge(response, body: kept)
            return
        case .cancelAuthenticationChallenge:
            return  // the session ends the task and stops this handler
        default:
            // Default handling or an unusable credential: the 401/407 is the answer.
            deliver(response, body: kept)
            return
        }
        guard let use else { return }
        if isProxy {
            proxyCredential = use
            proxyAuthMethod = method
        } else {
            credential = use
            authMethod = method
        }
        failures[HTTPHandler.key(method, proxy: isProxy), default: 0] += 1
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
    }

    /// The 401 / 407 itself, as the response.
    func deliver(_ response: Response, body kept: Data) {
        client.didReceive(response, cacheStoragePolicy: .notAllowed)
        if !kept.isEmpty { client.didLoad(kept) }
        client.didFinishLoading()
    }

    func retry(with body: RequestBody?) {
        request.body = body
        transfer = nil
        begin()
    }

    /// Every challenge in the WWW-Authenticate (or Proxy-Authenticate) field values, each
    /// scheme once, strongest first (Negotiate, NTLM, Digest, Basic, then others as sent),
    /// with its realm: PorterCore's `HTTPAuthChallenge`, the parser the WebSocket handshake
    /// uses too.
    static func parseChallenges(_ values: [String]) -> [(AuthenticationMethod, String?)] {
        HTTPAuthChallenge.strongestFirst(values).map { ($0.method, $0.realm) }
    }

    /// The strongest challenge of one field value: "Digest realm="x", nonce=..." → (.httpDigest, "x").
    static func parseChallenge(_ header: String) -> (AuthenticationMethod, String?) {
        parseChallenges([header]).first ?? (.custom(""), nil)
    }
}
