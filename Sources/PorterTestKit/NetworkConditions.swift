import Foundation
import PorterCore

/// A bad network for tests, applied to a session configuration: latency, a bandwidth
/// cap, a connection that drops after a number of bytes, and no route at all — each
/// visible to the application exactly as the real thing would be (events, errors,
/// `taskIsWaitingForConnectivity`).
///
///     let network = NetworkConditions(latency: 0.2, bytesPerSecond: 64 << 10)
///     var configuration = SessionConfiguration.ephemeral
///     network.apply(to: &configuration)
///
/// Built on what sessions already have: the cap also sets `maximumBytesPerSecond` (so
/// libcurl's transfers are throttled at the socket, as with curl's --limit-rate), and the
/// handlers of the configuration are wrapped to pace what reaches the task, so the cap,
/// the latency and the drop hold for every scheme, a replayed HAR and plugins included.
/// `hasRoute = false` fails new loads with `.cannotConnectToHost` (ENETUNREACH), and
/// a session with `waitsForConnectivity` waits — asking this object instead of the
/// kernel — until `hasRoute` is true again, then loads.
public final class NetworkConditions: @unchecked Sendable {
    /// Added before the first report of each load (and of each redirect hop), in seconds.
    public let latency: TimeInterval
    /// At most this many body bytes per second reach each load's task; nil: no cap.
    public let bytesPerSecond: Int64?
    /// After this many body bytes, each load fails with `.networkConnectionLost`; nil: never.
    public let dropConnectionAfterBytes: Int64?
    /// The schemes whose loads the conditions apply to.
    public let schemes: Set<String>

    private let lock = NSLock()
    private var route: Bool
    private var waiters: [@Sendable () -> Void] = []

    public init(latency: TimeInterval = 0, bytesPerSecond: Int64? = nil, dropConnectionAfterBytes: Int64? = nil,
                hasRoute: Bool = true, schemes: Set<String> = ["http", "https"]) {
        self.latency = max(0, latency)
        self.bytesPerSecond = bytesPerSecond.map { max(1, $0) }
        self.dropConnectionAfterBytes = dropConnectionAfterBytes.map { max(0, $0) }
        self.route = hasRoute
        self.schemes = schemes
    }

    /// Whether the network is up. Setting it to true wakes the tasks that wait for
    /// connectivity.
    public var hasRoute: Bool {
        get { lock.withLock { route } }
        set {
            let wake: [@Sendable () -> Void] = lock.withLock {
                route = newValue
                guard newValue else { return [] }
                defer { waiters.removeAll() }
                return waiters
            }
            wake.forEach { $0() }
        }
    }

    /// Applies the conditions to sessions made from `configuration` from now on (apply
    /// them after every other handler change, as they wrap what is there).
    public func apply(to configuration: inout SessionConfiguration) {
        if let cap = bytesPerSecond {
            configuration.maximumBytesPerSecond = min(configuration.maximumBytesPerSecond ?? .max, cap)
        }
        configuration.routeOverride = RouteSwitch(conditions: self)
        let factory = InterposingFactory(name: "NetworkConditions", schemes: schemes, configuration: configuration) { [self] request, make, client, _ in
            if !self.hasRoute {
                return FailingHandler(error: PorterError(.cannotConnectToHost, "no route to the host (NetworkConditions.hasRoute is false)",
                                                         url: request.url, cause: .errno(ENETUNREACH)), client: client)
            }
            let paced = PacedClient(target: client, conditions: self, url: request.url)
            let handler = WrappingHandler(inner: make(request, paced))
            handler.onStop = { paced.stop() }
            return handler
        }
        factory.install(on: &configuration)
    }

    func routeAnswer() -> Bool { hasRoute }

    func notifyOnChange(_ body: @escaping @Sendable () -> Void) {
        let now: Bool = lock.withLock {
            if route { return true }
            waiters.append(body)
            return false
        }
        if now { body() }
    }
}

struct RouteSwitch: RouteOverride {
    let conditions: NetworkConditions
    func hasRoute(to url: URL) -> Bool? {
        guard conditions.schemes.contains(url.scheme?.lowercased() ?? "") else { return nil }
        return conditions.routeAnswer()
    }
    func notifyOnChange(_ body: @escaping @Sendable () -> Void) { conditions.notifyOnChange(body) }
}

/// Delays and paces what a handler reports, in order, on a queue of its own.
final class PacedClient: ForwardingClient, @unchecked Sendable {
    private let conditions: NetworkConditions
    private let url: URL
    private let queue = DispatchQueue(label: "porter.network-conditions")
    private let started = DispatchTime.now()
    private let lock = NSLock()
    private var delivered: Int64 = 0      // body bytes passed on (queue only)
    private var ended = false             // a failure was reported for a drop, or stopped

    init(target: any ProtocolClient, conditions: NetworkConditions, url: URL) {
        self.conditions = conditions
        self.url = url
        super.init(target: target)
    }

    func stop() { lock.withLock { ended = true } }
    private var isEnded: Bool { lock.withLock { ended } }

    /// Runs `body` on the queue, after the latency (the first report only waits it out).
    private func later(_ body: @escaping @Sendable () -> Void) {
        queue.async {
            let due = self.started + self.conditions.latency
            if DispatchTime.now() < due { Thread.sleep(forTimeInterval: Double((due.uptimeNanoseconds - DispatchTime.now().uptimeNanoseconds)) / 1e9) }
            guard !self.isEnded else { return }
            body()
        }
    }

    override func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy) {
        later { self.target.didReceive(response, cacheStoragePolicy: cacheStoragePolicy) }
    }
    override func didLoad(_ data: Data) {
        later { self.pass(data) }
    }
    private func pass(_ data: Data) {
        var chunk = data
        if let limit = conditions.dropConnectionAfterBytes, delivered + Int64(chunk.count) >= limit {
            let keep = Int(max(0, limit - delivered))
            if keep > 0 { send(chunk.prefix(keep)) }
            lock.withLock { ended = true }
            target.didFail(with: PorterError(.networkConnectionLost,
                "the connection was lost after \(limit) bytes (NetworkConditions.dropConnectionAfterBytes)", url: url,
                cause: .errno(ECONNRESET)))
            return
        }
        if let rate = conditions.bytesPerSecond {
            // Slices of about a tenth of a second each, every one due when the bytes before
            // it would have arrived at `rate`.
            let slice = max(1, Int(rate / 10))
            while !chunk.isEmpty, !isEnded {
                let part = chunk.prefix(slice)
                chunk = chunk.dropFirst(part.count)
                send(part)
                let due = started.uptimeNanoseconds + UInt64(conditions.latency * 1e9) + UInt64(Double(delivered) / Double(rate) * 1e9)
                let now = DispatchTime.now().uptimeNanoseconds
                if due > now { Thread.sleep(forTimeInterval: Double(due - now) / 1e9) }
            }
            return
        }
        send(chunk)
    }
    private func send(_ data: Data) {
        delivered += Int64(data.count)
        target.didLoad(Data(data))
    }
    override func wasRedirected(to request: Request, redirectResponse: Response) {
        later { self.target.wasRedirected(to: request, redirectResponse: redirectResponse) }
    }
    override func didFinishLoading() { later { self.target.didFinishLoading() } }
    override func didFail(with error: PorterError) { later { self.target.didFail(with: error) } }
    override func didReceive(_ challenge: AuthenticationChallenge) { later { self.target.didReceive(challenge) } }
    override func didCancel(_ challenge: AuthenticationChallenge) { later { self.target.didCancel(challenge) } }
    override func cachedResponseIsValid() { later { self.target.cachedResponseIsValid() } }
    override func cachedResponseIsValid(serving response: Response, revalidated: Bool) {
        later { self.target.cachedResponseIsValid(serving: response, revalidated: revalidated) }
    }
    override func didCollect(_ metrics: TransactionMetrics) { later { self.target.didCollect(metrics) } }
    override func didSendBodyData(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        later { self.target.didSendBodyData(bytesSent: bytesSent, totalBytesSent: totalBytesSent, totalBytesExpectedToSend: totalBytesExpectedToSend) }
    }
}
