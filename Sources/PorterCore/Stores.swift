import Foundation

// The stores a session uses, as protocols: the contract names no store of its own.
// The `Porter` module supplies the shared defaults (SQLite cookies and cache, a 0600
// credential file) and installs them with `SessionConfiguration.installDefaultStores`.

/// Where a session's cookies live. Sessions of the `.default` kind share one store,
/// `.ephemeral` ones get their own; an application may supply its own type (as with
/// HTTPCookieStorage subclasses). Every method may be called from any thread.
public protocol CookieStore: AnyObject, Sendable {
    var acceptPolicy: CookieAcceptPolicy { get set }
    /// Applies a response's Set-Cookie headers (RFC 6265 §5.3) for `url`.
    func storeCookies(fromHeaders headers: [String], for url: URL, mainDocumentURL: URL?)
    /// The Cookie header for a request to `url`, or nil when no cookie matches.
    func cookieHeader(for url: URL, mainDocumentURL: URL?) -> String?
    /// The cookies a request to `url` would send, in header order.
    func cookies(for url: URL) -> [Cookie]
    var allCookies: [Cookie] { get }
    /// Stores (or replaces) one cookie as is.
    func setCookie(_ cookie: Cookie)
    func deleteCookie(_ cookie: Cookie)
    func removeAll()
}

/// Credentials per protection space (URLCredentialStorage's job). Every method may be
/// called from any thread.
public protocol CredentialStorage: AnyObject, Sendable {
    /// Every credential stored for `space`, by user name.
    func credentials(for space: ProtectionSpace) -> [String: Credential]
    /// The credential offered first for `space`.
    func defaultCredential(for space: ProtectionSpace) -> Credential?
    /// Stores `credential` for `space` (as its default unless `asDefault` is false).
    func set(_ credential: Credential, for space: ProtectionSpace, asDefault: Bool)
    func remove(_ credential: Credential, for space: ProtectionSpace)
    func removeAll()
}

extension CredentialStorage {
    public func set(_ credential: Credential, for space: ProtectionSpace) {
        set(credential, for: space, asDefault: true)
    }
}

/// A store of responses a handler may be handed back. The RFC 9111 decisions live
/// in the stores issue; this is the contract sessions and handlers use.
public protocol ResponseCache: AnyObject, Sendable {
    func cachedResponse(for request: Request) -> CachedResponse?
    func storeCachedResponse(_ cached: CachedResponse, for request: Request)
    func removeCachedResponse(for request: Request)
    func removeAllCachedResponses()
}

/// A memory-only cache keyed by URL and method: no freshness rules, it keeps what it
/// is given. Useful for tests and for handlers whose resources never change.
public final class MemoryResponseCache: ResponseCache, @unchecked Sendable {
    private let entries = Locked([String: CachedResponse]())
    public init() {}
    private func key(_ r: Request) -> String { r.method + " " + r.url.absoluteString }
    public func cachedResponse(for request: Request) -> CachedResponse? { entries.withLock { $0[key(request)] } }
    public func storeCachedResponse(_ cached: CachedResponse, for request: Request) {
        entries.withLock { $0[key(request)] = cached }
    }
    public func removeCachedResponse(for request: Request) { _ = entries.withLock { $0.removeValue(forKey: key(request)) } }
    public func removeAllCachedResponses() { entries.withLock { $0.removeAll() } }
    public var count: Int { entries.withLock { $0.count } }
}

