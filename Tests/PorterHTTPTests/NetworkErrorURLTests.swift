import XCTest
import PorterTestSupport
@testable import Porter

/// A program's shape: many loads on one session, in parallel and in sequence, to
/// different URLs of which many fail (refused port, reset mid-body, bad head, bad
/// encoding, TLS to a plain port, h2 to nginx). Every error names its own task's URL,
/// and its message names no other task's.
final class NetworkErrorURLTests: NginxTestCase {
    nonisolated(unsafe) static var server: Process?
    nonisolated(unsafe) static var port = 0

    override class func setUp() {
        Porter.bootstrap()
        super.setUp()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("misbehave.py").path
        if let (p, n) = try? startReadyServer("/usr/bin/env", ["python3", script]) {
            port = n
            server = p
        }
    }
    override class func tearDown() {
        server?.terminate()
        server?.waitUntilExit()
        super.tearDown()
    }

    override func setUpWithError() throws {
        guard Self.port > 0 else { throw NginxFixture.Failure.setup("python3 misbehave.py did not start") }
        try super.setUpWithError()
    }

    func testEachErrorNamesItsOwnURL() async throws {
        let refused = try NginxFixture.freePort()
        let bad = "http://127.0.0.1:\(Self.port)"
        let targets: [String] = [
            nginx.http + "/index.html?a", "http://127.0.0.1:\(refused)/refused?b", bad + "/reset?c", nginx.https + "/index.html?d",
            bad + "/malformed?e", bad + "/truncated?g", nginx.https + "/text.txt?h",
            bad + "/bad-version?i", bad + "/empty?j", nginx.http + "/redirect/302?k", bad + "/bad-gzip?l", bad + "/half-gzip?m",
            bad + "/huge-header?n", "https://127.0.0.1:\(nginx.httpPort)/tls-to-plain?o",
        ]
        for trust in [false, true] {
            var config = SessionConfiguration.ephemeral
            config.proxies = .none
            if trust { config.caCertificateFile = nginx.caFile }
            let session = Session(configuration: config)
            for round in 0..<2 {
                await withTaskGroup(of: String?.self) { group in
                    for (i, t) in targets.enumerated() {
                        let url = URL(string: t + "&r\(round)\(trust)\(i)")!
                        group.addTask {
                            do { _ = try await session.data(from: url); return nil } catch let e as PorterError {
                                let own = e.url?.absoluteString == url.absoluteString
                                var others = false
                                for o in targets where !url.absoluteString.hasPrefix(o) {
                                    let q = String(o.split(separator: "?").last ?? "")
                                    if e.description.contains("?" + q + "&") || e.message.contains(o) { others = true }
                                }
                                if !own || others { return "\(url): \(e.url?.absoluteString ?? "nil") \(e) cause=\(String(describing: e.cause))" }
                                return nil
                            } catch { return "\(url): \(error)" }
                        }
                    }
                    for await r in group { if let r { XCTFail("parallel: \(r)") } }
                }
                for (i, t) in targets.enumerated() {
                    let url = URL(string: t + "&s\(round)\(trust)\(i)")!
                    do { _ = try await session.data(from: url) } catch let e as PorterError {
                        if e.url?.absoluteString != url.absoluteString || !e.description.contains("&s\(round)\(trust)\(i)") && e.description.contains("&") {
                            XCTFail("sequence: \(url): \(e)")
                        }
                    }
                }
            }
        }
    }
}
