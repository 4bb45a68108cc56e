import Foundation
import Porter
import PorterTestSupport
import PorterTesting
import XCTest

/// Network conditions seen as the application sees them: errors, events, byte counts.
/// Durations are checked as lower bounds only (a loaded machine is slower, never faster).
final class NetworkConditionsTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap(loadPlugins: false)
        super.setUp()
    }

    private func server() throws -> NginxFixture { try XCTUnwrap(nginx, "nginx did not start") }

    private func session(_ conditions: NetworkConditions, _ tweak: (inout SessionConfiguration) -> Void = { _ in }) -> Session {
        var configuration = SessionConfiguration.ephemeral
        configuration.responseCache = nil
        tweak(&configuration)
        conditions.apply(to: &configuration)
        return Session(configuration: configuration)
    }

    /// A replayed 300 KiB body (no server at all) under a bandwidth cap and latency.
    private func replayed(_ size: Int) -> HARReplay {
        let body = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let entry = """
        {"startedDateTime":"2026-01-01T00:00:00.000Z","time":1,"cache":{},
         "timings":{"blocked":-1,"dns":-1,"connect":-1,"ssl":-1,"send":0,"wait":0,"receive":0},
         "request":{"method":"GET","url":"http://conditions.test/blob","httpVersion":"HTTP/1.1","cookies":[],"headers":[],
                    "queryString":[],"headersSize":-1,"bodySize":0},
         "response":{"status":200,"statusText":"OK","httpVersion":"HTTP/1.1","cookies":[],"headers":[],"redirectURL":"",
                     "headersSize":-1,"bodySize":\(size),
                     "content":{"size":\(size),"mimeType":"application/octet-stream","encoding":"base64","text":"\(body.base64EncodedString())"}}}
        """
        let har = try! JSONDecoder().decode(HAR.self, from: Data("{\"log\":{\"version\":\"1.2\",\"creator\":{\"name\":\"t\",\"version\":\"1\"},\"entries\":[\(entry)]}}".utf8))
        return HARReplay(har)
    }

    func testLatencyDelaysTheResponseOfEveryLoad() async throws {
        let conditions = NetworkConditions(latency: 0.4)
        let s = session(conditions) { replayed(10).attach(to: &$0) }
        let started = Date()
        var responseAt: Date?
        for try await update in s.updates(for: Request(url: URL(string: "http://conditions.test/blob")!)) {
            if case .response = update { responseAt = Date() }
        }
        let elapsed = try XCTUnwrap(responseAt).timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(elapsed, 0.4, "the response came before the latency had passed")
    }

    func testBandwidthCapPacesTheBody() async throws {
        // 300 KiB at 100 KiB/s: the body arrives in many pieces over at least ~2 s.
        let size = 300 << 10
        let conditions = NetworkConditions(bytesPerSecond: 100 << 10, schemes: ["http"])
        let s = session(conditions) { replayed(size).attach(to: &$0) }
        let started = Date()
        var pieces = 0, bytes = 0
        for try await update in s.updates(for: Request(url: URL(string: "http://conditions.test/blob")!)) {
            if case .data(let d) = update { pieces += 1; bytes += d.count }
        }
        XCTAssertEqual(bytes, size)
        XCTAssertGreaterThanOrEqual(pieces, 10, "the body was not paced in slices")
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 1.9)
    }

    func testBandwidthCapAlsoThrottlesLibcurl() throws {
        var configuration = SessionConfiguration.ephemeral
        NetworkConditions(bytesPerSecond: 64 << 10).apply(to: &configuration)
        XCTAssertEqual(configuration.maximumBytesPerSecond, 64 << 10)
    }

    func testConnectionDropsAfterNBytes() async throws {
        let nginx = try server()
        let conditions = NetworkConditions(dropConnectionAfterBytes: 100_000)
        let s = session(conditions)
        var bytes = 0
        do {
            for try await update in s.updates(for: Request(url: URL(string: nginx.http + "/medium.bin")!)) {
                if case .data(let d) = update { bytes += d.count }
            }
            XCTFail("the load did not fail")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .networkConnectionLost, "\(e)")
        }
        XCTAssertEqual(bytes, 100_000, "exactly the bytes before the drop reach the task")
    }

    func testNoRouteFailsAsTheNetworkWould() async throws {
        let nginx = try server()
        let conditions = NetworkConditions(hasRoute: false)
        do {
            _ = try await session(conditions).data(from: URL(string: nginx.http + "/index.html")!)
            XCTFail("loaded with no route")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotConnectToHost)
            XCTAssertEqual(e.cause?.code, Int(ENETUNREACH))
        }
    }

    /// `waitsForConnectivity`: the task says it waits, and loads once the route is back.
    func testWaitsForConnectivityUntilTheRouteComesBack() async throws {
        let nginx = try server()
        let conditions = NetworkConditions(hasRoute: false)
        let s = session(conditions) { $0.waitsForConnectivity = true }
        var waited = false
        var body = Data()
        for try await update in s.updates(for: Request(url: URL(string: nginx.http + "/index.html")!)) {
            switch update {
            case .waitingForConnectivity:
                waited = true
                conditions.hasRoute = true
            case .data(let d): body.append(d)
            default: break
            }
        }
        XCTAssertTrue(waited, "the task never reported waiting for connectivity")
        XCTAssertEqual(String(decoding: body, as: UTF8.self), "hello from nginx\n")
    }
}
