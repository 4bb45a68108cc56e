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
