import Foundation

/// Hosts that asked for https only (RFC 6797), as the http handler asks them: the
/// contract side of the HSTS store (the file-backed store is PorterStorage's `HSTSStore`).
public protocol StrictTransportStore: AnyObject, Sendable {
    /// `url` upgraded to https when its host is known (an explicit port kept, 80 becoming
    /// 443); nil when it stays as it is.
    func upgradedURL(for url: URL) -> URL?
    /// Learns from a `Strict-Transport-Security` value of a verified https response from
    /// `host`; true when the store changed.
    @discardableResult func noteHeader(_ value: String, host: String) -> Bool
}

/// The alternative-service cache (RFC 7838): libcurl keeps it in curl's alt-svc file at
/// `path` (the file-backed cache is PorterStorage's `AltSvcCache`).
public protocol AlternativeServiceCache: Sendable {
    var path: String { get }
}

extension SessionConfiguration {
    /// RFC 6797 §8.1: the first Strict-Transport-Security field of a response over a
    /// secure connection (https, or wss: RFC 6455's "wss is https") whose certificate
    /// verified is noted for its host (an IP address never is). Not over plain http or ws,
    /// not with verification off, not from a server the delegate trusted by hand
    /// (`trustedByHand`): a certificate error means no HSTS. The one place the http
    /// handler's responses and the WebSocket handshake's 101 are learnt from.
    public func noteStrictTransportSecurity(_ values: [String], from url: URL, trustedByHand: Bool = false) {
        guard let store = hstsStore, ["https", "wss"].contains(url.scheme?.lowercased() ?? ""),
              !tlsVerificationDisabled, !trustedByHand, let value = values.first, let host = url.host else { return }
        store.noteHeader(value, host: host)
    }
}
