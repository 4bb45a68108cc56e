import CPorterAuth
import Foundation
import PorterCore
import PorterSession

/// What the next handshake request answers a challenge with.
enum HandshakeAnswer {
    case basic(String)
    case digest(HandshakeAuthentication.Digest, user: String, password: String, nonceCount: Int)
    /// NTLM authenticates one connection: the type 1 goes out, the type 2 comes back in a
    /// 401 on that connection, and the type 3 goes with the upgrade on it.
    case ntlmNegotiate(user: String, password: String)
    case ntlmAuthenticate(String)
    case negotiate(GSSContext, token: String)

    var method: AuthenticationMethod {
        switch self {
        case .basic: return .httpBasic
        case .digest: return .httpDigest
        case .ntlmNegotiate, .ntlmAuthenticate: return .ntlm
        case .negotiate: return .negotiate
        }
    }
}

/// A SPNEGO context (GSS-API, through CPorterAuth), kept to check the server's
/// mutual-authentication token in the 101.
final class GSSContext: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { porter_gss_free(pointer) }

    /// A context for HTTP@host and its first token, or why there is none (no tickets, no
    /// library, an unknown service).
    static func start(host: String) -> Result<(GSSContext, [UInt8]), PorterError> {
        var context: OpaquePointer?
        var token: UnsafeMutablePointer<UInt8>?
        var length = 0
        var why = [CChar](repeating: 0, count: 512)
        guard porter_gss_start(host, &context, &token, &length, &why, why.count) == 0, let context, let token else {
            return .failure(PorterError(.userAuthenticationRequired, "Negotiate: " + WebSocketTask.text(why)))
        }
        defer { porter_auth_free(token) }
        return .success((GSSContext(context), Array(UnsafeBufferPointer(start: token, count: length))))
    }

    func finish(_ token: [UInt8]) -> String? {
        var why = [CChar](repeating: 0, count: 512)
        let ok = token.withUnsafeBufferPointer { porter_gss_finish(pointer, $0.baseAddress, $0.count, &why, why.count) }
        return ok == 0 ? nil : WebSocketTask.text(why)
    }
}

extension WebSocketOpening {
    /// The Authorization value of the next request to `target` (Digest's changes with the
    /// target and counts its nonce's uses).
    mutating func nextAuthorization(target: String) -> String? {
        switch answer {
        case nil: return nil
        case .basic(let value)?: return value
        case .digest(let digest, let user, let password, let count)?:
            answer = .digest(digest, user: user, password: password, nonceCount: count + 1)
            var nonce = [UInt8](repeating: 0, count: 16)
            var rng = SystemRandomNumberGenerator()
            for i in nonce.indices { nonce[i] = rng.next() }
            return digest.authorization(user: user, password: password, method: "GET", uri: target,
                                        cnonce: HandshakeAuthentication.hex(nonce), nonceCount: count + 1)
        case .ntlmNegotiate?: return "NTLM " + Data(HandshakeAuthentication.NTLM.negotiate()).base64EncodedString()
        case .ntlmAuthenticate(let value)?: return value
        case .negotiate(_, let token)?: return "Negotiate " + token
        }
    }

    /// After a redirect: what belongs to the connection (NTLM, Negotiate) is gone; a
    /// credential (Basic, Digest) stays only within its origin.
    mutating func redirected(sameOrigin: Bool) {
        switch answer {
        case .basic?, .digest?: if !sameOrigin { answer = nil; usedCredential = nil }
        default: answer = nil
        }
        // Another origin's challenges start afresh: its first one proposes the URL's or
        // the store's credential, whatever the last origin refused.
        if !sameOrigin {
            failures = [:]
            closedSchemes = []
            staleRetried = false
        }
    }
}

/// Challenges in the opening handshake, answered as a data task's are: the strongest
/// scheme offered first (Negotiate, NTLM, Digest, Basic, as the http handler ranks them,
/// with PorterCore's one parser), through the delegate's
/// `webSocketTask(_:didReceive:completion:)`, default handling using the URL's or the
/// credential store's credential once (Negotiate: the user's Kerberos tickets).
extension WebSocketTask {
    /// A 401 during the handshake. `rest` is what followed its head on the connection.
    func authenticationRequired(_ head: WebSocketHandshake.Head, response: Response, request: Request, rest: [UInt8]) {
        let offered = HTTPAuthChallenge.strongestFirst(head.values("WWW-Authenticate"))
        // Continuations, not new questions: NTLM's type 2, a stale Digest nonce (RFC 7616
        // §3.3: the credential was right, the nonce old; once per nonce answered).
        switch handshake.answer {
        case .ntlmNegotiate(let user, let password)?:
            if let token = offered.first(where: { $0.method == .ntlm })?.token68, let data = Data(base64Encoded: token),
               let challenge = HandshakeAuthentication.NTLM.parseChallenge([UInt8](data)) {
                var client = [UInt8](repeating: 0, count: 8)
                var rng = SystemRandomNumberGenerator()
                for i in client.indices { client[i] = rng.next() }
                let message = HandshakeAuthentication.NTLM.authenticate(challenge, user: user, password: password, clientChallenge: client,
                                                                        time: HandshakeAuthentication.NTLM.fileTime())
                handshake.answer = .ntlmAuthenticate("NTLM " + Data(message).base64EncodedString())
                return continueOnConnection(after: head, rest: rest, request: request)
            }
        case .digest(_, let user, let password, _)?:
            if let challenge = offered.first(where: { $0.method == .httpDigest }), let fresh = HandshakeAuthentication.Digest(challenge),
               fresh.stale, !handshake.staleRetried {
                handshake.staleRetried = true
                handshake.answer = .digest(fresh, user: user, password: password, nonceCount: 0)
                return reconnect(request)
            }
        case .negotiate?:
            // The tickets will not do better a second time (as the http handler decides).
            handshake.closedSchemes.insert(.negotiate)
        default:
            break
        }
        handshake.answer = nil
        handshake.staleRetried = false
        stream?.close()
        stream = nil
        ask(offered, response: response, request: request)
    }

    /// The strongest open scheme goes to the delegate (or default handling).
    private func ask(_ offered: [HTTPAuthChallenge], response: Response, request: Request) {
        let url = request.url
        let refused = PorterError(.userAuthenticationRequired, "the server refused the WebSocket upgrade: 401 (authentication required)",
                                  url: url)
        guard let challenge = offered.first(where: { !handshake.closedSchemes.contains($0.method) && WebSocketTask.canAnswer($0) }) else {
            return finish(refused, code: nil)
        }
        let method = challenge.method
        let secure = ["wss", "https"].contains(url.scheme?.lowercased() ?? "")
        let realm = challenge.realm.flatMap { $0.isEmpty ? nil : $0 }
        let space = ProtectionSpace(host: url.host ?? "", port: url.port ?? (secure ? 443 : 80), protocol: secure ? "https" : "http",
                                    realm: realm, authenticationMethod: method)
        let store = session?.configuration.credentialStore
        let failures = handshake.failures[method] ?? 0
        if failures > 0, let (failed, failedSpace) = handshake.usedCredential, failedSpace == space,
           let store, store.defaultCredential(for: space) == failed {
            store.remove(failed, for: space)   // refused: not offered again
        }
        var proposed: Credential?
        if failures == 0, method != .negotiate {
            if let user = url.user, let password = url.password {
                proposed = Credential(user: user.removingPercentEncoding ?? user, password: password.removingPercentEncoding ?? password,
                                      persistence: .none)
            } else {
                proposed = store?.defaultCredential(for: space)
            }
        }
        let offeredCredential = proposed
        let settle: @Sendable (ChallengeDisposition) -> Void = { disposition in
            self.queue.async {
                // Answered while the task waits for it: not after its end, nor twice.
                guard self.target != nil, self.stream == nil else { return }
                switch disposition {
                case .performDefaultHandling where method == .negotiate:
                    self.answer(challenge, space: space, with: nil, offered: offered, response: response, request: request)
                case .performDefaultHandling:
                    guard let offeredCredential else { return self.finish(refused, code: nil) }
                    self.answer(challenge, space: space, with: offeredCredential, offered: offered, response: response, request: request)
                case .useCredential(let credential):
                    self.answer(challenge, space: space, with: credential, offered: offered, response: response, request: request)
                case .rejectProtectionSpace:
                    // The next scheme offered, if any (URLSession's meaning of rejecting a space).
                    self.handshake.closedSchemes.insert(method)
                    self.ask(offered, response: response, request: request)
                case .cancelAuthenticationChallenge:
                    self.finish(PorterError(.userCancelledAuthentication, "the authentication challenge was cancelled", url: url), code: nil)
                }
            }
        }
        let question = AuthenticationChallenge(protectionSpace: space, proposedCredential: offeredCredential, previousFailureCount: failures,
                                               failureResponse: response, reply: settle)
        if let delegate {
            deliver { delegate.webSocketTask(self, didReceive: question, completion: settle) }
        } else {
            settle(.performDefaultHandling)
        }
    }

    /// A C string buffer's text (up to its NUL).
    static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Schemes the handshake can answer: Digest needs a nonce and an algorithm it computes.
    static func canAnswer(_ c: HTTPAuthChallenge) -> Bool {
        switch c.method {
        case .httpBasic, .ntlm, .negotiate: return true
        case .httpDigest: return HandshakeAuthentication.Digest(c) != nil
        default: return false
        }
    }

    /// Builds the answer and tries the handshake again on a new connection.
    private func answer(_ challenge: HTTPAuthChallenge, space: ProtectionSpace, with credential: Credential?,
                        offered: [HTTPAuthChallenge], response: Response, request: Request) {
        let url = request.url
        let refused = PorterError(.userAuthenticationRequired, "the server refused the WebSocket upgrade: 401 (authentication required)",
                                  url: url)
        let method = challenge.method
        if method == .negotiate {
            // GSS-API's default credential (KRB5CCNAME), as URLSession uses the system's
            // tickets; no tickets means the next scheme.
            switch GSSContext.start(host: url.host ?? "") {
            case .success(let (context, token)):
                handshake.answer = .negotiate(context, token: Data(token).base64EncodedString())
            case .failure:
                handshake.closedSchemes.insert(.negotiate)
                return ask(offered, response: response, request: request)
            }
        } else {
            guard let credential, let user = credential.user, let password = credential.password else { return finish(refused, code: nil) }
            switch method {
            case .httpBasic: handshake.answer = .basic("Basic " + Data("\(user):\(password)".utf8).base64EncodedString())
            case .httpDigest:
                guard let digest = HandshakeAuthentication.Digest(challenge) else { return finish(refused, code: nil) }
                handshake.answer = .digest(digest, user: user, password: password, nonceCount: 0)
            default: handshake.answer = .ntlmNegotiate(user: user, password: password)
            }
            handshake.usedCredential = (credential, space)
        }
        handshake.failures[method, default: 0] += 1
        reconnect(request)
    }

    /// NTLM's type 3 goes on the connection that carried the type 2: the 401's body is
    /// read to its end first. A 401 that closes the connection or has no length cannot
    /// be followed on it.
    private func continueOnConnection(after head: WebSocketHandshake.Head, rest: [UInt8], request: Request) {
        let url = request.url
        let closing = head.values("Connection").flatMap { $0.split(separator: ",") }
            .contains { $0.trimmingCharacters(in: .whitespaces).lowercased() == "close" }
        guard let stream, !closing, head.values("Transfer-Encoding").isEmpty,
              let length = Int(head.values("Content-Length").first ?? "0"), (0...(1 << 20)).contains(length), rest.count <= length else {
            return finish(PorterError(.userAuthenticationRequired,
                                      "NTLM authenticates a connection, and the server's 401 did not keep it open for the answer", url: url),
                          code: nil)
        }
        drain(length - rest.count, from: stream) {
            let secure = ["wss", "https"].contains(url.scheme?.lowercased() ?? "")
            self.sendHandshake(request, host: url.host ?? "", port: url.port ?? (secure ? 443 : 80), secure: secure)
        }
    }

    private func drain(_ remaining: Int, from stream: any ByteStream, then next: @escaping @Sendable () -> Void) {
        guard remaining > 0 else { return next() }
        stream.read(maxLength: min(remaining, 16 * 1024)) { result in
            self.queue.async {
                guard self.stream === stream else { return }
                switch result {
                case .failure(let error): self.finish(error, code: nil)
                case .success(let data):
                    guard !data.isEmpty else {
                        return self.finish(PorterError(.networkConnectionLost, "the server closed the connection during the handshake",
                                                       url: self.currentRequest.url), code: nil)
                    }
                    self.drain(remaining - data.count, from: stream, then: next)
                }
            }
        }
    }

    /// The 101 of a Negotiate answer may carry the server's mutual-authentication token
    /// (RFC 4559 §5); when it does, it must verify.
    func mutualAuthenticationFailure(_ head: WebSocketHandshake.Head) -> String? {
        guard case .negotiate(let context, _)? = handshake.answer,
              let token = HTTPAuthChallenge.parse(head.values("WWW-Authenticate")).first(where: { $0.method == .negotiate })?.token68,
              let data = Data(base64Encoded: token) else { return nil }
        return context.finish([UInt8](data))
    }
}
