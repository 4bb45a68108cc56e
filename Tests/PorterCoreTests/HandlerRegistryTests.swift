import XCTest
@testable import PorterCore

final class HandlerRegistryTests: XCTestCase {
    final class A: ProtocolHandler {
        class var schemes: Set<String> { ["x"] }
        init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {}
        func startLoading() {}
        func stopLoading() {}
    }
    final class B: ProtocolHandler {
        static var schemes: Set<String> { ["x", "Y"] }
        static func canHandle(_ request: Request) -> Bool { request.url.host != "only-a" }
        init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {}
        func startLoading() {}
        func stopLoading() {}
    }

    private func req(_ s: String) -> Request { Request(url: URL(string: s)!) }

    func testMostRecentRegistrationThatCanHandleWins() {
        let r = HandlerRegistry()
        XCTAssertNil(r.factory(for: req("x://h")))
        let a = r.register(A.self)
        XCTAssertEqual(r.factory(for: req("x://h"))?.name, "A")
        let b = r.register(B.self, origin: .plugin(path: "/p/b.so"), version: "2.1")
        XCTAssertEqual(r.factory(for: req("x://h"))?.name, "B")
        XCTAssertEqual(r.factory(for: req("x://only-a"))?.name, "A", "canHandle filters candidates")
        XCTAssertEqual(r.factory(for: req("Y://h"))?.name, "B", "schemes are case-insensitive")
        XCTAssertEqual(r.schemes, ["x", "y"])
        XCTAssertTrue(r.hasHandler(forScheme: "Y"))
        let listing = r.registrations
        XCTAssertEqual(listing.map(\.name), ["A", "B"])
        XCTAssertEqual(listing[1].origin, .plugin(path: "/p/b.so"))
        XCTAssertEqual(listing[1].version, "2.1")
        XCTAssertEqual(listing[1].schemes, ["x", "y"])
        XCTAssertTrue(r.unregister(b))
        XCTAssertFalse(r.unregister(b))
        XCTAssertEqual(r.factory(for: req("x://h"))?.name, "A")
        XCTAssertFalse(r.hasHandler(forScheme: "y"))
        r.unregister(A.self)
        XCTAssertNil(r.factory(for: req("x://h")))
        _ = a
    }

    func testSafeFromManyThreads() {
        let r = HandlerRegistry()
        r.register(A.self)
        let x = Request(url: URL(string: "x://h")!)
        DispatchQueue.concurrentPerform(iterations: 2000) { i in
            if i % 10 == 0 {
                let id = r.register(B.self)
                r.unregister(id)
            } else {
                XCTAssertNotNil(r.factory(for: x))
            }
        }
        XCTAssertEqual(r.registrations.count, 1)
    }

    func testPerformOnceRunsOnce() {
        let r = HandlerRegistry()
        let count = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 100) { _ in r.performOnce(key: "k") { count.withLock { $0 += 1 } } }
        XCTAssertEqual(count.current, 1)
    }

    func testProxyConfigurationFromEnvironment() {
        let p = ProxyConfiguration.fromEnvironment([
            "http_proxy": "proxy:3128", "HTTPS_PROXY": "https://secure:443", "ALL_PROXY": "socks5h://s:1080",
            "no_proxy": "localhost, .internal.example,10.0.0.1",
        ])
        XCTAssertEqual(p.proxy(for: URL(string: "http://a.com/")!)?.absoluteString, "http://proxy:3128")
        XCTAssertEqual(p.proxy(for: URL(string: "https://a.com/")!)?.absoluteString, "https://secure:443")
        XCTAssertEqual(p.proxy(for: URL(string: "ftp://a.com/")!)?.absoluteString, "socks5h://s:1080")
        XCTAssertNil(p.proxy(for: URL(string: "http://localhost/")!))
        XCTAssertNil(p.proxy(for: URL(string: "http://x.internal.example/")!))
        XCTAssertNil(p.proxy(for: URL(string: "http://internal.example/")!))
        XCTAssertNil(p.proxy(for: URL(string: "http://10.0.0.1/")!))
        let upper = ProxyConfiguration.fromEnvironment(["HTTP_PROXY": "evil:1"])
        XCTAssertNil(upper.httpProxy, "upper-case HTTP_PROXY is ignored, as curl does (CGI httpoxy)")
        XCTAssertNil(ProxyConfiguration.fromEnvironment(["no_proxy": "*", "all_proxy": "p:1"]).proxy(for: URL(string: "http://a/")!))
    }

    func testErrorsDescribeThemselves() {
        let e = PorterError(.fileDoesNotExist, "cannot open", url: URL(string: "file:///x"), cause: .errno(ENOENT))
        XCTAssertEqual(e.code.rawValue, 17)
        XCTAssertTrue(e.description.contains("fileDoesNotExist (17): cannot open [file:///x] (errno 2:"), e.description)
        XCTAssertEqual(PorterError.fromErrno(EACCES, url: nil, doing: "x").code, .noPermissionsToReadFile)
        XCTAssertEqual(PorterError.fromErrno(EISDIR, url: nil, doing: "x").code, .fileIsDirectory)
        XCTAssertEqual(Set(PorterError.Code.allCases.map(\.rawValue)).count, PorterError.Code.allCases.count)
        XCTAssertEqual(Credential(user: "u", password: "hunter2").description, "Credential(user: u)", "never prints a password")
    }
}
