import CCurl
import Foundation
import HTTPTypes
import PorterCore
import PorterCurl

extension HTTPHandler {
    // MARK: - server trust

    /// The default check refused the server: fetch its chain (a connect-only handshake
    /// without verification) and let the delegate decide. Trusting it pins its key.
    func askServerTrust(failure: PorterError) {
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
                        if let key = TrustedServers.Key(url, session: client.context.sessionIdentifier) {
                            TrustedServers.remember(pin, for: key)
                        }
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
}


/// The server-trust decisions of each session, so that the delegate is asked once per
/// connection, as URLSession asks, and not once per request.
///
/// The rule: when a session's delegate trusts a server it was shown (host, port), that
/// server's public key is remembered for the session. A later https load of the session
/// to the same host and port is made pinned to that key (verification replaced by the
/// key, exactly as the load the delegate answered was), so libcurl reuses the connection
/// the delegate trusted (its TLS settings match) and nothing is asked. A connection that
/// presents another key fails the pin: the decision is forgotten and the load is made
/// verified again, and if that fails the delegate is asked about the new key. Another
/// session, another host name for the same address, or another port asks on its own.
/// A refused or cancelled challenge remembers nothing.
enum TrustedServers {
    struct Key: Hashable {
        let session: UInt64
        let host: String
        let port: Int

        init?(_ url: URL, session: UInt64) {
            guard url.scheme?.lowercased() == "https", let host = url.host?.lowercased(), !host.isEmpty else { return nil }
            self.session = session
            self.host = host
            self.port = url.port ?? 443
        }
    }

    private static let pins = Locked([Key: String]())
    /// Sessions come and go without telling handlers: the table is bounded instead.
    private static let limit = 4096

    static func pin(for key: Key) -> String? { pins.withLock { $0[key] } }

    static func remember(_ pin: String, for key: Key) {
        pins.withLock { table in
            if table.count >= limit, table[key] == nil { table.removeAll(keepingCapacity: true) }
            table[key] = pin
        }
    }

    /// Forgets `pin` for `key` (not a newer decision another load made meanwhile).
    static func forget(_ key: Key, pin: String) {
        pins.withLock { table in if table[key] == pin { table[key] = nil } }
    }
}
