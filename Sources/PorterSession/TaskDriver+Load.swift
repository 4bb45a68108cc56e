import Foundation
import PorterCore
import PorterEngine

/// Starting a load: the body stream, the request's final form (session headers, the
/// timeout, the cookie step), the cache step's lookup, the handler; serving a stored
/// response; and what responses do to the cookie store and the cache (executor).
extension TaskDriver {
    /// Prepares `request` and reports `loadPlanned` (or `startFailed`); with a stream
    /// body that must be fetched again first, asks the delegate for it.
    func begin(_ request: Request, needsStream: Bool, afterRedirect: Bool) {
        guard needsStream else { return plan(request) }
        let why = !afterRedirect
            ? "a streamed upload needs a body stream and the delegate gave none"
            : "the redirect needs the body again and the delegate gave no new stream"
        askNewBodyStream { stream in
            self.executor.execute {
                guard let stream else {
                    self.run(.event(.startFailed(PorterError(.requestBodyStreamExhausted, why, url: request.url))))
                    return
                }
                var withStream = request
                withStream.body = .stream(stream)
                self.plan(withStream)
            }
        }
    }

    private func plan(_ proposed: Request) {
        var request = proposed
        let config = session.configuration
        if case .background = config.kind {
            return run(.event(.startFailed(PorterError(.unsupportedConfiguration,
                "a background session runs download tasks and upload tasks from a file (porterd runs them); data, stream and in-memory upload tasks need a .default or .ephemeral session", url: request.url))))
        }
        // The one request check (a method that is not a token would smuggle a second
        // request): every load and every redirect, before any handler sees it.
        if let invalid = request.validationError {
            return run(.event(.startFailed(invalid)))
        }
        guard let scheme = request.url.scheme, !scheme.isEmpty else {
            return run(.event(.startFailed(PorterError(.unsupportedURL, "the URL has no scheme", url: request.url))))
        }
        guard let factory = TaskDriver.factory(for: request, in: config) else {
            let known = Set(config.registry.schemes + config.handlers.flatMap(\.schemes)).sorted()
            return run(.event(.startFailed(PorterError(.unsupportedURL,
                "no handler for scheme '\(scheme)'; registered schemes: \(known.isEmpty ? "none" : known.joined(separator: ", "))",
                url: request.url))))
        }
        for field in config.additionalHeaders where request.headerFields[field.name] == nil {
            request.headerFields.append(field)
        }
        if request.timeoutInterval <= 0 { request.timeoutInterval = config.timeoutIntervalForRequest }
        // The partition only keys the cache: a session without one does not pay for it.
        if config.responseCache != nil { request.cachePartition = config.cachePartition }
        applyCookies(to: &request)
        observation?.willLoad(&request)   // last: the observer sees (and adds to) the final headers
        currentRequest = request
        plannedFactory = factory

        // URLProtocol's two class methods: the handler's canonical form of the request is
        // what the cache is keyed by (for storing too), and a stored response answers only
        // a request the handler calls cache-equivalent to the one it was stored for.
        var lookup = CacheStep.Lookup(policy: .useProtocolCachePolicy, hit: nil)
        cacheKeyRequest = nil
        if let cache = config.responseCache {
            let key = factory.canonicalRequest(for: request)
            cacheKeyRequest = key
            lookup.policy = request.cachePolicy == .useProtocolCachePolicy ? config.requestCachePolicy : request.cachePolicy
            if lookup.policy != .reloadIgnoringLocalCacheData, let hit = cache.cachedResponse(for: key),
               factory.requestIsCacheEquivalent(key, Request(url: hit.response.url)) {
                // The policies that answer from the store whatever its age take what of it
                // answers this request (a stored part answers only a range inside it);
                // the others hand the handler all of it, to serve, revalidate or complete.
                if lookup.policy == .returnCacheDataElseLoad || lookup.policy == .returnCacheDataDontLoad {
                    lookup.hit = HTTPCacheRules.storedAnswer(for: request, hit)
                } else {
                    lookup.hit = hit
                    // A hit the handler would serve as it is is served without one.
                    lookup.served = factory.freshAnswer(for: request, cached: hit, configuration: config)
                }
            }
        }
        run(.event(.loadPlanned(request, lookup)))
    }

    /// Makes the handler for the current request and starts it.
    func load(_ request: Request, cachedResponse: CachedResponse?, paused: Bool, generation: UInt64) {
        guard let factory = plannedFactory else { return }
        var request = request
        // Written only when it differs: a write to a request shared with the machine
        // copies its storage.
        if let owner, request.priority != owner.priority { request.priority = owner.priority }
        logger.debug("start \(request) with \(factory.name)")
        let client = HandlerClient(driver: self, generation: generation,
                                   context: SessionContext(configuration: session.configuration, sessionIdentifier: session.identifier,
                                                           executor: executor))
        let made = factory.makeHandler(request: request, cachedResponse: cachedResponse, client: client)
        handlerClient?.detach()   // a handler this one replaces (its own was let go of already)
        handler = made
        handlerClient = client
        client.attach(made)
        made.startLoading()
        if paused { made.pauseDelivery() }
    }

    /// Serves a stored response through the machine, as a handler's reports.
    func serveCached(_ stored: CachedResponse, serving served: Response?, revalidated: Bool, generation gen: UInt64) {
        // The handler (if any) is done; it stays referenced until the task ends.
        handler?.stopLoading()
        var hit = stored
        var fetchType = "localCache"
        if let served {
            hit.response = served
            if revalidated {
                fetchType = "revalidated"
                // The refreshed head (and a new storage time) replaces the stored one.
                session.configuration.responseCache?.storeCachedResponse(HTTPCacheRules.refreshed(stored, head: served, now: Date()),
                                                                         for: cacheKeyRequest ?? currentRequest)
            }
        }
        // A Range request gets its range of what is stored (a 304 to a revalidation, or a
        // policy that serves the store, answers with all of it otherwise).
        if let (r, body) = HTTPCacheRules.rangeAnswer(for: currentRequest, hit) {
            hit.response = r
            hit.data = body
        }
        var fetch = TransactionMetrics(request: currentRequest, fetchType: fetchType)
        fetch.response = hit.response
        transactionMetrics.append(fetch)
        run(.event(.handler(generation: gen, .response(hit.response, .notAllowed))))
        if !hit.data.isEmpty, currentRequest.method.uppercased() != "HEAD" {   // HEAD answered from a stored GET
            hold(hit.data.count)
            run(.event(.handler(generation: gen, .data(hit.data))))
        }
        run(.event(.handler(generation: gen, .finish)))
    }

    // MARK: - the cookie step

    private var cookieStore: (any CookieStore)? {
        let config = session.configuration
        return config.httpShouldSetCookies ? config.cookieStore : nil
    }

    /// As the handlers of the URL's scheme declare (`ProtocolHandler.carriesCookies`).
    /// Takes the scheme, not the URL: `URL.scheme` parses it out again on every call.
    private func carriesCookies(scheme: String?) -> Bool {
        guard let scheme, !scheme.isEmpty else { return false }
        return session.configuration.carriesCookies(forScheme: scheme)
    }

    /// Each hop (the first request, every redirect) gets the cookies for its own URL.
    private func applyCookies(to request: inout Request) {
        guard cookiesAutomatic, let store = cookieStore, carriesCookies(scheme: request.scheme) else { return }
        let header = store.cookieHeader(for: request.url, mainDocumentURL: request.mainDocumentURL)
        // No cookie for the URL and no Cookie field to take away: nothing to write (a
        // write would copy the request's storage).
        if header == nil, request.headerFields[.cookie] == nil { return }
        _ = request.setValue(header, forHeader: "Cookie")
    }

    /// Set-Cookie of every response, the redirects' included.
    func storeCookies(from response: Response) {
        guard let store = cookieStore else { return }
        let headers = response.headerFields[values: .setCookie]
        guard !headers.isEmpty, carriesCookies(scheme: response.url.scheme) else { return }
        store.storeCookies(fromHeaders: headers, for: response.url, mainDocumentURL: currentRequest.mainDocumentURL)
    }

    // MARK: - cache invalidation (RFC 9111 §4.4)

    /// What `HTTPCacheRules.invalidated` names goes from the cache.
    func invalidateCache(after response: Response) {
        guard let cache = session.configuration.responseCache else { return }
        for url in HTTPCacheRules.invalidated(by: response, to: currentRequest) { cache.removeCachedResponse(for: Request(url: url)) }
    }
}
