import XCTest
import PorterTestSupport
@testable import Porter
@testable import PorterCurl

/// `SessionTask.priority` orders foreground work: the loads that wait for a connection
/// to their host start highest priority first, and an HTTP/2 load's stream weight says it.
final class PriorityTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap()
        super.setUp()
    }


    /// Signals once the blocking load has its first bytes (it holds the one connection).
    private final class FirstBytes: DataDelegate, @unchecked Sendable {
        let arrived: XCTestExpectation
        init(_ e: XCTestExpectation) { arrived = e }
        private let once = Locked(false)
        func dataTask(_ task: DataTask, didReceive data: Data) {
            if once.withLock({ let first = !$0; $0 = true; return first }) { arrived.fulfill() }
        }
    }

    /// One connection per host over HTTP/1.1, busy: a low-priority load resumed first and
    /// three high-priority ones after it all wait; once the connection is free the high
    /// ones go first (in the order they came), then the low one. libcurl alone starts
    /// waiting transfers first come, first served: the low one went first.
    func testWaitingLoadsStartHighestPriorityFirst() async throws {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.responseCache = nil
        c.httpMaximumConnectionsPerHost = 1
        let session = Session(configuration: c)
        let loop = CurlLoop.loop(for: session.configuration)

        let busy = expectation(description: "the connection is busy")
        let blocker = session.dataTask(with: Request(url: URL(string: nginx.http + "/slow")!), delegate: FirstBytes(busy))
        blocker.resume()
        await fulfillment(of: [busy], timeout: 60)

        let order = Locked<[String]>([])
        var done: [XCTestExpectation] = []
        for (name, priority) in [("low", Float(0.1)), ("high1", 0.9), ("high2", 0.9), ("high3", 1.0)] {
            let finished = expectation(description: name)
            done.append(finished)
            let task = session.dataTask(with: URL(string: nginx.http + "/headers?\(name)")!) { _, _, error in
                order.withLock { $0.append(error == nil ? name : "\(name): \(error!)") }
                finished.fulfill()
            }
            task.priority = priority
            task.resume()
        }
        // All four reached the loop (waiting for the connection) before it frees up.
        _ = await eventuallyAsync { loop.transferCount().running + loop.transferCount().waiting >= 5 }
        XCTAssertEqual(loop.transferCount().waiting, 4, "the four wait in the loop, not in libcurl")
        blocker.cancel()
        await fulfillment(of: done, timeout: 60)
        XCTAssertEqual(order.current, ["high3", "high1", "high2", "low"])
    }

    func testPriorityIsTheStreamWeight() throws {
        XCTAssertEqual(CurlOptions.streamWeight(forPriority: 0), 1)
        XCTAssertEqual(CurlOptions.streamWeight(forPriority: 0.5), 16, "the default is HTTP/2's default weight")
        XCTAssertEqual(CurlOptions.streamWeight(forPriority: 1), 256)
        XCTAssertEqual(CurlOptions.streamWeight(forPriority: .nan), 16)
        XCTAssertEqual(CurlOptions.streamWeight(forPriority: 7), 256)
        // The option builder sets it on the handle, and libcurl takes it.
        var request = Request(url: URL(string: nginx.https + "/index.html")!)
        request.priority = 1
        let t = try CurlTransfer(loop: CurlLoop.shared)
        CurlOptions.apply(to: t, request: request, configuration: .ephemeral, protocols: "http,https")
        XCTAssertEqual(t.streamWeight, 256)
        XCTAssertNil(t.queueHost, "https with HTTP/2 on may multiplex: it never waits in the loop")
        var h1 = SessionConfiguration.ephemeral
        h1.http2Enabled = false
        let t1 = try CurlTransfer(loop: CurlLoop.shared)
        CurlOptions.apply(to: t1, request: request, configuration: h1, protocols: "http,https")
        XCTAssertNotNil(t1.queueHost)
    }

    /// The per-host queue's key: scheme, host and port as the URL writes them, without
    /// user information, path, query or fragment; loads of one host share it, another
    /// port or scheme does not.
    func testQueueKeyIsTheURLsOrigin() throws {
        var h1 = SessionConfiguration.ephemeral
        h1.http2Enabled = false
        func key(_ text: String) throws -> String? {
            let t = try CurlTransfer(loop: CurlLoop.shared)
            CurlOptions.apply(to: t, request: Request(url: URL(string: text)!), configuration: h1, protocols: "http,https")
            return t.queueHost
        }
        XCTAssertEqual(try key("http://127.0.0.1:8080/a/b?c=1#d"), "http://127.0.0.1:8080")
        XCTAssertEqual(try key("http://u:p@127.0.0.1:8080/x"), "http://127.0.0.1:8080")
        XCTAssertEqual(try key("HTTPS://example.com"), "https://example.com")
        XCTAssertEqual(try key("http://[::1]:81/"), "http://[::1]:81")
        XCTAssertEqual(try key("http://127.0.0.1:8080/one"), try key("http://127.0.0.1:8080/two?x"))
        XCTAssertNotEqual(try key("http://127.0.0.1:8080/"), try key("http://127.0.0.1:8081/"))
        XCTAssertNotEqual(try key("http://127.0.0.1:8080/"), try key("https://127.0.0.1:8080/"))
    }

    /// The same through a session: a task's priority reaches its handler's request.
    func testATasksPriorityReachesItsHandler() async throws {
        var c = SessionConfiguration.ephemeral
        c.prependHandler(PrioritySeen.self)
        let session = Session(configuration: c)
        for p in [Float(0.5), 0.25, 1] {
            let done = expectation(description: "\(p)")
            let task = session.dataTask(with: URL(string: "prio://x/")!) { _, _, _ in done.fulfill() }
            task.priority = p
            task.resume()
            await fulfillment(of: [done], timeout: 30)
        }
        XCTAssertEqual(PrioritySeen.priorities.current, [0.5, 0.25, 1])
    }

    /// The queue alone: highest priority first, first come among equals, a cancelled
    /// waiting load leaves no trace, no limit admits everything.
    func testHostQueueOrder() {
        var q = HostQueue<Int>(limit: 1)
        XCTAssertTrue(q.arrive(1, host: "a", priority: 0.5))
        XCTAssertTrue(q.arrive(2, host: "b", priority: 0.5), "another host has its own limit")
        XCTAssertFalse(q.arrive(3, host: "a", priority: 0.1))
        XCTAssertFalse(q.arrive(4, host: "a", priority: 0.9))
        XCTAssertFalse(q.arrive(5, host: "a", priority: 0.9))
        XCTAssertFalse(q.arrive(6, host: "a", priority: 0.5))
        XCTAssertEqual(q.leave(5), nil, "a waiting load that is cancelled starts nothing")
        XCTAssertEqual(q.waitingCount, 3)
        XCTAssertEqual(q.leave(1), 4)
        XCTAssertEqual(q.leave(4), 6)
        XCTAssertEqual(q.leave(6), 3)
        XCTAssertEqual(q.leave(3), nil)
        XCTAssertEqual(q.leave(2), nil)
        XCTAssertEqual(q.waitingCount, 0)
        XCTAssertTrue(q.arrive(7, host: "a", priority: 0.5), "a host whose loads all left starts afresh")
        XCTAssertFalse(q.arrive(8, host: "a", priority: 0.5))
        XCTAssertEqual(q.leave(7), 8)
        var open = HostQueue<Int>(limit: 0)
        XCTAssertTrue((0..<100).allSatisfy { open.arrive($0, host: "a", priority: 0) })
    }
}

/// Records the priority each load's request carries.
private final class PrioritySeen: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["prio"] }
    static let priorities = Locked<[Float]>([])
    let request: Request, client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request; self.client = client
    }
    func startLoading() {
        PrioritySeen.priorities.withLock { $0.append(request.priority) }
        client.didReceive(Response(url: request.url, mimeType: "text/plain", expectedContentLength: 0), cacheStoragePolicy: .notAllowed)
        client.didFinishLoading()
    }
    func stopLoading() {}
}
