import XCTest
@testable import PorterCore
@testable import PorterSession

/// liar://host/<step> — a handler that names the wrong URL in its errors: the URL of the
/// first load it ever served (an earlier, unrelated request). "hop" redirects to
/// liar://<host>/fail first.
final class LyingURLHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["liar"] }
    nonisolated(unsafe) static var first: URL?
    static let lock = NSLock()
    let request: Request
    let client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }
    func startLoading() {
        let earlier = Self.lock.withLock { () -> URL in
            if Self.first == nil { Self.first = request.url }
            return Self.first ?? request.url
        }
        if request.url.lastPathComponent == "hop", let next = URL(string: "liar://\(request.url.host ?? "h")/fail") {
            var redirect = okResponse(request.url, length: 0)
            redirect.statusCode = 302
            var r = request
            r.url = next
            client.wasRedirected(to: r, redirectResponse: redirect)
            return
        }
        client.didFail(with: PorterError(.cannotConnectToHost, "refused", url: earlier))
    }
    func stopLoading() {}
}

/// An error carries its own task's URL — the URL of the hop that failed — whatever the
/// handler that reported it put there.
final class ErrorURLTests: XCTestCase {
    func testEveryErrorNamesItsOwnTasksHop() async throws {
        var config = testConfiguration()
        config.prependHandler(LyingURLHandler.self)
        let session = Session(configuration: config)
        // The handler's first load fixes the URL it will name from then on.
        _ = try? await session.data(from: URL(string: "liar://earlier/fail")!)
        for i in 0..<20 {
            let own = URL(string: "liar://task\(i)/fail")!
            do {
                _ = try await session.data(from: own)
                XCTFail("liar:// always fails")
            } catch let e as PorterError {
                XCTAssertEqual(e.url, own, "task \(i)'s error names \(e.url?.absoluteString ?? "nil")")
            }
        }
        // After a redirect, the hop that failed.
        let redirected = Completion<PorterError?>()
        let task = session.dataTask(with: URL(string: "liar://redirected/hop")!) { _, _, e in redirected.fulfil(e) }
        task.resume()
        let e = try XCTUnwrap(redirected.wait(10) ?? nil)
        XCTAssertEqual(e.url?.absoluteString, "liar://redirected/fail")
        XCTAssertEqual(task.error?.url?.absoluteString, "liar://redirected/fail")
        session.finishTasksAndInvalidate()
    }
}
