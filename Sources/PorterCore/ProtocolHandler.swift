import Foundation

/// The URLProtocol of Porter: one instance loads one request.
///
/// Threading: Porter calls `startLoading` and `stopLoading` on the task's executor —
/// the one `executor(for:context:)` names (libcurl's handlers name their loop thread,
/// so their reports need no hop), else a serial queue of the session's — never
/// concurrently with each other. They must return promptly (do the I/O on a thread,
/// queue or event loop of the handler's own), as the other tasks on that executor wait
/// meanwhile. `pauseDelivery` and `resumeDelivery` may come from any thread, including
/// from inside a `ProtocolClient` call the handler is making, so they must only flip
/// state and return (see `FlowControl`). Debug builds assert that a task's life cycle
/// runs on its executor.
///
/// A handler reports through its `ProtocolClient`, from any thread, in this order:
/// optional challenges, then a response (or a redirect), data, then exactly one of
/// finish or fail. Porter tolerates handlers that break the order (calls after the
/// end are dropped and logged), but the task sees exactly one completion either way.
public protocol ProtocolHandler: AnyObject {
    /// The schemes (lower case) this handler type serves; the registry indexes by them.
    static var schemes: Set<String> { get }
    /// A finer check than the scheme (canInit); default true.
    static func canHandle(_ request: Request) -> Bool
    /// The form of a request used for cache keys and comparisons; default unchanged.
    static func canonicalRequest(for request: Request) -> Request
    /// Whether two requests would give the same cached response; default compares URLs.
    static func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool

    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient)
    func startLoading()
    /// Stop as soon as possible; after this the client ignores the handler.
    func stopLoading()
    /// Back-pressure: stop delivering data until `resumeDelivery`. Default: ignored
    /// (Porter then buffers what arrives).
    func pauseDelivery()
    func resumeDelivery()
    /// The executor the task's life cycle should run on (the thread of this handler's
    /// I/O, so its reports need no thread hop); nil for a serial queue of the session's.
    static func executor(for request: Request, context: SessionContext) -> (any TaskExecutor)?
    /// A byte stream for stream and WebSocket tasks (`ProtocolHandlerFactory.openStream`);
    /// default nil.
    static func openStream(to target: ByteStreamTarget, context: SessionContext) -> (any ByteStream)?
    /// The port a URL of `scheme` (one of `schemes`) means when it names none, as curl's
    /// handler table declares `defport`: credentials' protection spaces, route checks and
    /// telemetry read it through the registry (`HandlerRegistry.defaultPort(forScheme:)`),
    /// never from a table of their own. Default nil (the scheme has no port).
    static func defaultPort(for scheme: String) -> Int?
    /// Whether loads of `scheme` carry the session's cookies (a Cookie field on each
    /// request, Set-Cookie of each response stored), as curl's handler flags say it.
    /// Read through the registry (`HandlerRegistry.carriesCookies(forScheme:)`). Default
    /// false.
    static func carriesCookies(for scheme: String) -> Bool
    /// The head to serve `cached` with, when this handler type would answer `request`
    /// with it as it is and do nothing else (for HTTP: fresh, RFC 9111 §4.2, and no
    /// range, condition or upgrade to apply); nil when a handler must start. The session
    /// asks before making a handler, so such a hit costs no handler. Default nil.
    static func freshAnswer(for request: Request, cached: CachedResponse, configuration: SessionConfiguration) -> Response?
}

extension ProtocolClient {
    public func cachedResponseIsValid(serving response: Response, revalidated: Bool) { cachedResponseIsValid() }
}

extension ProtocolHandler {
    public static func canHandle(_ request: Request) -> Bool { true }
    public static func canonicalRequest(for request: Request) -> Request { request }
    public static func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool {
        canonicalRequest(for: a).url == canonicalRequest(for: b).url
    }
    public func pauseDelivery() {}
    public func resumeDelivery() {}
    public static func executor(for request: Request, context: SessionContext) -> (any TaskExecutor)? { nil }
    public static func openStream(to target: ByteStreamTarget, context: SessionContext) -> (any ByteStream)? { nil }
    public static func defaultPort(for scheme: String) -> Int? { nil }
    public static func carriesCookies(for scheme: String) -> Bool { false }
    public static func freshAnswer(for request: Request, cached: CachedResponse, configuration: SessionConfiguration) -> Response? {
        nil
    }
}

/// What a handler may know of the session it loads for (URLProtocol reaches the same
/// through `task.session.configuration`).
public struct SessionContext: Sendable {
    /// The session's settings: timeouts, TLS, CA file, proxies, HTTP/2, extra headers.
    public let configuration: SessionConfiguration
    /// Unique per session in this process: a key for per-session state such as a
    /// connection pool.
    public let sessionIdentifier: UInt64
    /// The executor the task's life cycle runs on (the one `executor(for:context:)`
    /// named, or the session's queue): a handler that does its work there reports with
    /// no thread hop.
    public let executor: (any TaskExecutor)?

    public init(configuration: SessionConfiguration, sessionIdentifier: UInt64, executor: (any TaskExecutor)? = nil) {
        self.executor = executor
        self.configuration = configuration
        self.sessionIdentifier = sessionIdentifier
    }
}

/// What a handler calls back. One client serves one handler instance; all methods
/// may be called from any thread.
public protocol ProtocolClient: AnyObject, Sendable {
    /// The session this load belongs to.
    var context: SessionContext { get }
    /// The response head. `cacheStoragePolicy` says whether it may be cached.
    func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy)
    /// Body bytes, in order.
    func didLoad(_ data: Data)
    /// The handler will not load `redirectResponse`'s body; Porter decides whether to
    /// load `request` (with a new handler) and stops this one.
    func wasRedirected(to request: Request, redirectResponse: Response)
    func didFinishLoading()
    func didFail(with error: PorterError)
    /// Ask for proof; the answer reaches `challenge`'s reply closure.
    func didReceive(_ challenge: AuthenticationChallenge)
    /// Withdraw a challenge (the connection went away); its answer will not be sent.
    func didCancel(_ challenge: AuthenticationChallenge)
    /// The cached response handed to the initialiser is still valid: Porter delivers it
    /// (response and body) and the handler is done.
    func cachedResponseIsValid()
    /// The same, with the response head to serve (an Age added, or the header fields of
    /// a 304 merged in) and whether the server was asked (`revalidated`): Porter then
    /// stores the refreshed head and reports the fetch as "revalidated" rather than
    /// "localCache". Default: `cachedResponseIsValid()`.
    func cachedResponseIsValid(serving response: Response, revalidated: Bool)
    /// Upload progress.
    func didSendBodyData(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64)
    /// Timing of one transaction (optional).
    func didCollect(_ metrics: TransactionMetrics)
    /// Ask the task's delegate for a fresh copy of a stream body (a 307 to a new place
    /// or an authentication retry). nil when none can be had.
    func needNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void)
}

/// Timing of one request/response exchange. Dates a handler does not know stay nil.
public struct TransactionMetrics: Sendable {
    public var request: Request
    public var response: Response?
    public var fetchStartDate: Date?
    public var domainLookupStartDate: Date?
    public var domainLookupEndDate: Date?
    public var connectStartDate: Date?
    public var secureConnectionStartDate: Date?
    public var connectEndDate: Date?
    public var requestStartDate: Date?
    public var responseStartDate: Date?
    public var responseEndDate: Date?
    public var networkProtocolName: String?
    public var isReusedConnection: Bool
    /// "networkLoad", "localCache", "revalidated", "local" (no network at all).
    public var fetchType: String
    public var countOfRequestBodyBytesSent: Int64
    public var countOfResponseBodyBytesReceived: Int64
    /// The peer's and our own address and port (nil when no connection was used).
    public var remoteAddress: String?
    public var remotePort: Int?
    public var localAddress: String?
    public var localPort: Int?
    /// "TLSv1.3", and the cipher suite ("TLS_AES_256_GCM_SHA384"), over TLS.
    public var negotiatedTLSProtocolVersion: String?
    public var negotiatedTLSCipherSuite: String?

    public init(request: Request, fetchType: String = "local") {
        self.request = request
        self.isReusedConnection = false
        self.fetchType = fetchType
        self.countOfRequestBodyBytesSent = 0
        self.countOfResponseBodyBytesReceived = 0
    }
}

/// A task's metrics: one transaction per request it loaded (redirects add more).
public struct TaskMetrics: Sendable {
    public var transactionMetrics: [TransactionMetrics]
    public var taskStartDate: Date
    public var taskEndDate: Date
    public var redirectCount: Int
    public var duration: TimeInterval { taskEndDate.timeIntervalSince(taskStartDate) }
    public init(transactionMetrics: [TransactionMetrics], taskStartDate: Date, taskEndDate: Date, redirectCount: Int) {
        self.transactionMetrics = transactionMetrics
        self.taskStartDate = taskStartDate
        self.taskEndDate = taskEndDate
        self.redirectCount = redirectCount
    }
}

/// Makes handlers. A Swift handler type is wrapped by `TypeHandlerFactory`; a plugin
/// adapter supplies its own factory (one per plugin descriptor).
public protocol ProtocolHandlerFactory: Sendable {
    var schemes: Set<String> { get }
    /// A name for listings ("FileHandler", "sftp (libssh2)").
    var name: String { get }
    func canHandle(_ request: Request) -> Bool
    func canonicalRequest(for request: Request) -> Request
    func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool
    func makeHandler(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) -> any ProtocolHandler
    /// Whether a redirect from another scheme may lead to this handler when the
    /// application allows the scheme (`allowedRedirectSchemes`). Default true; a plugin
    /// says so with PORTER_SCHEME_REDIRECT_TARGET.
    var mayBeRedirectTarget: Bool { get }
    /// The same for one of its schemes (a plugin says it per scheme, ABI 1.2). Default:
    /// `mayBeRedirectTarget`.
    func mayBeRedirectTarget(scheme: String) -> Bool
    /// The executor for a task whose first request this factory's handler loads.
    func executor(for request: Request, context: SessionContext) -> (any TaskExecutor)?
    /// A byte stream to `target` for stream and WebSocket tasks, or nil when this
    /// factory's handlers carry no streams (the default). Not yet open: the task opens it.
    func openStream(to target: ByteStreamTarget, context: SessionContext) -> (any ByteStream)?
    /// The port a URL of `scheme` (one of `schemes`) means when it names none; nil when
    /// the handler declares none (the default). See `ProtocolHandler.defaultPort(for:)`.
    func defaultPort(for scheme: String) -> Int?
    /// Whether loads of `scheme` carry the session's cookies; default false. See
    /// `ProtocolHandler.carriesCookies(for:)`.
    func carriesCookies(for scheme: String) -> Bool
    /// `ProtocolHandler.freshAnswer(for:cached:configuration:)`; default nil.
    func freshAnswer(for request: Request, cached: CachedResponse, configuration: SessionConfiguration) -> Response?
}

extension ProtocolHandlerFactory {
    public var mayBeRedirectTarget: Bool { true }
    public func mayBeRedirectTarget(scheme: String) -> Bool { mayBeRedirectTarget }
    public func executor(for request: Request, context: SessionContext) -> (any TaskExecutor)? { nil }
    public func openStream(to target: ByteStreamTarget, context: SessionContext) -> (any ByteStream)? { nil }
    public func defaultPort(for scheme: String) -> Int? { nil }
    public func carriesCookies(for scheme: String) -> Bool { false }
    public func freshAnswer(for request: Request, cached: CachedResponse, configuration: SessionConfiguration) -> Response? {
        nil
    }
}

/// The factory for a `ProtocolHandler` type.
public struct TypeHandlerFactory: ProtocolHandlerFactory, @unchecked Sendable {
    public let type: any ProtocolHandler.Type
    public init(_ type: any ProtocolHandler.Type) { self.type = type }
    public var schemes: Set<String> { Set(type.schemes.map { $0.lowercased() }) }
    public var name: String { String(describing: type) }
    public func canHandle(_ request: Request) -> Bool { type.canHandle(request) }
    public func canonicalRequest(for request: Request) -> Request { type.canonicalRequest(for: request) }
    public func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool { type.requestIsCacheEquivalent(a, b) }
    public func makeHandler(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) -> any ProtocolHandler {
        type.init(request: request, cachedResponse: cachedResponse, client: client)
    }
    public func executor(for request: Request, context: SessionContext) -> (any TaskExecutor)? {
        type.executor(for: request, context: context)
    }
    public func openStream(to target: ByteStreamTarget, context: SessionContext) -> (any ByteStream)? {
        type.openStream(to: target, context: context)
    }
    public func defaultPort(for scheme: String) -> Int? { type.defaultPort(for: scheme) }
    public func carriesCookies(for scheme: String) -> Bool { type.carriesCookies(for: scheme) }
    public func freshAnswer(for request: Request, cached: CachedResponse, configuration: SessionConfiguration) -> Response? {
        type.freshAnswer(for: request, cached: cached, configuration: configuration)
    }
}

/// A handler's record of the session's back-pressure requests, safe from any
/// thread: the delivery loop checks `isPaused` between chunks and parks in
/// `waitWhilePaused()` or registers a continuation for `resumeDelivery`.
public final class FlowControl: @unchecked Sendable {
    private let condition = NSCondition()
    private var paused = false
    private var stopped = false
    public init() {}
    public func pause() { condition.lock(); paused = true; condition.unlock() }
    public func resume() { condition.lock(); paused = false; condition.broadcast(); condition.unlock() }
    public func stop() { condition.lock(); stopped = true; condition.broadcast(); condition.unlock() }
    public var isPaused: Bool { condition.lock(); defer { condition.unlock() }; return paused }
    public var isStopped: Bool { condition.lock(); defer { condition.unlock() }; return stopped }
    /// Blocks the calling (handler-owned) thread while paused. Returns false once stopped.
    @discardableResult
    public func waitWhilePaused() -> Bool {
        condition.lock(); defer { condition.unlock() }
        while paused && !stopped { condition.wait() }
        return !stopped
    }
}
