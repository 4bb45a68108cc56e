import Foundation
import Porter
import PorterPlugins
import PorterTestSupport
import PorterTesting
import XCTest

/// The conformance kit passes Porter's own handlers and the example plugins, and catches
/// each kind of broken handler with the rule it breaks and the fix.
final class ConformanceTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap(loadPlugins: false)
        super.setUp()
    }

    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let buildDir = URL(fileURLWithPath: porterBinary).deletingLastPathComponent().path

    // MARK: the built-in handlers keep the contract

    func testDataAndFileHandlersPass() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("porter-conformance-\(getpid()).txt")
        try Data(repeating: 0x61, count: 200_000).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let data = HandlerConformance.check(DataHandler.self, url: URL(string: "data:text/plain;base64,SGVsbG8=")!)
        XCTAssertTrue(data.passed, data.description)
        let report = HandlerConformance.check(FileHandler.self, url: file)
        XCTAssertTrue(report.passed, report.description)
        XCTAssertTrue(report.scenarios.contains { $0.name == "pause-resume" && $0.outcome == "ok" }, report.description)
    }

    func testHTTPHandlerPassesWithRedirectsAndChallenges() throws {
        for path in ["/index.html", "/redirect/302", "/basic/", "/medium.bin"] {
            let report = HandlerConformance.check(HTTPHandler.self, url: URL(string: nginx.http + path)!)
            XCTAssertTrue(report.passed, report.description)
        }
    }

    func testGopherExamplePluginPassesInItsWorker() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("porter-conformance-gopher-\(getpid())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        try "Hello from gopher.\n".write(to: root.appendingPathComponent("welcome.txt"), atomically: true, encoding: .utf8)
        let (server, port) = try startReadyServer("/usr/bin/env", ["python3", Self.packageRoot.appendingPathComponent("scripts/gopherd.py").path,
                                                                     "--root", root.path])
        defer { server.terminate(); server.waitUntilExit() }
        XCTAssertGreaterThan(port, 0, "gopherd.py did not start")
        let registry = HandlerRegistry()
        let verdict = PluginLoader(registry: registry, isolation: .default).load(path: Self.buildDir + "/libGopherPlugin.so")
        let factory = try XCTUnwrap(registry.registrations.first?.factory, "\(verdict)")
        for path in ["/0/welcome.txt", "/1/"] {
            let report = HandlerConformance.check(factory: factory, request: Request(url: URL(string: "gopher://127.0.0.1:\(port)\(path)")!))
            XCTAssertTrue(report.passed, report.description)
        }
    }

    // MARK: broken handlers are caught, with the rule and the fix

    func testCatchesDataBeforeResponseAndADoubleEnd() {
        let report = ConformanceKit.run(factory: TypeHandlerFactory(SloppyHandler.self), url: URL(string: "sloppy://x/")!)
        XCTAssertFalse(report.passed)
        XCTAssertTrue(report.broke(.responseFirst), report.description)
        XCTAssertTrue(report.broke(.endsOnce), report.description)
        XCTAssertTrue(report.broke(.quietAfterEnd), report.description)
        XCTAssertTrue(report.description.contains("fix: report the response (did_receive_response) before the first didLoad"), report.description)
        XCTAssertFalse(report.broke(.ends))
    }

    func testCatchesALoadThatNeverEnds() {
        var options = ConformanceOptions()
        options.loadTimeout = 2   // the handler never ends: any wait would do
        let report = ConformanceKit.run(factory: TypeHandlerFactory(SilentHandler.self), url: URL(string: "silent://x/")!, options: options)
        XCTAssertTrue(report.broke(.ends), report.description)
        XCTAssertTrue(report.description.contains("FAIL [load] ends: every load ends"), report.description)
        XCTAssertTrue(report.description.contains("fix: report the end on every path"), report.description)
    }

    func testCatchesAPauseThatDeadlocksAndAStopThatDoesNot() {
        var options = ConformanceOptions()
        options.callTimeout = 3   // a deadlock never returns: any wait would do
        let report = ConformanceKit.run(factory: TypeHandlerFactory(DeadlockingHandler.self), url: URL(string: "stuck://x/")!, options: options)
        XCTAssertTrue(report.broke(.pauseReturns), report.description)
        XCTAssertTrue(report.description.contains("never take a lock in pause that the delivery thread holds"), report.description)
        XCTAssertTrue(report.broke(.quietAfterStop), report.description)
    }

    func testCatchesBadSchemesAndAnUnstableCanonicalForm() {
        let report = ConformanceKit.run(BadDeclarationHandler.self, url: URL(string: "bad-scheme://x/")!)
        XCTAssertTrue(report.broke(.schemesValid), report.description)
        XCTAssertTrue(report.broke(.canonicalStable), report.description)
    }

    /// The XCTest helper fails the test with the rule and the fix.
    func testXCTestHelperReportsEachBrokenRule() {
        captured = []
        let report = HandlerConformance.check(SloppyHandler.self, url: URL(string: "sloppy://x/")!)
        let failures = captured ?? []
        captured = nil
        XCTAssertEqual(failures.count, report.findings.count)
        XCTAssertTrue(failures.contains { $0.contains("SloppyHandler breaks the handler contract") && $0.contains("response-before-data") && $0.contains("fix:") },
                      failures.joined(separator: "\n"))
    }

    private var captured: [String]?
    override func recordFailure(withDescription description: String, inFile filePath: String, atLine lineNumber: Int, expected: Bool) {
        if captured != nil {
            captured?.append(description)
            return
        }
        super.recordFailure(withDescription: description, inFile: filePath, atLine: lineNumber, expected: expected)
    }
}

// MARK: - deliberately broken handlers

/// Data before the response, finishes twice, then more data.
final class SloppyHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["sloppy"] }
    let client: any ProtocolClient
    let url: URL
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) { self.client = client; url = request.url }
    func startLoading() {
        let client = self.client, url = self.url
        DispatchQueue.global().async {
            client.didLoad(Data("early".utf8))
            client.didReceive(Response(url: url, mimeType: "text/plain", expectedContentLength: 5), cacheStoragePolicy: .notAllowed)
            client.didFinishLoading()
            client.didFinishLoading()
            client.didLoad(Data("late".utf8))
        }
    }
    func stopLoading() {}
}

/// Never reports anything.
final class SilentHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["silent"] }
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {}
    func startLoading() {}
    func stopLoading() {}
}

/// Holds its lock while it calls the client, and takes it in pauseDelivery: a pause from
/// inside a client call deadlocks. Ignores stopLoading and keeps streaming.
final class DeadlockingHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["stuck"] }
    let client: any ProtocolClient
    let url: URL
    let lock = NSLock()
    var paused = false
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) { self.client = client; url = request.url }
    func startLoading() {
        let client = self.client, url = self.url
        Thread.detachNewThread {
            self.lock.lock()
            client.didReceive(Response(url: url, mimeType: "text/plain", expectedContentLength: -1), cacheStoragePolicy: .notAllowed)
            self.lock.unlock()
            for _ in 0..<400 {
                self.lock.lock()
                client.didLoad(Data(repeating: 0x61, count: 1000))
                self.lock.unlock()
                usleep(5_000)
            }
            client.didFinishLoading()
        }
    }
    func stopLoading() {}
    func pauseDelivery() { lock.lock(); paused = true; lock.unlock() }
}

/// Upper-case scheme; a canonical form that changes each time it is applied.
final class BadDeclarationHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["Bad-Scheme"] }
    static func canonicalRequest(for request: Request) -> Request {
        var r = request
        r.url = URL(string: request.url.absoluteString + "x")!
        return r
    }
    let client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) { self.client = client }
    func startLoading() { client.didFail(with: PorterError(.unsupportedURL, "nothing here")) }
    func stopLoading() {}
}
