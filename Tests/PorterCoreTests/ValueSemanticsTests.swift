import Dispatch
import Foundation
import HTTPTypes
import Logging
import XCTest
@testable import PorterCore

/// `Request`, `Response` and `SessionConfiguration` share one storage box between copies
/// (copy-on-write). Whatever the box does, they must behave as plain structs: a change
/// to a copy never shows in the value it was copied from, nor the other way round, for
/// every group of stored properties, and copies made and changed on many threads at
/// once stay independent.
final class ValueSemanticsTests: XCTestCase {
    /// Copies `base`, changes the copy with `change`, and checks that `read` of the
    /// original is what it was and `read` of the copy is not; then the same with the
    /// roles swapped (the original changed after a copy was taken).
    private func assertIndependent<T, V: Equatable>(_ base: T, _ group: String, read: (T) -> V, change: (inout T) -> Void,
                                                   file: StaticString = #filePath, line: UInt = #line) {
        let before = read(base)
        var copy = base
        change(&copy)
        XCTAssertEqual(read(base), before, "\(group): changing a copy changed the original", file: file, line: line)
        XCTAssertNotEqual(read(copy), before, "\(group): the change did not take", file: file, line: line)

        var original = base
        let taken = original
        change(&original)
        XCTAssertEqual(read(taken), before, "\(group): changing the original changed an earlier copy", file: file, line: line)
        XCTAssertNotEqual(read(original), before, "\(group): the change did not take", file: file, line: line)
    }

    private final class Observer: TaskObserver {
        func observeTask(_ request: Request) -> (any TaskObservation)? { nil }
        func backgroundQueueDepth(_ depth: Int, session identifier: String) {}
    }

    private struct AltSvc: AlternativeServiceCache {
        var path: String
    }

    private final class Stub: ProtocolHandler {
        static var schemes: Set<String> { ["cow"] }
        init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {}
        func startLoading() {}
        func stopLoading() {}
    }

    private func identity(_ o: AnyObject?) -> ObjectIdentifier? { o.map(ObjectIdentifier.init) }

    func testSessionConfigurationCopiesAreIndependentForEveryGroupOfFields() {
        var base = SessionConfiguration.ephemeral
        base.additionalHeaders[HTTPField.Name("X-Base")!] = "1"
        base.responseCache = MemoryResponseCache()
        base.launchCommand = ["/bin/true"]

        // Headers and request defaults.
        assertIndependent(base, "additionalHeaders", read: { $0.additionalHeaders[HTTPField.Name("X-Base")!] },
                          change: { $0.additionalHeaders[HTTPField.Name("X-Base")!] = "2" })
        assertIndependent(base, "requestCachePolicy", read: { $0.requestCachePolicy }, change: { $0.requestCachePolicy = .reloadIgnoringLocalCacheData })
        // Timeouts and connectivity.
        assertIndependent(base, "timeoutIntervalForRequest", read: { $0.timeoutIntervalForRequest }, change: { $0.timeoutIntervalForRequest = 1 })
        assertIndependent(base, "timeoutIntervalForResource", read: { $0.timeoutIntervalForResource }, change: { $0.timeoutIntervalForResource = 2 })
        assertIndependent(base, "connectionTimeout", read: { $0.connectionTimeout }, change: { $0.connectionTimeout = 3 })
        assertIndependent(base, "waitsForConnectivity", read: { $0.waitsForConnectivity }, change: { $0.waitsForConnectivity.toggle() })
        // Redirects.
        assertIndependent(base, "maximumRedirects", read: { $0.maximumRedirects }, change: { $0.maximumRedirects += 1 })
        assertIndependent(base, "allowedRedirectSchemes", read: { $0.allowedRedirectSchemes }, change: { $0.allowedRedirectSchemes.insert("ftp") })
        // Connections and protocols.
        assertIndependent(base, "http2Enabled", read: { $0.http2Enabled }, change: { $0.http2Enabled.toggle() })
        assertIndependent(base, "webSocketPerMessageDeflate", read: { $0.webSocketPerMessageDeflate }, change: { $0.webSocketPerMessageDeflate.toggle() })
        assertIndependent(base, "httpMaximumConnectionsPerHost", read: { $0.httpMaximumConnectionsPerHost }, change: { $0.httpMaximumConnectionsPerHost = 1 })
        assertIndependent(base, "maximumBytesPerSecond", read: { $0.maximumBytesPerSecond }, change: { $0.maximumBytesPerSecond = 10 })
        assertIndependent(base, "receiveBufferLimit", read: { $0.receiveBufferLimit }, change: { $0.receiveBufferLimit = 1 })
        assertIndependent(base, "maximumDecodingRatio", read: { $0.maximumDecodingRatio }, change: { $0.maximumDecodingRatio = 100 })
        assertIndependent(base, "decodesContentEncoding", read: { $0.decodesContentEncoding }, change: { $0.decodesContentEncoding.toggle() })
        // TLS and trust (and the cache partition computed from them).
        assertIndependent(base, "tlsMinimumVersion", read: { $0.tlsMinimumVersion }, change: { $0.tlsMinimumVersion = .tls1_2 })
        assertIndependent(base, "tlsMaximumVersion", read: { $0.tlsMaximumVersion }, change: { $0.tlsMaximumVersion = .tls1_3 })
        assertIndependent(base, "caCertificateFile", read: { $0.caCertificateFile }, change: { $0.caCertificateFile = "/ca.pem" })
        assertIndependent(base, "tlsVerificationDisabled", read: { $0.cachePartition }, change: { $0.tlsVerificationDisabled = true })
        assertIndependent(base, "pinnedPublicKey", read: { $0.pinnedPublicKey }, change: { $0.pinnedPublicKey = "sha256//AAAA" })
        assertIndependent(base, "clientCertificate", read: { $0.clientCertificate?.certificatePath },
                          change: { $0.clientCertificate = ("/c.pem", "/k.pem") })
        // Proxies and names.
        assertIndependent(base, "proxies", read: { $0.proxies }, change: { $0.proxies.noProxy.append("example.org") })
        assertIndependent(base, "hostOverrides", read: { $0.hostOverrides },
                          change: { $0.hostOverrides.append(HostOverride(host: "h", port: 1, addresses: ["127.0.0.1"])) })
        // Stores.
        assertIndependent(base, "httpShouldSetCookies", read: { $0.httpShouldSetCookies }, change: { $0.httpShouldSetCookies.toggle() })
        assertIndependent(base, "responseCache", read: { self.identity($0.responseCache) }, change: { $0.responseCache = MemoryResponseCache() })
        assertIndependent(base, "altSvcCache", read: { $0.altSvcCache?.path }, change: { $0.altSvcCache = AltSvc(path: "/alt") })
        // Handlers, logging, observation.
        assertIndependent(base, "handlers", read: { $0.handlers.map(\.name) }, change: { $0.prependHandler(Stub.self) })
        assertIndependent(base, "registry", read: { ObjectIdentifier($0.registry) }, change: { $0.registry = HandlerRegistry() })
        assertIndependent(base, "logger", read: { $0.logger.label }, change: { $0.logger = Logger(label: "porter.other") })
        assertIndependent(base, "taskObserver", read: { $0.taskObserver is Observer }, change: { $0.taskObserver = Observer() })
        // Downloads and background sessions.
        assertIndependent(base, "downloadDirectory", read: { $0.downloadDirectory }, change: { $0.downloadDirectory = "/d" })
        assertIndependent(base, "launchCommand", read: { $0.launchCommand }, change: { $0.launchCommand?.append("--x") })
        assertIndependent(base, "sessionSendsLaunchEvents", read: { $0.sessionSendsLaunchEvents }, change: { $0.sessionSendsLaunchEvents.toggle() })
        assertIndependent(base, "isDiscretionary", read: { $0.isDiscretionary }, change: { $0.isDiscretionary.toggle() })
        assertIndependent(base, "discretionaryBytesPerSecond", read: { $0.discretionaryBytesPerSecond }, change: { $0.discretionaryBytesPerSecond = 1 })
    }

    func testRequestCopiesAreIndependentForEveryGroupOfFields() {
        var base = Request(url: URL(string: "http://127.0.0.1/a")!, body: .data(Data("body".utf8)))
        base.setValue("1", forHeader: "X-Base")
        base.setProperty("seen", forKey: "mark")
        base.mainDocumentURL = URL(string: "http://127.0.0.1/")

        assertIndependent(base, "url", read: { $0.url }, change: { $0.url = URL(string: "http://127.0.0.1/b")! })
        assertIndependent(base, "scheme (kept with the URL)", read: { $0.scheme }, change: { $0.url = URL(string: "HTTPS://127.0.0.1/b")! })
        XCTAssertEqual(Request(url: URL(string: "FTP://h/")!).scheme, "ftp")
        XCTAssertEqual(Request(url: URL(string: "relative/path")!).scheme, "")
        assertIndependent(base, "method", read: { $0.method }, change: { $0.method = "POST" })
        assertIndependent(base, "headerFields", read: { $0.value(forHeader: "X-Base") }, change: { $0.setValue("2", forHeader: "X-Base") })
        assertIndependent(base, "headerFields (added)", read: { $0.headerFields.count }, change: { $0.addValue("3", forHeader: "X-Base") })
        assertIndependent(base, "suppressedHeaders", read: { $0.suppressedHeaders }, change: { $0.suppressedHeaders.insert("accept") })
        assertIndependent(base, "body", read: { $0.body?.knownLength }, change: { $0.body = .data(Data("longer body".utf8)) })
        assertIndependent(base, "cachePolicy", read: { $0.cachePolicy }, change: { $0.cachePolicy = .returnCacheDataDontLoad })
        assertIndependent(base, "timeoutInterval", read: { $0.timeoutInterval }, change: { $0.timeoutInterval = 9 })
        assertIndependent(base, "mainDocumentURL", read: { $0.mainDocumentURL }, change: { $0.mainDocumentURL = nil })
        assertIndependent(base, "resumeRange", read: { $0.resumeRange }, change: { $0.resumeRange = ResumeRange(offset: 5, validator: "v") })
        assertIndependent(base, "properties", read: { $0.property(forKey: "mark") as? String }, change: { $0.setProperty("other", forKey: "mark") })
        assertIndependent(base, "properties (removed)", read: { $0.property(forKey: "mark") as? String }, change: { $0.removeProperty(forKey: "mark") })
        assertIndependent(base, "cachePartition", read: { $0.cachePartition }, change: { $0.cachePartition = "insecure" })
        assertIndependent(base, "priority", read: { $0.priority }, change: { $0.priority = 1 })
    }

    func testResponseCopiesAreIndependentForEveryGroupOfFields() {
        var fields = HTTPFields()
        fields[.contentType] = "text/plain"
        let base = Response(url: URL(string: "http://127.0.0.1/a")!, mimeType: "text/plain", expectedContentLength: 4,
                            textEncodingName: "utf-8", statusCode: 200, headerFields: fields, suggestedFilename: "a.txt")

        assertIndependent(base, "url", read: { $0.url }, change: { $0.url = URL(string: "http://127.0.0.1/b")! })
        assertIndependent(base, "mimeType", read: { $0.mimeType }, change: { $0.mimeType = "text/html" })
        assertIndependent(base, "expectedContentLength", read: { $0.expectedContentLength }, change: { $0.expectedContentLength = -1 })
        assertIndependent(base, "textEncodingName", read: { $0.textEncodingName }, change: { $0.textEncodingName = nil })
        assertIndependent(base, "statusCode", read: { $0.statusCode }, change: { $0.statusCode = 206 })
        assertIndependent(base, "headerFields", read: { $0.headerFields }, change: { $0.headerFields[.contentType] = "text/html" })
        assertIndependent(base, "resumeOffset", read: { $0.resumeOffset }, change: { $0.resumeOffset = 10 })
        assertIndependent(base, "validator", read: { $0.validator }, change: { $0.validator = "\"v\"" })
        assertIndependent(base, "statusLine", read: { $0.statusLine }, change: { $0.statusLine = "HTTP/1.1 200 OK" })
        assertIndependent(base, "isInternalRedirect", read: { $0.isInternalRedirect }, change: { $0.isInternalRedirect = true })
        // The handler's own suggestion (set only by the initializer) travels with a copy
        // that changes its other fields.
        var changed = base
        changed.headerFields[.contentDisposition] = "attachment; filename=b.txt"
        changed.url = URL(string: "http://127.0.0.1/c")!
        XCTAssertEqual(changed.suggestedFilename, "a.txt")
        XCTAssertEqual(base.suggestedFilename, "a.txt")
    }

    /// Many threads copy one shared value at once and each changes its own copy: every
    /// copy sees only its own change and the shared value none. (Run under
    /// `swift test --sanitize=thread` this also checks that copies never write a box
    /// another value reads.)
    func testCopiesChangedOnManyThreadsAtOnceStayIndependent() {
        var config = SessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = 30
        let sharedConfig = config
        let sharedRequest = Request(url: URL(string: "http://127.0.0.1/shared")!)
        let sharedResponse = Response(url: URL(string: "http://127.0.0.1/shared")!, mimeType: nil, expectedContentLength: -1)
        let rounds = 2_000
        let failures = Locked(0)
        DispatchQueue.concurrentPerform(iterations: rounds) { i in
            var c = sharedConfig
            var r = sharedRequest
            var response = sharedResponse
            response.statusCode = i
            let copyOfCopy = c
            c.timeoutIntervalForRequest = TimeInterval(i + 100)
            c.hostOverrides.append(HostOverride(host: "h\(i)", port: 80, addresses: ["127.0.0.1"]))
            r.url = URL(string: "http://127.0.0.1/\(i)")!
            r.setValue("\(i)", forHeader: "X-Thread")
            let ok = c.timeoutIntervalForRequest == TimeInterval(i + 100) && c.hostOverrides.count == 1
                && copyOfCopy.timeoutIntervalForRequest == 30 && copyOfCopy.hostOverrides.isEmpty
                && r.url.path == "/\(i)" && r.value(forHeader: "X-Thread") == "\(i)"
                && sharedConfig.timeoutIntervalForRequest == 30 && sharedConfig.hostOverrides.isEmpty
                && sharedRequest.url.path == "/shared" && sharedRequest.value(forHeader: "X-Thread") == nil
                && response.statusCode == i && sharedResponse.statusCode == nil
            if !ok { failures.withLock { $0 += 1 } }
        }
        XCTAssertEqual(failures.current, 0, "copies changed on other threads showed each other's changes")
        XCTAssertEqual(sharedConfig.timeoutIntervalForRequest, 30)
        XCTAssertTrue(sharedConfig.hostOverrides.isEmpty)
        XCTAssertEqual(sharedRequest.url.path, "/shared")
    }
}
