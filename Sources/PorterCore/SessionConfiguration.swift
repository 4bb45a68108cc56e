import Foundation
import HTTPTypes
import Logging

/// A session's settings. Copied when a session is made: changing a configuration
/// afterwards does not change the session. Copy-on-write: the session, its tasks and
/// every handler's `SessionContext` share one storage box (one retain per copy) until
/// a copy is changed.
public struct SessionConfiguration: Sendable {
    public enum Kind: Sendable, Equatable {
        case `default`
        case ephemeral
        case background(identifier: String)
    }

    /// The fields. Mutated only through `writable()`, which first makes the box unique to
    /// this value: no two configurations ever share a box that changes.
    /// The fields skip the run-time exclusivity check of class properties (runtime calls
    /// on every read: ~8 k instructions per load in W2's profile): every access comes through a `Request` or
    /// `SessionConfiguration` value, whose own accesses the compiler already checks, and a
    /// box is written only while one value alone holds it.
    private struct Fields {
        var kind: Kind
        var additionalHeaders: HTTPFields
        var timeoutIntervalForRequest: TimeInterval
        var timeoutIntervalForResource: TimeInterval
        var waitsForConnectivity: Bool
        var routeOverride: (any RouteOverride)?
        var maximumRedirects: Int
        var allowedRedirectSchemes: Set<String>
        var http2Enabled: Bool
        var webSocketPerMessageDeflate: Bool
        var httpMaximumConnectionsPerHost: Int
        var maximumBytesPerSecond: Int64?
        var connectionTimeout: TimeInterval?
        var tlsMinimumVersion: TLSVersion?
        var tlsMaximumVersion: TLSVersion?
        var caCertificateFile: String?
        var tlsVerificationDisabled: Bool
        var pinnedPublicKey: String?
        var clientCertificate: (certificatePath: String, keyPath: String)?
        var proxies: ProxyConfiguration
        var hostOverrides: [HostOverride]
        var httpShouldSetCookies: Bool
        var cookieStore: (any CookieStore)?
        var credentialStore: (any CredentialStorage)?
        var hstsStore: (any StrictTransportStore)?
        var altSvcCache: (any AlternativeServiceCache)?
        var requestCachePolicy: CachePolicy
        var responseCache: (any ResponseCache)?
        var handlers: [any ProtocolHandlerFactory]
        var registry: HandlerRegistry
        var logger: Logger
        var receiveBufferLimit: Int
        var maximumDecodingRatio: Double?
        var decodesContentEncoding: Bool
        var downloadDirectory: String?
        var launchCommand: [String]?
        var sessionSendsLaunchEvents: Bool
        var isDiscretionary: Bool
        var discretionaryBytesPerSecond: Int64
        var taskObserver: (any TaskObserver)?

        /// The defaults every new configuration starts with (stores and observer are set
        /// by `SessionConfiguration.init(kind:)`).
        init(kind: Kind) {
            self.kind = kind
            additionalHeaders = [:]
            timeoutIntervalForRequest = 60
            timeoutIntervalForResource = 7 * 24 * 3600
            waitsForConnectivity = false
            routeOverride = nil
            maximumRedirects = 20
            allowedRedirectSchemes = ["http", "https"]
            http2Enabled = true
            webSocketPerMessageDeflate = true
            httpMaximumConnectionsPerHost = 6
            maximumBytesPerSecond = nil
            connectionTimeout = nil
            tlsMinimumVersion = nil
            tlsMaximumVersion = nil
            caCertificateFile = nil
            tlsVerificationDisabled = false
            pinnedPublicKey = nil
            clientCertificate = nil
            proxies = .fromEnvironment()
            hostOverrides = []
            httpShouldSetCookies = true
            cookieStore = nil
            credentialStore = nil
            hstsStore = nil
            altSvcCache = nil
            requestCachePolicy = .useProtocolCachePolicy
            responseCache = nil
            handlers = []
            registry = .shared
            logger = Logger(label: "porter", factory: { _ in SwiftLogNoOpLogHandler() })
            receiveBufferLimit = 4 << 20
            maximumDecodingRatio = nil
            decodesContentEncoding = true
            downloadDirectory = nil
            launchCommand = nil
            sessionSendsLaunchEvents = true
            isDiscretionary = false
            discretionaryBytesPerSecond = 256 << 10
            taskObserver = nil
        }
    }

    /// The box the fields live in; copying a box copies the fields whole (no list of
    /// fields to keep in step when one is added).
    private final class Storage: @unchecked Sendable {
        @exclusivity(unchecked) var f: Fields
        /// `SessionConfiguration.settingsVersion`: replaced by every `writable()`.
        @exclusivity(unchecked) var version: AnyObject = SettingsVersion()
        init(kind: Kind) { f = Fields(kind: kind) }
        init(copying other: Storage) { f = other.f }
    }

    private var storage: Storage

    /// A token of these exact settings: every change to a configuration gives it a new one,
    /// so two configurations with the same token have the same settings, whoever holds the
    /// token for how long. A cache keyed by a session's settings may keep it and skip
    /// comparing them field by field (`CurlLoop.loop(for:)`) — the token holds nothing
    /// of the configuration (no store, no cache stays alive for it).
    package var settingsVersion: AnyObject { storage.version }

    /// What `settingsVersion` answers: an empty object, compared by identity.
    private final class SettingsVersion: Sendable {}

    /// The box, made unique to this configuration first (copied when another shares it),
    /// with a new `settingsVersion`: it is about to change.
    private mutating func writable() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(copying: storage) }
        storage.version = SettingsVersion()
        return storage
    }

    public private(set) var kind: Kind {
        get { storage.f.kind }
        _modify { yield &writable().f.kind }
    }
    /// Headers added to every request that does not set them itself.
    public var additionalHeaders: HTTPFields {
        get { storage.f.additionalHeaders }
        _modify { yield &writable().f.additionalHeaders }
    }
    /// Idle time in seconds after which a task fails with `.timedOut`; reset by every event.
    public var timeoutIntervalForRequest: TimeInterval {
        get { storage.f.timeoutIntervalForRequest }
        _modify { yield &writable().f.timeoutIntervalForRequest }
    }
    /// Total time in seconds a task may take.
    public var timeoutIntervalForResource: TimeInterval {
        get { storage.f.timeoutIntervalForResource }
        _modify { yield &writable().f.timeoutIntervalForResource }
    }
    /// When there is no route to the host (or to any name server, for a name that does
    /// not resolve), the task waits for the network instead of failing: the task delegate
    /// hears `taskIsWaitingForConnectivity` once, the kernel's route changes (rtnetlink)
    /// are watched, and the load starts again when a route appears, until
    /// `timeoutIntervalForResource` (the request timeout does not run while waiting). A
    /// host that refuses the connection is not waited for. URLSession's default: false.
    public var waitsForConnectivity: Bool {
        get { storage.f.waitsForConnectivity }
        _modify { yield &writable().f.waitsForConnectivity }
    }
    /// Tests only (PorterTesting's `NetworkConditions`): answers "is there a route" for
    /// `waitsForConnectivity` instead of the kernel, and says when that answer changes.
    package var routeOverride: (any RouteOverride)? {
        get { storage.f.routeOverride }
        _modify { yield &writable().f.routeOverride }
    }
    /// Redirects followed per task before `.tooManyRedirects` (curl's default is 50, Porter's 20).
    public var maximumRedirects: Int {
        get { storage.f.maximumRedirects }
        _modify { yield &writable().f.maximumRedirects }
    }
    /// Schemes a redirect may lead to when it changes scheme. A redirect within one
    /// scheme is always allowed; http ↔ https is allowed by this default. Add "file",
    /// "ftp" or a plugin's scheme to opt in.
    public var allowedRedirectSchemes: Set<String> {
        get { storage.f.allowedRedirectSchemes }
        _modify { yield &writable().f.allowedRedirectSchemes }
    }
    public var http2Enabled: Bool {
        get { storage.f.http2Enabled }
        _modify { yield &writable().f.http2Enabled }
    }
    /// WebSocket tasks offer permessage-deflate (RFC 7692) in their opening handshake, as
    /// browsers do; false: no extension is offered (as URLSession). A task can override it
    /// (`WebSocketTask.perMessageDeflate`).
    public var webSocketPerMessageDeflate: Bool {
        get { storage.f.webSocketPerMessageDeflate }
        _modify { yield &writable().f.webSocketPerMessageDeflate }
    }
    /// At most this many connections to one host (and port) at a time, for the schemes
    /// on libcurl; further requests wait for a free connection (HTTP/2 requests share
    /// one). URLSession's name; default 6.
    public var httpMaximumConnectionsPerHost: Int {
        get { storage.f.httpMaximumConnectionsPerHost }
        _modify { yield &writable().f.httpMaximumConnectionsPerHost }
    }
    /// Bytes per second a libcurl transfer (http, https, ftp) may receive at most (curl's
    /// --limit-rate, CURLOPT_MAX_RECV_SPEED_LARGE); nil: no limit.
    public var maximumBytesPerSecond: Int64? {
        get { storage.f.maximumBytesPerSecond }
        _modify { yield &writable().f.maximumBytesPerSecond }
    }
    /// Seconds to wait for a connection (curl's --connect-timeout); nil: the request's idle
    /// timeout.
    public var connectionTimeout: TimeInterval? {
        get { storage.f.connectionTimeout }
        _modify { yield &writable().f.connectionTimeout }
    }
    public var tlsMinimumVersion: TLSVersion? {
        get { storage.f.tlsMinimumVersion }
        _modify { yield &writable().f.tlsMinimumVersion }
    }
    public var tlsMaximumVersion: TLSVersion? {
        get { storage.f.tlsMaximumVersion }
        _modify { yield &writable().f.tlsMaximumVersion }
    }
    /// A PEM bundle of trusted CAs used instead of the system's (nil: the system's).
    public var caCertificateFile: String? {
        get { storage.f.caCertificateFile }
        _modify { yield &writable().f.caCertificateFile }
    }
    /// Turns TLS verification off: any certificate, any host name. Only ever set on an
    /// explicit request (the CLI's `-k`); prefer `caCertificateFile` or a server-trust
    /// challenge answered by the delegate.
    public var tlsVerificationDisabled: Bool {
        get { storage.f.tlsVerificationDisabled }
        _modify { yield &writable().f.tlsVerificationDisabled }
    }
    /// Accept only a server whose public key matches: "sha256//BASE64[;sha256//...]" or
    /// the path of a PEM/DER public key (libcurl's CURLOPT_PINNEDPUBLICKEY).
    public var pinnedPublicKey: String? {
        get { storage.f.pinnedPublicKey }
        _modify { yield &writable().f.pinnedPublicKey }
    }
    /// A client certificate and key (PEM files) offered to TLS servers that ask.
    public var clientCertificate: (certificatePath: String, keyPath: String)? {
        get { storage.f.clientCertificate }
        _modify { yield &writable().f.clientCertificate }
    }
    public var proxies: ProxyConfiguration {
        get { storage.f.proxies }
        _modify { yield &writable().f.proxies }
    }
    /// Host names pinned to addresses for this session's libcurl schemes, ahead of DNS
    /// (curl's `--resolve`): for tests with many names on one machine, or to reach one
    /// server of a pool.
    public var hostOverrides: [HostOverride] {
        get { storage.f.hostOverrides }
        _modify { yield &writable().f.hostOverrides }
    }

    /// The trust settings and address overrides responses are fetched under, as the cache
    /// partition (`Request.cachePartition`): "" for system CAs, verification on, no pin,
    /// no overrides. The cache serves an entry only within its own partition.
    public var cachePartition: String {
        var parts: [String] = []
        if tlsVerificationDisabled { parts.append("insecure") }
        if let ca = caCertificateFile { parts.append("ca=\(ca)") }
        if let pin = pinnedPublicKey { parts.append("pin=\(pin)") }
        if let cert = clientCertificate { parts.append("cert=\(cert.certificatePath)") }
        if !hostOverrides.isEmpty { parts.append("resolve=" + hostOverrides.map(\.description).sorted().joined(separator: ",")) }
        return parts.joined(separator: ";")
    }
    /// Send and store cookies through `cookieStore`, for the schemes whose handler
    /// declares it (`ProtocolHandler.carriesCookies(for:)`: http and https).
    public var httpShouldSetCookies: Bool {
        get { storage.f.httpShouldSetCookies }
        _modify { yield &writable().f.httpShouldSetCookies }
    }
    /// With the `Porter` module's defaults, `.default` sessions share
    /// `PersistentCookieStore.shared` (SQLite under the XDG data home) and each
    /// `.ephemeral` configuration gets a memory store of its own. nil: no cookies.
    public var cookieStore: (any CookieStore)? {
        get { storage.f.cookieStore }
        _modify { yield &writable().f.cookieStore }
    }
    /// Credentials per protection space: with the `Porter` module's defaults, `.default`
    /// sessions share `CredentialStore.shared` (permanent ones in a 0600 file under the
    /// XDG data home); each `.ephemeral` configuration has a memory store of its own.
    /// nil: none.
    public var credentialStore: (any CredentialStorage)? {
        get { storage.f.credentialStore }
        _modify { yield &writable().f.credentialStore }
    }
    /// Hosts that asked for https only (RFC 6797): with the `Porter` module's defaults,
    /// `.default` sessions share `HSTSStore.shared` (curl's HSTS file format, 0600, under
    /// the XDG data home); each `.ephemeral` configuration has a memory store of its own.
    /// A load of `http://` for a known host becomes a "307 Internal Redirect" to
    /// `https://` before anything is sent. nil: no HSTS (curl's default).
    public var hstsStore: (any StrictTransportStore)? {
        get { storage.f.hstsStore }
        _modify { yield &writable().f.hstsStore }
    }
    /// Alternative services (RFC 7838), kept by libcurl in curl's alt-svc file: with the
    /// `Porter` module's defaults, `.default` sessions share `AltSvcCache.shared` (under
    /// the XDG cache home); `.ephemeral` ones have none (libcurl keeps alternatives in
    /// files only). nil: Alt-Svc fields are ignored (curl's default).
    public var altSvcCache: (any AlternativeServiceCache)? {
        get { storage.f.altSvcCache }
        _modify { yield &writable().f.altSvcCache }
    }
    public var requestCachePolicy: CachePolicy {
        get { storage.f.requestCachePolicy }
        _modify { yield &writable().f.requestCachePolicy }
    }
    /// The cache (nil: none): with the `Porter` module's defaults, `.default` sessions
    /// share `HTTPCache.shared` (memory and disk); each `.ephemeral` configuration has a
    /// memory-only `HTTPCache` of its own.
    /// Any `ResponseCache` can be plugged in.
    public var responseCache: (any ResponseCache)? {
        get { storage.f.responseCache }
        _modify { yield &writable().f.responseCache }
    }
    /// Handlers consulted before the registry, most preferred first.
    public var handlers: [any ProtocolHandlerFactory] {
        get { storage.f.handlers }
        _modify { yield &writable().f.handlers }
    }
    /// The registry consulted after `handlers`.
    public var registry: HandlerRegistry {
        get { storage.f.registry }
        _modify { yield &writable().f.registry }
    }
    /// Where Porter logs the life cycle of tasks.
    public var logger: Logger {
        get { storage.f.logger }
        _modify { yield &writable().f.logger }
    }
    /// Back-pressure: when this many received bytes wait for a consumer, the handler
    /// is asked to pause; it is resumed when they fall below a quarter of it.
    public var receiveBufferLimit: Int {
        get { storage.f.receiveBufferLimit }
        _modify { yield &writable().f.receiveBufferLimit }
    }
    /// A guard against decompression bombs, off by default (as in curl and browsers: a
    /// large body decodes with flat memory either way). When set, a gzip or deflate body
    /// whose decoded size passes this many times its encoded size (after its first MiB)
    /// fails with `dataLengthExceedsMaximum`. The same for br and zstd, and whatever the ratio,
    /// one read of the socket decodes to at most 1 MiB before the transfer pauses for the
    /// consumer: brotli and zstd have no worst ratio.
    public var maximumDecodingRatio: Double? {
        get { storage.f.maximumDecodingRatio }
        _modify { yield &writable().f.maximumDecodingRatio }
    }
    /// Decode gzip, deflate, br and zstd bodies (and offer them in `Accept-Encoding` when a
    /// request names none), as URLSession does: the response keeps its Content-Encoding
    /// and Content-Length (the encoded length), the body arrives decoded, whoever wrote
    /// the request's `Accept-Encoding`. false: no Accept-Encoding is added and every body
    /// arrives as the server sent it (the CLI's rule for a request that sets its own
    /// Accept-Encoding, as curl without `--compressed`).
    public var decodesContentEncoding: Bool {
        get { storage.f.decodesContentEncoding }
        _modify { yield &writable().f.decodesContentEncoding }
    }
    /// Where download tasks write their temporary files (nil: `$TMPDIR` or /tmp). Put it
    /// on the destination's file system so the final move is a rename.
    public var downloadDirectory: String? {
        get { storage.f.downloadDirectory }
        _modify { yield &writable().f.downloadDirectory }
    }
    /// Background sessions: a command (argv, no shell) porterd runs, as this user and
    /// with PORTER_BACKGROUND_SESSION set to the identifier, when the session has events
    /// waiting and no process holds it (BITS' notify command line). Its first element must
    /// be the absolute path of this program itself (porterd compares it with the attaching
    /// process's /proc/PID/exe and ignores anything else), and the program that first set
    /// it owns it: a process running another program cannot change or clear it.
    public var launchCommand: [String]? {
        get { storage.f.launchCommand }
        _modify { yield &writable().f.launchCommand }
    }
    /// Background sessions: false keeps porterd from running `launchCommand`.
    public var sessionSendsLaunchEvents: Bool {
        get { storage.f.sessionSendsLaunchEvents }
        _modify { yield &writable().f.sessionSendsLaunchEvents }
    }
    /// Background sessions: the transfers may wait for a quiet moment. Linux knows no
    /// "cheap network", so Porter's meaning is a bandwidth cap: each discretionary transfer
    /// runs at most at `discretionaryBytesPerSecond` (and one at a time per session), leaving
    /// the line to interactive work.
    public var isDiscretionary: Bool {
        get { storage.f.isDiscretionary }
        _modify { yield &writable().f.isDiscretionary }
    }
    /// The cap of discretionary transfers (256 KiB/s by default).
    public var discretionaryBytesPerSecond: Int64 {
        get { storage.f.discretionaryBytesPerSecond }
        _modify { yield &writable().f.discretionaryBytesPerSecond }
    }
    /// Tracing and metrics of this session's tasks (`TaskObserver`); nil: none. New
    /// configurations get the one installed by `installDefaultTaskObserver` (with the
    /// `Porter` module: `PorterInstrumentation()`, idle until a backend is bootstrapped).
    public var taskObserver: (any TaskObserver)? {
        get { storage.f.taskObserver }
        _modify { yield &writable().f.taskObserver }
    }

    init(kind: Kind) {
        storage = Storage(kind: kind)
        let stores = SessionConfiguration.defaultStores.current(kind)
        cookieStore = stores.cookieStore
        credentialStore = stores.credentialStore
        responseCache = stores.responseCache
        hstsStore = stores.hstsStore
        altSvcCache = stores.altSvcCache
        taskObserver = SessionConfiguration.defaultTaskObserver
    }

    /// Shared persistent stores (when they exist).
    public static var `default`: SessionConfiguration { SessionConfiguration(kind: .default) }
    /// Nothing persisted; stores private to the session.
    public static var ephemeral: SessionConfiguration { SessionConfiguration(kind: .ephemeral) }
    /// Transfers that continue outside the process. Not supported yet: tasks of such a
    /// session fail with `.unsupportedConfiguration`.
    public static func background(identifier: String) -> SessionConfiguration {
        SessionConfiguration(kind: .background(identifier: identifier))
    }

    /// The stores a new `.default`, `.ephemeral` or `.background` configuration starts
    /// with.
    public struct Stores: Sendable {
        public var cookieStore: (any CookieStore)?
        public var credentialStore: (any CredentialStorage)?
        public var responseCache: (any ResponseCache)?
        public var hstsStore: (any StrictTransportStore)?
        public var altSvcCache: (any AlternativeServiceCache)?
        public init(cookieStore: (any CookieStore)? = nil, credentialStore: (any CredentialStorage)? = nil,
                    responseCache: (any ResponseCache)? = nil, hstsStore: (any StrictTransportStore)? = nil, altSvcCache: (any AlternativeServiceCache)? = nil) {
            self.cookieStore = cookieStore
            self.credentialStore = credentialStore
            self.responseCache = responseCache
            self.hstsStore = hstsStore
            self.altSvcCache = altSvcCache
        }
    }

    private static let defaultStores = Locked<@Sendable (Kind) -> Stores>({ _ in Stores() })

    /// Sets what new configurations get as stores, by kind: `Porter.bootstrap()` installs
    /// the shared SQLite-backed ones; a program built on `PorterCore` alone has none until
    /// it installs its own. Configurations made before the call keep theirs.
    public static func installDefaultStores(_ provider: @escaping @Sendable (Kind) -> Stores) {
        defaultStores.withLock { $0 = provider }
    }

    /// Puts a handler type in front of the registry for this session.
    public mutating func prependHandler(_ type: any ProtocolHandler.Type) {
        handlers.insert(TypeHandlerFactory(type), at: 0)
    }
}
