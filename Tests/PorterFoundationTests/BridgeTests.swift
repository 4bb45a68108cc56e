import Foundation
import HTTPTypes
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Porter
import PorterFoundation
import PorterTestSupport
import XCTest

/// Issue 14, Foundation bridges: a URLSession program moves to Porter line by line, its
/// URLRequest, HTTPURLResponse and URLError kept.
final class BridgeTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap(loadPlugins: false)
        super.setUp()
    }

    var base: String { nginx.http }

    /// The URLSession snippet, ported: each line keeps its Foundation types; only the
    /// call that loads changes (`URLSession.shared.data(for: request)` becomes
    /// `session.data(for: Request(request))`, and the response is bridged back).
    func testAURLSessionSnippetPortedLineByLine() async throws {
        let session = Session(configuration: .ephemeral)

        var request = URLRequest(url: URL(string: base + "/echo")!)
        request.httpMethod = "POST"
        request.setValue("text/plain", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data("ping".utf8)
        request.timeoutInterval = 10

        let (data, response) = try await session.data(for: Request(request))   // was: URLSession.shared.data(for: request)
        guard let http = HTTPURLResponse(response), http.statusCode == 200 else {   // was: response as? HTTPURLResponse
            throw URLError(.badServerResponse)
        }
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "POST ping")
        XCTAssertEqual(http.value(forHTTPHeaderField: "content-type")?.hasPrefix("text/plain"), true)
        XCTAssertEqual(http.url, URL(string: base + "/echo"))

        // Errors arrive as PorterError; URLError(_:) gives the URLSession code back.
        do {
            _ = try await session.data(for: Request(URLRequest(url: URL(string: "http://127.0.0.1:1/")!)))
            XCTFail("expected a refused connection")
        } catch let e as PorterError {
            let bridged = URLError(e)
            XCTAssertEqual(bridged.code, .cannotConnectToHost)
            XCTAssertEqual(bridged.failingURL?.absoluteString, "http://127.0.0.1:1/")
            XCTAssertEqual(bridged.userInfo[PorterErrorCodeKey] as? Int, PorterError.Code.cannotConnectToHost.rawValue)
        }
    }

    func testRequestsSurviveTheRoundTrip() throws {
        var r = URLRequest(url: URL(string: "https://example.org/a?b=1")!, cachePolicy: .returnCacheDataElseLoad, timeoutInterval: 12)
        r.httpMethod = "PUT"
        r.addValue("one", forHTTPHeaderField: "X-A")
        r.httpBody = Data("body".utf8)
        r.mainDocumentURL = URL(string: "https://example.org/")
        let porter = Request(r)
        XCTAssertEqual(porter.method, "PUT")
        XCTAssertEqual(porter.value(forHeader: "x-a"), "one")
        XCTAssertEqual(porter.cachePolicy, .returnCacheDataElseLoad)
        XCTAssertEqual(porter.timeoutInterval, 12)
        guard case .data(let d)? = porter.body else { return XCTFail("the body did not carry over") }
        XCTAssertEqual(d, Data("body".utf8))
        let back = URLRequest(porter)
        XCTAssertEqual(back.url, r.url)
        XCTAssertEqual(back.httpMethod, "PUT")
        XCTAssertEqual(back.value(forHTTPHeaderField: "X-A"), "one")
        XCTAssertEqual(back.httpBody, Data("body".utf8))
        XCTAssertEqual(back.cachePolicy, .returnCacheDataElseLoad)
        XCTAssertEqual(back.timeoutInterval, 12)
        XCTAssertEqual(back.mainDocumentURL, r.mainDocumentURL)
        // Porter's 0 (the session's timeout) is URLRequest's default.
        XCTAssertEqual(URLRequest(Request(url: URL(string: "data:,x")!)).timeoutInterval, 60)
        // A body stream is read as a Porter stream.
        var streamed = URLRequest(url: URL(string: "http://x/")!)
        streamed.httpBodyStream = InputStream(data: Data("streamed".utf8))
        guard case .stream(let s)? = Request(streamed).body else { return XCTFail("no stream") }
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = try buffer.withUnsafeMutableBytes { try s.read(into: $0) }
        XCTAssertEqual(String(decoding: buffer[0..<n], as: UTF8.self), "streamed")
    }

    func testResponsesAndSchemesWithoutStatus() {
        var fields = HTTPFields()
        fields.append(HTTPField(name: .setCookie, value: "a=1"))
        fields.append(HTTPField(name: .setCookie, value: "b=2"))
        fields.append(HTTPField(name: .contentType, value: "text/html"))
        let r = Response(url: URL(string: "http://x/")!, mimeType: "text/html", expectedContentLength: 10,
                         statusCode: 404, headerFields: fields)
        let http = HTTPURLResponse(r)
        XCTAssertEqual(http?.statusCode, 404)
        XCTAssertEqual(http?.value(forHTTPHeaderField: "Set-Cookie"), "a=1, b=2")
        XCTAssertEqual(Response(http!).statusCode, 404)
        // A file: response has no status: URLResponse, not HTTPURLResponse.
        let file = Response(url: URL(fileURLWithPath: "/etc/hostname"), mimeType: "text/plain", expectedContentLength: 3)
        XCTAssertNil(HTTPURLResponse(file))
        let plain = URLResponse.from(file)
        XCTAssertFalse(plain is HTTPURLResponse)
        XCTAssertEqual(plain.expectedContentLength, 3)
        XCTAssertEqual(plain.mimeType, "text/plain")
    }

    /// Every Porter code has a URLError code; the ones without a counterpart are named.
    func testEveryCodeMaps() {
        let unknownOnPurpose: Set<PorterError.Code> = [.unknown, .sessionInvalidated, .unsupportedConfiguration, .httpError,
                                                       .resumeFailed, .storeUnusable, .pluginCrashed]
        for code in PorterError.Code.allCases {
            let mapped = URLError.Code(code)
            if unknownOnPurpose.contains(code) {
                XCTAssertEqual(mapped, .unknown, "\(code)")
            } else {
                XCTAssertNotEqual(mapped, .unknown, "\(code) has a URLError counterpart")
            }
        }
        XCTAssertEqual(URLError.Code(.tooManyRedirects), .httpTooManyRedirects)
        XCTAssertEqual(URLError.Code(.fileDoesNotExist), .fileDoesNotExist)
    }
}
