import Foundation
import PorterTestSupport
import XCTest
@testable import PorterCore
@testable import PorterSession
import Porter

/// A handler's client holds the task's driver and the handler strongly (weak references
/// made every retain of them take the runtime's slow path); the driver breaks that cycle
/// when it lets go of the handler. Once a task has ended — finished, cancelled mid-load or
/// redirected past a handler — nothing of its loads stays alive.
final class HandlerLifetimeTests: XCTestCase {
    override class func setUp() { Porter.installDefaultStores() }

    private func waitUntilFreed(_ what: String, file: StaticString = #filePath, line: UInt = #line) {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if LifetimeHandler.live.withLock({ $0.allSatisfy { $0.handler == nil && $0.client == nil } }) { return }
            Thread.sleep(forTimeInterval: 0.01)
        }
        let left = LifetimeHandler.live.withLock { $0.filter { $0.handler != nil || $0.client != nil }.count }
        XCTFail("\(what): \(left) handler(s) or client(s) still alive", file: file, line: line)
    }

    private func session() -> Session {
        var config = SessionConfiguration.ephemeral
        config.prependHandler(LifetimeHandler.self)
        return Session(configuration: config)
    }

    func testFinishedCancelledAndRedirectedLoadsAreFreed() async throws {
        LifetimeHandler.live.withLock { $0.removeAll() }
        let s = session()
        // Finished.
        _ = try await s.data(from: URL(string: "lifetime://h/finish")!)
        // Redirected once (the first handler is replaced), then finished.
        _ = try await s.data(from: URL(string: "lifetime://h/redirect")!)
        // Cancelled while its handler waits.
        let done = expectation(description: "cancelled")
        let task = s.dataTask(with: URL(string: "lifetime://h/wait")!) { _, _, error in
            XCTAssertEqual(error?.code, .cancelled)
            done.fulfill()
        }
        task.resume()
        let started = Date().addingTimeInterval(30)
        while LifetimeHandler.live.withLock({ $0.count }) < 4, Date() < started { try await Task.sleep(nanoseconds: 10_000_000) }
        task.cancel()
        await fulfillment(of: [done], timeout: 30)
        XCTAssertEqual(LifetimeHandler.live.withLock { $0.count }, 4, "one handler per load")
        waitUntilFreed("after the loads ended")
    }
}

private final class LifetimeHandler: ProtocolHandler, @unchecked Sendable {
    struct Seen {
        weak var handler: LifetimeHandler?
        weak var client: AnyObject?
    }
    static var schemes: Set<String> { ["lifetime"] }
    static let live = Locked<[Seen]>([])
    let request: Request, client: any ProtocolClient

    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }

    func startLoading() {
        LifetimeHandler.live.withLock { $0.append(Seen(handler: self, client: client as AnyObject)) }
        let url = request.url
        switch url.path {
        case "/redirect":
            var next = Request(url: URL(string: "lifetime://h/finish")!)
            next.method = request.method
            client.wasRedirected(to: next, redirectResponse: Response(url: url, mimeType: nil, expectedContentLength: 0, statusCode: 302,
                                                                     headerFields: [.location: "lifetime://h/finish"]))
        case "/wait":
            break   // until cancelled
        default:
            client.didReceive(Response(url: url, mimeType: "text/plain", expectedContentLength: 2), cacheStoragePolicy: .notAllowed)
            client.didLoad(Data("ok".utf8))
            client.didFinishLoading()
        }
    }

    func stopLoading() {}
}
