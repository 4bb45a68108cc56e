import Foundation
import PorterCore

/// RFC 5861 `stale-while-revalidate`: the stale response was served; this revalidates it
/// with the server afterwards and refreshes the cache. It is an ordinary HTTPHandler
/// load whose client is the cache itself: a 304 refreshes the stored head, a new response
/// replaces the entry, anything else leaves the stale entry to expire. Nothing of it
/// reaches the task that was answered.
final class BackgroundRevalidation: ProtocolClient, @unchecked Sendable {
    let context: SessionContext
    private let request: Request
    private let cached: CachedResponse
    private let lock = NSLock()
    private var handler: HTTPHandler?
    private var response: Response?
    private var storable = false
    private var body = Data()

    /// Bodies above this size are not kept for the cache (the memory tier's own share).
    private static let bodyLimit = 4 << 20

    static func start(request: Request, cached: CachedResponse, context: SessionContext) {
        let client = BackgroundRevalidation(request: request, cached: cached, context: context)
        var r = request
        r.cachePolicy = .reloadRevalidatingCacheData
        let handler = HTTPHandler(request: r, cachedResponse: cached, client: client)
        client.lock.withLock { client.handler = handler }   // kept alive until the load ends
        handler.startLoading()
    }

    private init(request: Request, cached: CachedResponse, context: SessionContext) {
        self.request = request
        self.cached = cached
        self.context = context
    }

    private func end() { lock.withLock { handler = nil } }

    func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy) {
        lock.withLock {
            self.response = response
            storable = cacheStoragePolicy != .notAllowed
        }
    }
    func didLoad(_ data: Data) {
        lock.withLock {
            if body.count + data.count <= Self.bodyLimit { body.append(data) } else { storable = false }
        }
    }
    func didFinishLoading() {
        let (response, storable, body) = lock.withLock { (self.response, self.storable, self.body) }
        if let response, storable, let cache = context.configuration.responseCache {
            cache.storeCachedResponse(CachedResponse(response: response, data: body, storagePolicy: .allowed, storedDate: Date()),
                                      for: request)
        }
        end()
    }
    func cachedResponseIsValid(serving response: Response, revalidated: Bool) {
        if revalidated, let cache = context.configuration.responseCache {
            cache.storeCachedResponse(HTTPCacheRules.refreshed(cached, head: response, now: Date()), for: request)
        }
        end()
    }
    func cachedResponseIsValid() { end() }
    func wasRedirected(to request: Request, redirectResponse: Response) { handler?.stopLoading(); end() }
    func didFail(with error: PorterError) { end() }
    func didReceive(_ challenge: AuthenticationChallenge) { handler?.stopLoading(); end() }
    func didCancel(_ challenge: AuthenticationChallenge) {}
    func didSendBodyData(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {}
    func didCollect(_ metrics: TransactionMetrics) {}
    func needNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void) { completion(nil) }
}
