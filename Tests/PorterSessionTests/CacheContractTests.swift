import Foundation
import PorterTestSupport
import HTTPTypes
@testable import PorterCore
@testable import PorterSession
import Porter
import XCTest

/// A handler whose canonical form drops the query, and for which host "never" is never
/// cache-equivalent: each load says which load number produced its body.
final class CanonicalHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["canon"] }
    static let loads = Locked(0)
    let request: Request
    let cached: CachedResponse?
    let client: any ProtocolClient

    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.cached = cachedResponse
        self.client = client
    }

    static func canonicalRequest(for request: Request) -> Request {
        var r = request
        var parts = URLComponents(url: r.url, resolvingAgainstBaseURL: false)
        parts?.query = nil
        if let url = parts?.url { r.url = url }
        return r
    }

    static func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool {
        a.url.host != "never" && canonicalRequest(for: a).url == canonicalRequest(for: b).url
    }

    func startLoading() {
        if cached != nil {
            client.cachedResponseIsValid()
            return
        }
        let n = Self.loads.withLock { n -> Int in n += 1; return n }
        let body = Data("load \(n)".utf8)
        var fields = HTTPFields()
        fields[.cacheControl] = "max-age=600"
        let r = Response(url: request.url, mimeType: "text/plain", expectedContentLength: Int64(body.count), statusCode: 200,
                         headerFields: fields)
        client.didReceive(r, cacheStoragePolicy: .allowed)
        client.didLoad(body)
        client.didFinishLoading()
    }

    func stopLoading() {}
}

/// A handler whose type answers a fresh hit itself (`freshAnswer`): loads of "fresh://h/…"
/// are answered as they are stored, with an "X-Served: fresh" head, without a handler;
/// "fresh://stale/…" are not (a handler is made and handed the stored response).
final class FreshAnswerHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["fresh"] }
    static let made = Locked(0)
    let request: Request
    let cached: CachedResponse?
    let client: any ProtocolClient

    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.cached = cachedResponse
        self.client = client
        Self.made.withLock { $0 += 1 }
    }

    static func freshAnswer(for request: Request, cached: CachedResponse, configuration: SessionConfiguration) -> Response? {
        guard request.url.host != "stale" else { return nil }
        var head = cached.response
        head.headerFields[HTTPField.Name("X-Served")!] = "fresh"
        return head
    }

    func startLoading() {
        if cached != nil {
            client.cachedResponseIsValid()
            return
        }
        let body = Data("stored body".utf8)
        var fields = HTTPFields()
        fields[.cacheControl] = "max-age=600"
        let r = Response(url: request.url, mimeType: "text/plain", expectedContentLength: Int64(body.count), statusCode: 200,
                         headerFields: fields)
        client.didReceive(r, cacheStoragePolicy: .allowed)
        client.didLoad(body)
        client.didFinishLoading()
    }

    func stopLoading() {}
}

/// URLProtocol's two class methods are part of the real contract: the cache is keyed by
/// the handler's canonical request, for storing as for looking up, and a stored response
/// answers only a request the handler calls cache-equivalent.
final class CacheContractTests: XCTestCase {
    /// The stores `.default` and `.ephemeral` configurations get come from the `Porter` module.
    override class func setUp() { Porter.installDefaultStores() }

    func testCanonicalRequestKeysTheCacheAndEquivalenceGuardsIt() async throws {
        var config = SessionConfiguration.ephemeral
        config.handlers = [TypeHandlerFactory(CanonicalHandler.self)]
        config.responseCache = HTTPCache()
        let session = Session(configuration: config)
        func body(_ url: String) async throws -> String {
            String(decoding: try await session.data(from: URL(string: url)!).0, as: UTF8.self)
        }
        let first = try await body("canon://h/a?x=1")
        let second = try await body("canon://h/a?x=2")
        XCTAssertEqual(second, first, "the canonical request (no query) is the key")
        let never1 = try await body("canon://never/a")
        let never2 = try await body("canon://never/a")
        XCTAssertNotEqual(never1, never2, "not cache-equivalent: never served from the cache")
    }

    /// A hit the handler type says it would serve as it is is served without making a
    /// handler, with the head it named, through the task's usual reports (the delegate's
    /// metrics say "localCache"); one it declines gets a handler holding the stored response.
    func testAFreshAnswerIsServedWithoutAHandler() async throws {
        var config = SessionConfiguration.ephemeral
        config.handlers = [TypeHandlerFactory(FreshAnswerHandler.self)]
        config.responseCache = HTTPCache()
        let metrics = MetricsRecorder()
        let session = Session(configuration: config, delegate: metrics)
        for host in ["h", "stale"] {
            let url = URL(string: "fresh://\(host)/a")!
            let before = FreshAnswerHandler.made.withLock { $0 }
            let (first, firstResponse) = try await session.data(from: url)
            XCTAssertEqual(FreshAnswerHandler.made.withLock { $0 }, before + 1, "the first load needs a handler")
            XCTAssertNil(firstResponse.value(forHeader: "X-Served"))
            let (second, response) = try await session.data(from: url)
            XCTAssertEqual(second, first)
            XCTAssertEqual(String(decoding: second, as: UTF8.self), "stored body")
            if host == "h" {
                XCTAssertEqual(FreshAnswerHandler.made.withLock { $0 }, before + 1, "a fresh answer made a handler")
                XCTAssertEqual(response.value(forHeader: "X-Served"), "fresh")
            } else {
                XCTAssertEqual(FreshAnswerHandler.made.withLock { $0 }, before + 2, "a declined answer made no handler")
                XCTAssertNil(response.value(forHeader: "X-Served"))
            }
            XCTAssertTrue(eventually(60) { metrics.fetchTypes.count == 2 })
            XCTAssertEqual(metrics.take().last, ["localCache"])
        }
    }
}

/// The fetch types of each task's metrics, in the order tasks finished.
final class MetricsRecorder: TaskDelegate, @unchecked Sendable {
    private let all = Locked([[String]]())
    func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
        all.withLock { $0.append(metrics.transactionMetrics.map(\.fetchType)) }
    }
    var fetchTypes: [[String]] { all.withLock { $0 } }
    func take() -> [[String]] { all.withLock { t in defer { t = [] }; return t } }
}
