import Foundation
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
}
