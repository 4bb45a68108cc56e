import Foundation
import HTTPTypes
@_spi(Generated) import OpenAPIRuntime
import Porter
import PorterOpenAPI
import PorterTestSupport
import XCTest

/// Issue 14, the OpenAPI transport: hand-written operations through
/// `ClientTransport.send` against a small real API on loopback (openapi_server.py).
final class PorterTransportTests: XCTestCase {
    nonisolated(unsafe) static var server: Process?
    nonisolated(unsafe) static var port = 0

    override class func setUp() {
        super.setUp()
        Porter.bootstrap(loadPlugins: false)
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("openapi_server.py").path
        if let (p, n) = try? startReadyServer("/usr/bin/env", ["python3", script]) {
            server = p
            port = n
        }
    }

    override class func tearDown() {
        server?.terminate()
        server?.waitUntilExit()
        super.tearDown()
    }

    override func setUpWithError() throws {
        guard PorterTransportTests.port > 0 else {
            throw NginxFixture.Failure.setup("the test API (python3 openapi_server.py) did not start")
        }
    }

    // MARK: - fixtures

    static func configuration(_ change: (inout SessionConfiguration) -> Void = { _ in }) -> SessionConfiguration {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        change(&c)
        return c
    }

    let session = Session(configuration: PorterTransportTests.configuration())
    static var root: String { "http://127.0.0.1:\(port)" }
    var root: String { PorterTransportTests.root }
    /// A base URL with a path of its own, as servers in an OpenAPI document often have.
    var baseURL: URL { URL(string: root + "/api/v1")! }

    func transport(timeout: TimeInterval? = nil) -> PorterTransport {
        PorterTransport(configuration: .init(session: session, timeout: timeout))
    }

    static func request(_ method: HTTPRequest.Method, _ path: String, _ fields: HTTPFields = [:]) -> HTTPRequest {
        HTTPRequest(method: method, scheme: nil, authority: nil, path: path, headerFields: fields)
    }

    /// What the server noted about one operation (upload, download, flood, hang).
    @Sendable static func state(_ kind: String, _ id: String) async throws -> [String: Any] {
        let control = Session(configuration: PorterTransportTests.configuration())
        let (data, _) = try await control.data(from: URL(string: root + "/\(kind)-state?id=\(id)")!)
        return try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func release(_ id: String) async throws {
        let control = Session(configuration: PorterTransportTests.configuration())
        var r = Request(url: URL(string: root + "/release?id=\(id)")!, method: "POST")
        r.body = .data(Data())
        _ = try await control.data(for: r)
    }

    func json(_ body: HTTPBody?) async throws -> [String: Any] {
        let data = try await Data(collecting: try XCTUnwrap(body), upTo: 1 << 20)
        return try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any], String(decoding: data, as: UTF8.self))
    }

    static func int(_ value: Any?) -> Int { (value as? NSNumber)?.intValue ?? -1 }

    /// Byte i of the server's download and flood bodies.
    static func patternByte(_ i: Int) -> UInt8 { UInt8((i * 31 + 7) % 251) }

    /// The pattern from byte 0 to past 64 KiB, so that any 64 KiB of it is a slice.
    static let pattern: [UInt8] = (0..<(65536 + 251)).map(patternByte)

    /// An upload body of `chunks` chunks of 64 KiB of the pattern, made as it is read
    /// (`AsyncThrowingStream`'s unfolding form asks for a chunk only when the last was
    /// taken); `beforeChunk` runs before chunk k is made.
    final class Producer: @unchecked Sendable {
        private let lock = NSLock()
        private var produced = 0
        private var index = 0
        let chunks: Int
        let beforeChunk: @Sendable (Int) async throws -> Void
        init(chunks: Int, beforeChunk: @escaping @Sendable (Int) async throws -> Void = { _ in }) {
            self.chunks = chunks
            self.beforeChunk = beforeChunk
        }
        var producedNow: Int { lock.withLock { produced } }
        func next() async throws -> ArraySlice<UInt8>? {
            let k = lock.withLock { () -> Int in defer { index += 1 }; return index }
            guard k < chunks else { return nil }
            try await beforeChunk(k)
            let offset = k * 65536 % 251
            lock.withLock { produced += 65536 }
            return PorterTransportTests.pattern[offset..<(offset + 65536)]
        }
        func body(length: HTTPBody.Length) -> HTTPBody {
            HTTPBody(AsyncThrowingStream(unfolding: { try await self.next() }), length: length)
        }
    }

    // MARK: - JSON

    func testJSONRequestAndResponse() async throws {
        let t = PorterTransport(configuration: .init(session: session, prepare: { request, operationID in
            request.setValue(operationID, forHeader: "X-Operation")
        }))
        var fields: HTTPFields = [.contentType: "application/json", .accept: "application/json"]
        fields[HTTPField.Name("X-Trace")!] = "trace-1"
        let (created, createdBody) = try await t.send(PorterTransportTests.request(.post, "/pets", fields),
                                                      body: HTTPBody(#"{"name": "Rex"}"#),
                                                      baseURL: baseURL, operationID: "createPet")
        XCTAssertEqual(created.status, .created)
        XCTAssertEqual(created.status.reasonPhrase, "Created")
        XCTAssertEqual(created.headerFields[.contentType], "application/json")
        let pet = try await json(createdBody)
        XCTAssertEqual(pet["name"] as? String, "Rex")
        XCTAssertEqual(pet["path"] as? String, "/api/v1/pets")
        // A body of known length goes with its Content-Length, not chunked.
        XCTAssertEqual(pet["framing"] as? String, "length:\(#"{"name": "Rex"}"#.utf8.count)")
        let headers = try XCTUnwrap(pet["headers"] as? [String: String])
        XCTAssertEqual(headers["content-type"], "application/json")
        XCTAssertEqual(headers["x-trace"], "trace-1")
        XCTAssertEqual(headers["x-operation"], "createPet")
        let id = PorterTransportTests.int(pet["id"])
        XCTAssertEqual(created.headerFields[.location], "/api/v1/pets/\(id)")

        // A base URL ending in "/" and a query: one slash, the query kept.
        let (fetched, fetchedBody) = try await t.send(PorterTransportTests.request(.get, "/pets/\(id)?verbose=true&tag=a%20b"), body: nil,
                                                      baseURL: URL(string: root + "/api/v1/")!, operationID: "getPet")
        XCTAssertEqual(fetched.status, .ok)
        let again = try await json(fetchedBody)
        XCTAssertEqual(again["name"] as? String, "Rex")
        XCTAssertEqual(again["path"] as? String, "/api/v1/pets/\(id)?verbose=true&tag=a%20b")

        // HEAD: the head only, no body.
        let (head, headBody) = try await t.send(PorterTransportTests.request(.head, "/pets/\(id)"), body: nil, baseURL: baseURL, operationID: "petExists")
        XCTAssertEqual(head.status, .ok)
        XCTAssertNotNil(head.headerFields[.contentLength])
        XCTAssertNil(headBody)
    }

    func testErrorStatusesAreResponsesNotErrors() async throws {
        let t = transport()
        let (missing, missingBody) = try await t.send(PorterTransportTests.request(.get, "/pets/999999"), body: nil, baseURL: baseURL, operationID: "getPet")
        XCTAssertEqual(missing.status, .notFound)
        XCTAssertEqual(missing.status.reasonPhrase, "Not Found")
        let missingJSON = try await json(missingBody)
        XCTAssertEqual(missingJSON["error"] as? String, "no pet 999999")
        for code in [400, 409, 500, 503] {
            let (response, body) = try await t.send(PorterTransportTests.request(.get, "/status/\(code)"), body: nil, baseURL: baseURL, operationID: "status")
            XCTAssertEqual(response.status.code, code)
            let answer = try await json(body)
            XCTAssertEqual(PorterTransportTests.int(answer["status"]), code)
        }
    }

    /// Through the runtime's client as generated code calls it: a status is an output, a
    /// transport error reaches the caller as `ClientError` with Porter's error inside.
    func testTheRuntimeSeesStatusesAndWrapsTransportErrors() async throws {
        let client = UniversalClient(serverURL: baseURL, transport: transport())
        let code = try await client.send(input: 503, forOperation: "status",
                                         serializer: { code in (PorterTransportTests.request(.get, "/status/\(code)"), nil) },
                                         deserializer: { response, _ in response.status.code })
        XCTAssertEqual(code, 503)

        let closedPort = try NginxFixture.freePort()
        let nowhere = UniversalClient(serverURL: URL(string: "http://127.0.0.1:\(closedPort)/api")!, transport: transport())
        do {
            _ = try await nowhere.send(input: (), forOperation: "listPets",
                                       serializer: { _ in (PorterTransportTests.request(.get, "/pets"), nil) },
                                       deserializer: { response, _ in response.status.code })
            XCTFail("a refused connection must throw")
        } catch let error as ClientError {
            XCTAssertEqual(error.operationID, "listPets")
            XCTAssertEqual((error.underlyingError as? PorterError)?.code, .cannotConnectToHost)
        }
    }

    // MARK: - transport errors

    /// A refused connection is thrown, and the request body is not read beyond what the
    /// upload reads ahead before it connects (Porter's 256 KiB, the pipe's 128 KiB, one chunk
    /// in hand): a 4 MiB body stays almost all unread. (Whether the read-ahead starts before
    /// the refusal comes is a race: asserting "nothing read" failed once in a clean run.)
    func testARefusedConnectionIsThrown() async throws {
        let closedPort = try NginxFixture.freePort()
        let producer = Producer(chunks: 64)
        do {
            _ = try await transport().send(PorterTransportTests.request(.put, "/upload"), body: producer.body(length: .unknown),
                                           baseURL: URL(string: "http://127.0.0.1:\(closedPort)")!, operationID: "upload")
            XCTFail("a refused connection must throw")
        } catch let error as PorterError {
            XCTAssertEqual(error.code, .cannotConnectToHost)
        }
        XCTAssertLessThanOrEqual(producer.producedNow, (256 + 128 + 64) << 10)
    }

    func testAnIdleRequestTimesOut() async throws {
        let started = Date()
        do {
            _ = try await transport(timeout: 0.5).send(PorterTransportTests.request(.get, "/hang?id=timeout"), body: nil,
                                                       baseURL: baseURL, operationID: "hang")
            XCTFail("a server that never answers must time out")
        } catch let error as PorterError {
            XCTAssertEqual(error.code, .timedOut)
        }
        // The behaviour is a time limit: not before it; and the server never answers, so any
        // bound far below forever (here 50× the limit) will do on a busy machine.
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(started), 0.45)
        XCTAssertLessThan(Date().timeIntervalSince(started), 25)
    }

    /// A body that ends before its Content-Length is an error, not a short body.
    func testAResponseBodyCutShortThrows() async throws {
        let (response, body) = try await transport().send(PorterTransportTests.request(.get, "/short"), body: nil, baseURL: baseURL, operationID: "short")
        XCTAssertEqual(response.status, .ok)
        XCTAssertEqual(try XCTUnwrap(body).length, .known(1000))
        do {
            let data = try await Data(collecting: try XCTUnwrap(body), upTo: 1 << 20)
            XCTFail("a body cut short was read as \(data.count) bytes")
        } catch let error as PorterError {
            XCTAssertNotEqual(error.code, .cancelled)
        }
    }

    /// Porter decodes a gzip body: the caller reads the decoded JSON, and the length is not
    /// taken from the encoded Content-Length.
    func testAnEncodedBodyArrivesDecodedOfUnknownLength() async throws {
        let (response, body) = try await transport().send(PorterTransportTests.request(.get, "/gzip"), body: nil,
                                                          baseURL: baseURL, operationID: "gzip")
        XCTAssertEqual(response.headerFields[.contentEncoding], "gzip")
        XCTAssertEqual(try XCTUnwrap(body).length, .unknown)
        let text = try await json(body)["text"] as? String
        XCTAssertEqual(text, String(repeating: "Porter ", count: 1000))
    }

    /// A hostile status line: an odd code and a control byte in the reason phrase are
    /// carried (legalized), never a trap.
    func testAnOddStatusLineIsMapped() async throws {
        let (response, body) = try await transport().send(PorterTransportTests.request(.get, "/odd-status"), body: nil, baseURL: baseURL, operationID: "odd")
        XCTAssertEqual(response.status.code, 599)
        XCTAssertFalse(response.status.reasonPhrase.unicodeScalars.contains { $0.value < 0x20 })
        XCTAssertTrue(response.status.reasonPhrase.hasPrefix("Very"))
        let answer = try await json(body)
        XCTAssertEqual(PorterTransportTests.int(answer["odd"]), 1)
    }

    /// The base URL decides where a request goes: a path naming a host of its own is
    /// refused before anything is sent.
    func testAPathCannotLeaveTheBaseURL() async throws {
        for path in ["//evil.example/pets", "http://evil.example/pets", "https:/pets"] {
            do {
                _ = try await transport().send(PorterTransportTests.request(.get, path), body: nil, baseURL: baseURL, operationID: "listPets")
                XCTFail("\(path) was sent")
            } catch let error as PorterError {
                XCTAssertEqual(error.code, .badURL, path)
            }
        }
    }

    /// A path with spaces and a CR LF (which swift-http-types turns into spaces) goes
    /// percent-encoded in one request line: no header can be smuggled in through it.
    func testAPathCannotSplitTheRequest() async throws {
        let (response, body) = try await transport().send(
            PorterTransportTests.request(.post, "/pets?note=a b\r\nX-Injected: yes", [.contentType: "application/json"]),
            body: HTTPBody(#"{"name": "Spot"}"#), baseURL: baseURL, operationID: "createPet")
        XCTAssertEqual(response.status, .created)
        let pet = try await json(body)
        let headers = try XCTUnwrap(pet["headers"] as? [String: String])
        XCTAssertNil(headers["x-injected"])
        let path = try XCTUnwrap(pet["path"] as? String)
        XCTAssertTrue(path.hasPrefix("/api/v1/pets?note=a%20b"), path)
        XCTAssertFalse(path.contains(" "), path)
    }

    // MARK: - streamed upload

    /// An upload of unknown length goes chunked, and goes as it is produced: the body waits
    /// (before its second chunk) for the server to have received the first.
    func testAnUploadOfUnknownLengthIsStreamedChunked() async throws {
        try await streamedUpload(id: "up-chunked", length: nil)
    }

    func testAnUploadOfKnownLengthIsStreamedWithContentLength() async throws {
        try await streamedUpload(id: "up-length", length: 129 * 65536)
    }

    private func streamedUpload(id: String, length: Int?) async throws {
        let chunks = 129
        let producer = Producer(chunks: chunks) { k in
            guard k == 1 else { return }
            // Were the body collected before sending, the server would never see this.
            let seen = try await eventuallyAsync(60) { PorterTransportTests.int(try await PorterTransportTests.state("upload", id)["received"]) >= 65536 }
            if !seen { throw PorterError(.unknown, "the first chunk never reached the server: the body was not streamed") }
        }
        let (response, body) = try await transport().send(
            PorterTransportTests.request(.put, "/upload?id=\(id)", [.contentType: "application/octet-stream"]),
            body: producer.body(length: length.map { .known(Int64($0)) } ?? .unknown), baseURL: baseURL, operationID: "upload")
        XCTAssertEqual(response.status, .ok)
        let result = try await json(body)
        XCTAssertEqual(PorterTransportTests.int(result["received"]), chunks * 65536)
        XCTAssertEqual(result["framing"] as? String, length.map { "length:\($0)" } ?? "chunked")
        XCTAssertEqual(result["pattern"] as? Bool, true, "the server received other bytes than were sent")
    }

    /// A server that stops reading holds the body's producer back: what is produced ahead
    /// of the server stays bounded (a few MiB of a 64 MiB body), and the whole body arrives
    /// once the server reads again.
    func testAStalledServerHoldsTheUploadBack() async throws {
        let id = "up-stall"
        let chunks = 1024  // 64 MiB
        let producer = Producer(chunks: chunks)
        let t = transport()
        let base = baseURL
        let call = Task {
            try await t.send(PorterTransportTests.request(.put, "/upload?id=\(id)&stall=1"), body: producer.body(length: .unknown),
                             baseURL: base, operationID: "upload")
        }
        let stalled = try await eventuallyAsync(60) { PorterTransportTests.int(try await PorterTransportTests.state("upload", id)["received"]) >= 65536 }
        XCTAssertTrue(stalled)
        // Wait until the producer stops (its output unchanged over 300 ms).
        var last = -1
        _ = await eventuallyAsync(60) {
            let now = producer.producedNow
            defer { last = now }
            try? await Task.sleep(nanoseconds: 300_000_000)
            return now == last && producer.producedNow == now
        }
        let ahead = producer.producedNow
        // What fills the socket buffers (up to 4 MiB for sending here) and Porter's upload
        // read-ahead (384 KiB); seen: 3.3 MiB.
        XCTAssertLessThan(ahead, 16 << 20, "the producer ran \(ahead) bytes ahead of a server that stopped reading")
        let serverState = try await PorterTransportTests.state("upload", id)
        XCTAssertEqual(serverState["done"] as? Bool, false)
        try await PorterTransportTests.release(id)
        let (response, body) = try await call.value
        XCTAssertEqual(response.status, .ok)
        let result = try await json(body)
        XCTAssertEqual(PorterTransportTests.int(result["received"]), chunks * 65536)
        XCTAssertEqual(result["pattern"] as? Bool, true, "the server received other bytes than were sent")
    }

    /// A body that can be read again is sent again after a 307; one that cannot fails
    /// with `requestBodyStreamExhausted` instead of sending nothing.
    func testA307SendsARepeatableBodyAgain() async throws {
        let t = transport()
        let (response, body) = try await t.send(PorterTransportTests.request(.post, "/redirect-307", [.contentType: "application/json"]),
                                                body: HTTPBody(#"{"name": "Fido"}"#), baseURL: baseURL, operationID: "createPet")
        XCTAssertEqual(response.status, .created)
        let pet = try await json(body)
        XCTAssertEqual(pet["name"] as? String, "Fido")
        XCTAssertEqual(pet["path"] as? String, "/api/v1/pets")

        let once = HTTPBody(AsyncStream { c in c.yield(ArraySlice(#"{"name": "Once"}"#.utf8)); c.finish() }, length: .unknown)
        do {
            _ = try await t.send(PorterTransportTests.request(.post, "/redirect-307"), body: once, baseURL: baseURL, operationID: "createPet")
            XCTFail("a body read once cannot follow a 307")
        } catch let error as PorterError {
            XCTAssertEqual(error.code, .requestBodyStreamExhausted)
        }
    }

    struct BodyBroke: Error, Equatable {}

    /// The request body's own failure is what the call throws, and the server sees the
    /// upload end unfinished.
    func testARequestBodyThatThrowsFailsTheCallWithItsError() async throws {
        let id = "up-throws"
        let producer = Producer(chunks: 64) { k in if k == 8 { throw BodyBroke() } }
        do {
            _ = try await transport().send(PorterTransportTests.request(.put, "/upload?id=\(id)"), body: producer.body(length: .unknown),
                                           baseURL: baseURL, operationID: "upload")
            XCTFail("a body that throws must fail the call")
        } catch {
            XCTAssertTrue(error is BodyBroke, "\(error)")
        }
        let closed = try await eventuallyAsync(60) { try await PorterTransportTests.state("upload", id)["closed"] as? Bool == true }
        XCTAssertTrue(closed)
        let after = try await PorterTransportTests.state("upload", id)
        XCTAssertEqual(after["done"] as? Bool, false)
    }

    /// A body that gives fewer or more bytes than the length it announced fails the call;
    /// the server never takes a wrong body for a whole one.
    func testARequestBodyOfTheWrongLengthFails() async throws {
        for (id, bytes) in [("short-body", 100), ("long-body", 300)] {
            do {
                _ = try await transport().send(PorterTransportTests.request(.put, "/upload?id=\(id)"),
                                               body: HTTPBody([UInt8](repeating: 1, count: bytes), length: .known(200)),
                                               baseURL: baseURL, operationID: "upload")
                XCTFail("\(bytes) bytes announced as 200 were sent")
            } catch let error as PorterError {
                XCTAssertEqual(error.code, .requestBodyStreamExhausted, "\(bytes) bytes: \(error)")
            }
            let after = try await PorterTransportTests.state("upload", id)
            XCTAssertNotEqual(after["done"] as? Bool, true)
        }
    }

    // MARK: - streamed download

    /// The first chunk is in the caller's hands while the server still holds the rest.
    func testADownloadStreamsAsItArrives() async throws {
        let id = "down-stream"
        let size = 3 << 20
        let (response, body) = try await transport().send(PorterTransportTests.request(.get, "/download?id=\(id)&size=\(size)"), body: nil,
                                                          baseURL: baseURL, operationID: "download")
        XCTAssertEqual(response.status, .ok)
        let stream = try XCTUnwrap(body)
        XCTAssertEqual(stream.length, .unknown)
        var iterator = stream.makeAsyncIterator()
        var received: [UInt8] = []
        while received.count < 65536, let chunk = try await iterator.next() { received += chunk }
        XCTAssertEqual(received.count, 65536)
        let held = try await PorterTransportTests.state("download", id)
        XCTAssertEqual(held["done"] as? Bool, false)
        XCTAssertLessThanOrEqual(PorterTransportTests.int(held["sent"]), 65536)

        try await PorterTransportTests.release(id)
        while let chunk = try await iterator.next() { received += chunk }
        XCTAssertEqual(received.count, size)
        XCTAssertNil(received.indices.first { received[$0] != PorterTransportTests.patternByte($0) }, "the body differs from what was sent")
    }

    /// A reader that stops reading stops the server: it cannot finish sending a 96 MiB body
    /// while the reader waits, and the whole body comes once it reads again.
    func testASlowReaderHoldsTheDownloadBack() async throws {
        let id = "flood"
        let size = 96 << 20
        let (response, body) = try await transport().send(PorterTransportTests.request(.get, "/flood?id=\(id)&size=\(size)"), body: nil,
                                                          baseURL: baseURL, operationID: "flood")
        XCTAssertEqual(response.status, .ok)
        let stream = try XCTUnwrap(body)
        XCTAssertEqual(stream.length, .known(Int64(size)))
        var iterator = stream.makeAsyncIterator()
        var count = try await iterator.next()?.count ?? 0
        // Wait while the server fills what it can; it must come to a stop well short of the end.
        var last = -1
        _ = try await eventuallyAsync(60) {
            let now = PorterTransportTests.int(try await PorterTransportTests.state("flood", id)["sent"])
            defer { last = now }
            try? await Task.sleep(nanoseconds: 300_000_000)
            return now == last
        }
        let paused = try await PorterTransportTests.state("flood", id)
        XCTAssertEqual(paused["done"] as? Bool, false, "the server sent all \(size) bytes to a reader that was not reading")
        // Porter holds at most receiveBufferLimit (4 MiB); the rest is in the sockets'
        // buffers (seen: 10 to 15 MiB sent in all).
        XCTAssertLessThan(PorterTransportTests.int(paused["sent"]), 64 << 20)

        var checked = 0
        while let chunk = try await iterator.next() {
            // Spot checks (a byte every 4 KiB) keep a debug build quick.
            var i = chunk.startIndex
            while i < chunk.endIndex {
                if chunk[i] != PorterTransportTests.patternByte(count + i - chunk.startIndex) { XCTFail("byte \(count + i - chunk.startIndex) differs"); break }
                checked += 1
                i += 4096
            }
            count += chunk.count
        }
        XCTAssertEqual(count, size)
        XCTAssertGreaterThan(checked, size / 4096 / 2)
    }

    // MARK: - cancellation

    /// Cancelling the caller while it waits for the response: `CancellationError` at once,
    /// and the server sees the connection close.
    func testCancellingTheCallerCancelsTheLoad() async throws {
        let id = "hang-cancel"
        let t = transport()
        let base = baseURL
        let call = Task { try await t.send(PorterTransportTests.request(.get, "/hang?id=\(id)"), body: nil, baseURL: base, operationID: "hang") }
        let arrived = try await eventuallyAsync(60) { try await PorterTransportTests.state("hang", id)["arrived"] as? Bool == true }
        XCTAssertTrue(arrived)
        call.cancel()
        do {
            _ = try await call.value
            XCTFail("a cancelled call returned")
        } catch {
            // The server holds the rest forever: only the cancel can have ended it (a
            // timeout would be a PorterError), so no clock is needed to tell.
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
        let closed = try await eventuallyAsync(60) { try await PorterTransportTests.state("hang", id)["closed"] as? Bool == true }
        XCTAssertTrue(closed, "the server never saw the connection close")
    }

    /// Cancelling a reader in the middle of the body: the read throws `CancellationError` and
    /// the server sees the connection close.
    func testCancellingTheReaderCancelsTheDownload() async throws {
        let id = "down-cancel"
        let t = transport()
        let base = baseURL
        let firstChunk = expectation(description: "first chunk read")
        let reader = Task { () -> Int in
            let (_, body) = try await t.send(PorterTransportTests.request(.get, "/download?id=\(id)&size=\(4 << 20)"), body: nil,
                                             baseURL: base, operationID: "download")
            var iterator = try XCTUnwrap(body).makeAsyncIterator()
            var count = 0
            while let chunk = try await iterator.next() {
                count += chunk.count
                if count >= 65536 { firstChunk.fulfill(); break }
            }
            // The server holds the rest: this waits until cancelled.
            while let chunk = try await iterator.next() { count += chunk.count }
            return count
        }
        await fulfillment(of: [firstChunk], timeout: 120)
        reader.cancel()
        do {
            let count = try await reader.value
            XCTFail("a cancelled reader read \(count) bytes")
        } catch {
            // The server holds the rest forever: only the cancel can have ended it (a
            // timeout would be a PorterError), so no clock is needed to tell.
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
        let closed = try await eventuallyAsync(60) { try await PorterTransportTests.state("download", id)["closed"] as? Bool == true }
        XCTAssertTrue(closed, "the server never saw the connection close")
    }

    /// A call made from a task already cancelled sends nothing.
    func testACallFromACancelledTaskSendsNothing() async throws {
        let id = "hang-precancelled"
        let t = transport()
        let base = baseURL
        let call = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await t.send(PorterTransportTests.request(.get, "/hang?id=\(id)"), body: nil, baseURL: base, operationID: "hang")
        }
        do {
            _ = try await call.value
            XCTFail("a cancelled call returned")
        } catch {
            XCTAssertTrue(error is CancellationError, "\(error)")
        }
        try await Task.sleep(nanoseconds: 200_000_000)
        let after = try await PorterTransportTests.state("hang", id)
        XCTAssertNil(after["arrived"])
    }
}
