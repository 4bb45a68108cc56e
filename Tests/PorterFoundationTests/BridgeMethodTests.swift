import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Porter
import PorterFoundation
import PorterTestSupport
import XCTest

/// A URLRequest whose httpMethod carries CR LF and a second request (issue 21, item 13):
/// brought over with `Request(URLRequest)` and loaded by a Porter session, it fails with
/// badURL and the recording server never receives the smuggled request (before the fix
/// it did).
final class BridgeMethodTests: XCTestCase {
    func testASmugglingHTTPMethodThroughTheBridgeIsRefused() async throws {
        Porter.bootstrap(loadPlugins: false)
        let server = try MisbehavingServer()
        defer { server.stop() }
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        let session = Session(configuration: c)

        var urlRequest = URLRequest(url: URL(string: server.base + "/record?id=bridge-bad")!)
        urlRequest.httpMethod = "GET /record?id=bridge-smuggler HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nDELETE /SMUGGLED"
        do {
            _ = try await session.data(for: Request(urlRequest))
            XCTFail("the smuggling method was sent")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .badURL, "\(e)")
            XCTAssertEqual(URLError(e).code, .badURL)
        }
        var fine = URLRequest(url: URL(string: server.base + "/record?id=bridge-good")!)
        fine.httpMethod = "GET"
        _ = try await session.data(for: Request(fine))
        let seen = server.waitForRecorded("id=bridge-good")
        XCTAssertTrue(seen.contains("id=bridge-good"), seen)
        XCTAssertFalse(seen.contains("SMUGGLED"), "the smuggled request arrived:\n\(seen)")
        XCTAssertFalse(seen.contains("bridge-bad"), seen)
        session.finishTasksAndInvalidate()
    }
}
