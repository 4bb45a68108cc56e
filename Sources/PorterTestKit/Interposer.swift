import Foundation
import PorterCore

/// A factory in front of the handlers a configuration already had: it serves the same
/// requests with the same handlers, each wrapped by `wrap` (recording, network
/// conditions). Installed with `install(on:)`, which captures the handlers and registry
/// the configuration used so far as the ones to wrap.
final class InterposingFactory: ProtocolHandlerFactory, @unchecked Sendable {
    let schemes: Set<String>
    let name: String
    private let inner: [any ProtocolHandlerFactory]
    private let registry: HandlerRegistry
    private let wrap: @Sendable (_ request: Request, _ make: (Request, any ProtocolClient) -> any ProtocolHandler,
                                 _ client: any ProtocolClient, _ cached: CachedResponse?) -> any ProtocolHandler

    init(name: String, schemes: Set<String>, configuration: SessionConfiguration,
         wrap: @escaping @Sendable (Request, (Request, any ProtocolClient) -> any ProtocolHandler, any ProtocolClient, CachedResponse?) -> any ProtocolHandler) {
        self.name = name
        self.schemes = Set(schemes.map { $0.lowercased() })
        self.inner = configuration.handlers
        self.registry = configuration.registry
        self.wrap = wrap
    }

    /// The factory the configuration would have used without this one.
    func underlying(for request: Request) -> (any ProtocolHandlerFactory)? {
        inner.first(where: { $0.schemes.contains(request.scheme) && $0.canHandle(request) }) ?? registry.factory(for: request)
    }

    func canHandle(_ request: Request) -> Bool { underlying(for: request) != nil }
    func canonicalRequest(for request: Request) -> Request { underlying(for: request)?.canonicalRequest(for: request) ?? request }
    func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool {
        underlying(for: a)?.requestIsCacheEquivalent(a, b) ?? (a.url == b.url)
    }
    func mayBeRedirectTarget(scheme: String) -> Bool {
        underlying(for: Request(url: URL(string: scheme + "://x/")!))?.mayBeRedirectTarget(scheme: scheme) ?? true
    }
    func executor(for request: Request, context: SessionContext) -> (any TaskExecutor)? {
        underlying(for: request)?.executor(for: request, context: context)
    }
    func openStream(to target: ByteStreamTarget, context: SessionContext) -> (any ByteStream)? { nil }

    func makeHandler(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) -> any ProtocolHandler {
        guard let factory = underlying(for: request) else {
            return FailingHandler(error: PorterError(.unsupportedURL, "no handler for \(request.url.absoluteString)", url: request.url),
                                  client: client)
        }
        return wrap(request, { factory.makeHandler(request: $0, cachedResponse: cachedResponse, client: $1) }, client, cachedResponse)
    }

    func install(on configuration: inout SessionConfiguration) {
        configuration.handlers.insert(self, at: 0)
    }
}

/// A handler that fails at start (what an interposer hands out when nothing serves the
/// request, and what replay hands out for a request it has no recording of).
final class FailingHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { [] }
    let error: PorterError
    let client: any ProtocolClient
    init(error: PorterError, client: any ProtocolClient) {
        self.error = error
        self.client = client
    }
    convenience init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.init(error: PorterError(.unsupportedURL, "no handler", url: request.url), client: client)
    }
    func startLoading() { client.didFail(with: error) }
    func stopLoading() {}
}

/// A client that forwards every call to `target`: subclasses observe or delay.
class ForwardingClient: ProtocolClient, @unchecked Sendable {
    let target: any ProtocolClient
    init(target: any ProtocolClient) { self.target = target }
    var context: SessionContext { target.context }
    func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy) {
        target.didReceive(response, cacheStoragePolicy: cacheStoragePolicy)
    }
    func didLoad(_ data: Data) { target.didLoad(data) }
    func wasRedirected(to request: Request, redirectResponse: Response) {
        target.wasRedirected(to: request, redirectResponse: redirectResponse)
    }
    func didFinishLoading() { target.didFinishLoading() }
    func didFail(with error: PorterError) { target.didFail(with: error) }
    func didReceive(_ challenge: AuthenticationChallenge) { target.didReceive(challenge) }
    func didCancel(_ challenge: AuthenticationChallenge) { target.didCancel(challenge) }
    func cachedResponseIsValid() { target.cachedResponseIsValid() }
    func cachedResponseIsValid(serving response: Response, revalidated: Bool) {
        target.cachedResponseIsValid(serving: response, revalidated: revalidated)
    }
    func didSendBodyData(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        target.didSendBodyData(bytesSent: bytesSent, totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend)
    }
    func didCollect(_ metrics: TransactionMetrics) { target.didCollect(metrics) }
    func needNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void) { target.needNewBodyStream(completion) }
}

/// A handler that wraps another: start, stop and back-pressure go through.
final class WrappingHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { [] }
    let inner: any ProtocolHandler
    /// Runs after the inner handler's `stopLoading`.
    var onStop: (@Sendable () -> Void)?
    init(inner: any ProtocolHandler) { self.inner = inner }
    convenience init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.init(inner: FailingHandler(request: request, cachedResponse: cachedResponse, client: client))
    }
    func startLoading() { inner.startLoading() }
    func stopLoading() {
        inner.stopLoading()
        onStop?()
    }
    func pauseDelivery() { inner.pauseDelivery() }
    func resumeDelivery() { inner.resumeDelivery() }
}
