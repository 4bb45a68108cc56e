import Foundation
@testable import PorterCore
@testable import PorterSession

/// Deterministic body bytes: byte i of a body is i % 251.
func patternBytes(from start: Int, count: Int) -> Data {
    var bytes = [UInt8](repeating: 0, count: count)
    for i in 0..<count { bytes[i] = UInt8((start + i) % 251) }
    return Data(bytes)
}

func pathParts(_ url: URL) -> [String] { url.path.split(separator: "/").map(String.init) }

func okResponse(_ url: URL, length: Int64, mime: String = "application/octet-stream") -> Response {
    var r = Response(url: url, mimeType: mime, expectedContentLength: length)
    r.statusCode = 200
    return r
}

/// chunks://host/<count>/<size>[?pause] — a response, then `count` chunks of `size`
/// pattern bytes from a thread of its own, honouring pause / resume; records how
/// many bytes it produced in `produced`.
final class ChunkHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["chunks"] }
    static let produced = Counter()
    let request: Request
    let client: any ProtocolClient
    let flow = FlowControl()

    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }

    func startLoading() {
        let parts = pathParts(request.url)
        let count = Int(parts.first ?? "1") ?? 1
        let size = Int(parts.dropFirst().first ?? "16") ?? 16
        let flow = self.flow, client = self.client, url = request.url
        Thread.detachNewThread {
            var r = okResponse(url, length: Int64(count * size))
            r.validator = "v1"
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            var offset = 0
            for _ in 0..<count {
                guard flow.waitWhilePaused() else { return }
                client.didLoad(patternBytes(from: offset, count: size))
                ChunkHandler.produced.add(size)
                offset += size
            }
            client.didFinishLoading()
        }
    }
    func stopLoading() { flow.stop() }
    func pauseDelivery() { flow.pause() }
    func resumeDelivery() { flow.resume() }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func add(_ n: Int) { lock.lock(); value += n; lock.unlock() }
    func reset() { lock.lock(); value = 0; lock.unlock() }
    var current: Int { lock.lock(); defer { lock.unlock() }; return value }
}

/// redir://host/<n>   → redirects to redir://host/<n-1>; redir://host/0 answers "arrived at host".
/// redir://host/loop  → redirects to itself forever.
/// redir://host/to?URL → redirects to URL (percent-decoded query).
/// redir://host/echo  → answers with the request's Authorization, Cookie and X-Keep headers.
final class RedirectHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["redir"] }
    let request: Request
    let client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }
    func startLoading() {
        let url = request.url
        let host = url.host ?? ""
        let last = pathParts(url).last ?? "0"
        var redirect = okResponse(url, length: 0)
        redirect.statusCode = 302
        func go(_ target: String) {
            var next = request
            next.url = URL(string: target)!
            client.wasRedirected(to: next, redirectResponse: redirect)
        }
        switch last {
        case "loop": go(url.absoluteString)
        case "to": go(url.query?.removingPercentEncoding ?? "")
        case "echo":
            let text = "auth=\(request.value(forHeader: "Authorization") ?? "-") cookie=\(request.value(forHeader: "Cookie") ?? "-") keep=\(request.value(forHeader: "X-Keep") ?? "-")"
            answer(text)
        case "cross": go("redir://other/echo")
        case "same": go("redir://\(host)/echo")
        default:
            let n = Int(last) ?? 0
            if n > 0 { go("redir://\(host)/\(n - 1)") } else { answer("arrived at \(host)") }
        }
    }
    private func answer(_ text: String) {
        client.didReceive(okResponse(request.url, length: Int64(text.utf8.count), mime: "text/plain"),
                          cacheStoragePolicy: .notAllowed)
        client.didLoad(Data(text.utf8))
        client.didFinishLoading()
    }
    func stopLoading() {}
}

/// auth://host/<mode> — asks for a password in realm "porter" until it gets
/// alice / secret. Modes: "login" (default), "proposed" (offers alice/secret as the
/// proposed credential), "withdraw" (raises a challenge, withdraws it, then answers).
/// Answers: "welcome alice" on success, "anonymous" when the space is rejected,
/// status 401 "unauthorized" under default handling without a credential.
final class AuthHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["auth"] }
    let request: Request
    let client: any ProtocolClient
    private let lock = NSLock()
    private var failures = 0
    private var stopped = false
    static let replies = Locked<[ChallengeDisposition]>([])

    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }

    var space: ProtectionSpace {
        ProtectionSpace(host: request.url.host ?? "", port: 0, protocol: "auth", realm: "porter",
                        authenticationMethod: .httpBasic)
    }

    func startLoading() {
        let mode = pathParts(request.url).last ?? "login"
        if mode == "withdraw" {
            let c = AuthenticationChallenge(protectionSpace: space, proposedCredential: nil, previousFailureCount: 0) { _ in }
            client.didReceive(c)
            client.didCancel(c)
            answer("withdrawn", status: 200)
            return
        }
        ask(proposed: mode == "proposed" ? Credential(user: "alice", password: "secret") : nil)
    }

    private func ask(proposed: Credential?) {
        let count = lock.withLock { failures }
        let challenge = AuthenticationChallenge(protectionSpace: space, proposedCredential: proposed,
                                                previousFailureCount: count) { [self] disposition in
            AuthHandler.replies.withLock { $0.append(disposition) }
            switch disposition {
            case .useCredential(let c):
                if c.user == "alice" && c.password == "secret" {
                    answer("welcome alice", status: 200)
                } else {
                    let again = lock.withLock { () -> Bool in failures += 1; return failures < 3 }
                    if again { ask(proposed: nil) } else {
                        client.didFail(with: PorterError(.userAuthenticationRequired, "too many wrong passwords", url: request.url))
                    }
                }
            case .performDefaultHandling:
                answer("unauthorized", status: 401)
            case .rejectProtectionSpace:
                answer("anonymous", status: 200)
            case .cancelAuthenticationChallenge:
                break  // Porter ends the task itself.
            }
        }
        client.didReceive(challenge)
    }

    private func answer(_ text: String, status: Int) {
        var r = okResponse(request.url, length: Int64(text.utf8.count), mime: "text/plain")
        r.statusCode = status
        client.didReceive(r, cacheStoragePolicy: .notAllowed)
        client.didLoad(Data(text.utf8))
        client.didFinishLoading()
    }
    func stopLoading() { lock.withLock { stopped = true } }
}

/// bad://host/<mode> — handlers that break the contract:
/// finish-twice, data-after-finish, fail-after-finish, silent (never answers),
/// data-before-response, finish-without-response, fail-mid-body (resumable),
/// two-responses.
final class MisbehavingHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["bad"] }
    static let stops = Counter()
    /// Loads of "silent" started (a test cancels one once it runs, not after a sleep).
    static let silentStarts = Counter()
    /// The steps of "finish-behind-cancel" (the delegate's side signals sawData and cancelled).
    final class Race: Sendable {
        let sawData = DispatchSemaphore(value: 0)
        let mayCancel = DispatchSemaphore(value: 0)
        let cancelled = DispatchSemaphore(value: 0)
    }
    nonisolated(unsafe) static var race = Race()
    let request: Request
    let client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }
    func startLoading() {
        let url = request.url
        var r = okResponse(url, length: 10)
        r.validator = "bad-v1"
        switch pathParts(url).last ?? "" {
        case "finish-twice":
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didLoad(Data("0123456789".utf8))
            client.didFinishLoading()
            client.didFinishLoading()
        case "data-after-finish":
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didLoad(Data("01234".utf8))
            client.didFinishLoading()
            client.didLoad(Data("56789".utf8))
        case "fail-after-finish":
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didLoad(Data("0123456789".utf8))
            client.didFinishLoading()
            client.didFail(with: PorterError(.networkConnectionLost, "late"))
        case "finish-behind-cancel":
            // The race of a handler that runs ahead of a cancel: its end is handed over
            // after the delegate heard its data and before the delegate's cancel(), and the
            // executor takes both only after cancel() returned (held meanwhile).
            let client = self.client, executor = client.context.executor
            let race = MisbehavingHandler.race, r = r
            DispatchQueue.global().async {
                client.didReceive(r, cacheStoragePolicy: .notAllowed)
                client.didLoad(Data("0123456789".utf8))
                guard race.sawData.wait(timeout: .now() + 120) == .success else { return client.didFail(with: PorterError(.unknown, "no data heard")) }
                // The end is handed over only once the gate holds the executor: the
                // drain that delivered the data may still be looping there, and would
                // take an end handed over meanwhile before the cancel (that end came
                // before the cancel, so it is a success, and the race is not played).
                let gate = DispatchSemaphore(value: 0), holding = DispatchSemaphore(value: 0)
                executor?.execute { holding.signal(); _ = gate.wait(timeout: .now() + 120) }
                _ = holding.wait(timeout: .now() + 120)
                client.didFinishLoading()
                race.mayCancel.signal()
                _ = race.cancelled.wait(timeout: .now() + 120)
                gate.signal()
            }
        case "silent":
            MisbehavingHandler.silentStarts.add(1)
        case "response-then-silent":
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
        case "data-before-response":
            client.didLoad(Data("x".utf8))
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didFinishLoading()
        case "finish-without-response":
            client.didFinishLoading()
        case "fail-mid-body":
            r.expectedContentLength = 100
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didLoad(Data("0123456789".utf8))
            client.didFail(with: PorterError(.networkConnectionLost, "the peer went away",
                                             cause: PorterError.Cause(domain: "test", code: 104, message: "reset")))
        case "two-responses":
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didLoad(Data("0123456789".utf8))
            client.didFinishLoading()
        default:
            client.didFail(with: PorterError(.badURL, "unknown mode"))
        }
    }
    func stopLoading() { MisbehavingHandler.stops.add(1) }
}

/// echo://host/ — reads the request body (data, file or stream), reports upload
/// progress, and answers with the body it read.
final class EchoHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["echo"] }
    let request: Request
    let client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }
    func startLoading() {
        let request = self.request, client = self.client
        DispatchQueue.global().async {
            var body = Data()
            switch request.body {
            case .data(let d)?: body = d
            case .file(let url)?: body = (try? Data(contentsOf: url)) ?? Data()
            case .stream(let s)?:
                var buf = [UInt8](repeating: 0, count: 7)
                while let n = try? buf.withUnsafeMutableBytes({ try s.read(into: $0) }), n > 0 { body.append(contentsOf: buf[0..<n]) }
            case nil: break
            }
            var sent: Int64 = 0
            let total = Int64(body.count)
            while sent < total {
                let step = min(Int64(4), total - sent)
                sent += step
                client.didSendBodyData(bytesSent: step, totalBytesSent: sent, totalBytesExpectedToSend: total)
            }
            var r = okResponse(request.url, length: total, mime: "text/plain")
            r.headerFields[.contentType] = "text/plain"
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            if !body.isEmpty { client.didLoad(body) }
            client.didFinishLoading()
        }
    }
    func stopLoading() {}
}

/// cache://host/<name> — answers "fresh <n>" (cacheable) unless handed a cached
/// response, in which case it declares it valid without loading.
final class CacheAwareHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["cache"] }
    static let loads = Counter()
    let request: Request
    let client: any ProtocolClient
    let cached: CachedResponse?
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
        self.cached = cachedResponse
    }
    func startLoading() {
        if cached != nil {
            client.cachedResponseIsValid()
            return
        }
        CacheAwareHandler.loads.add(1)
        let text = "fresh \(CacheAwareHandler.loads.current)"
        client.didReceive(okResponse(request.url, length: Int64(text.utf8.count), mime: "text/plain"), cacheStoragePolicy: .allowed)
        client.didLoad(Data(text.utf8))
        client.didFinishLoading()
    }
    func stopLoading() {}
}

/// A data: handler of the tests' own, to check that session handlers come first.
final class ShadowDataHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["data", "chunks"] }
    let request: Request
    let client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }
    func startLoading() {
        client.didReceive(okResponse(request.url, length: 6, mime: "text/plain"), cacheStoragePolicy: .notAllowed)
        client.didLoad(Data("shadow".utf8))
        client.didFinishLoading()
    }
    func stopLoading() {}
}

/// A registry with every test handler, shared by the tests.
let testRegistry: HandlerRegistry = {
    let r = HandlerRegistry()
    for t: any ProtocolHandler.Type in [ChunkHandler.self, RedirectHandler.self, AuthHandler.self,
                                        MisbehavingHandler.self, EchoHandler.self, CacheAwareHandler.self] {
        r.register(t)
    }
    return r
}()

func testConfiguration(_ change: (inout SessionConfiguration) -> Void = { _ in }) -> SessionConfiguration {
    var c = SessionConfiguration.ephemeral
    c.registry = testRegistry
    change(&c)
    return c
}

/// A delegate that records every callback in order, checks that none overlap, and
/// answers decisions with closures a test sets.
final class RecordingDelegate: DataDelegate, DownloadDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var inside = false
    private(set) var overlapped = false
    private var _events: [String] = []
    private var _data: [Int: Data] = [:]
    private var _errors: [Int: PorterError?] = [:]
    private var _completions: [Int: Int] = [:]
    private var _files: [Int: Data] = [:]
    private var _challenges: [AuthenticationChallenge] = []
    private var _metrics: [Int: TaskMetrics] = [:]
    private var _downloadLocations: [URL] = []
    var redirectAnswer: @Sendable (Request) -> Request? = { $0 }
    var challengeAnswer: @Sendable (AuthenticationChallenge) -> ChallengeDisposition = { _ in .performDefaultHandling }
    var responseAnswer: @Sendable (Response) -> ResponseDisposition = { _ in .allow }
    var cacheAnswer: @Sendable (CachedResponse) -> CachedResponse? = { $0 }
    var bodyStream: @Sendable () -> (any BodyStream)? = { nil }
    var onWrite: (@Sendable (DownloadTask, Int64) -> Void)?
    let finished = DispatchGroup()
    let invalidated = DispatchSemaphore(value: 0)

    private func enter(_ event: String) {
        lock.lock()
        if inside { overlapped = true }
        inside = true
        _events.append(event)
        lock.unlock()
    }
    private func leave() { lock.lock(); inside = false; lock.unlock() }

    var events: [String] { lock.withLock { _events } }
    func data(_ t: SessionTask) -> Data { lock.withLock { _data[t.taskIdentifier] ?? Data() } }
    func error(_ t: SessionTask) -> PorterError? { lock.withLock { _errors[t.taskIdentifier] ?? nil } }
    func completions(_ t: SessionTask) -> Int { lock.withLock { _completions[t.taskIdentifier] ?? 0 } }
    func file(_ t: SessionTask) -> Data? { lock.withLock { _files[t.taskIdentifier] } }
    var challenges: [AuthenticationChallenge] { lock.withLock { _challenges } }
    func metrics(_ t: SessionTask) -> TaskMetrics? { lock.withLock { _metrics[t.taskIdentifier] } }
    var downloadLocations: [URL] { lock.withLock { _downloadLocations } }

    func session(_ session: Session, didBecomeInvalidWithError error: PorterError?) {
        enter("invalid"); leave()
        invalidated.signal()
    }
    func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
              completion: @escaping @Sendable (Request?) -> Void) {
        enter("redirect \(newRequest.url.absoluteString)"); defer { leave() }
        let answer = redirectAnswer(newRequest)
        DispatchQueue.global().async { completion(answer) }  // answer later, from elsewhere
    }
    func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
              completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        enter("challenge \(challenge.previousFailureCount)"); defer { leave() }
        lock.withLock { _challenges.append(challenge) }
        completion(challengeAnswer(challenge))
    }
    func task(_ task: SessionTask, needNewBodyStream completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
        enter("needStream"); defer { leave() }
        completion(bodyStream())
    }
    func task(_ task: SessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        enter("sent \(totalBytesSent)/\(totalBytesExpectedToSend)"); leave()
    }
    func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
        enter("metrics"); defer { leave() }
        lock.withLock { _metrics[task.taskIdentifier] = metrics }
    }
    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        enter("complete \(error.map { $0.code.description } ?? "ok")"); defer { leave() }
        lock.withLock {
            _errors[task.taskIdentifier] = error
            _completions[task.taskIdentifier, default: 0] += 1
        }
        finished.leave()
    }
    func dataTask(_ task: DataTask, didReceive response: Response, completion: @escaping @Sendable (ResponseDisposition) -> Void) {
        enter("response \(response.statusCode ?? 0)"); defer { leave() }
        let answer = responseAnswer(response)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.01) { completion(answer) }
    }
    func dataTask(_ task: DataTask, didBecome downloadTask: DownloadTask) {
        enter("becameDownload"); leave()
    }
    func dataTask(_ task: DataTask, didReceive data: Data) {
        enter("data"); defer { leave() }
        lock.withLock { _data[task.taskIdentifier, default: Data()].append(data) }
    }
    func dataTask(_ task: DataTask, willCacheResponse proposed: CachedResponse, completion: @escaping @Sendable (CachedResponse?) -> Void) {
        enter("willCache"); defer { leave() }
        completion(cacheAnswer(proposed))
    }
    func downloadTask(_ task: DownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        enter("wrote"); defer { leave() }
        onWrite?(task, totalBytesWritten)
    }
    func downloadTask(_ task: DownloadTask, didResumeAtOffset offset: Int64, expectedTotalBytes: Int64) {
        enter("resumed \(offset)/\(expectedTotalBytes)"); leave()
    }
    func downloadTask(_ task: DownloadTask, didFinishDownloadingTo location: URL) {
        enter("finishedDownloading"); defer { leave() }
        let contents = try? Data(contentsOf: location)
        lock.withLock {
            _files[task.taskIdentifier] = contents
            _downloadLocations.append(location)
        }
    }

    /// Starts `task` and waits for its completion.
    func run(_ task: SessionTask, timeout: TimeInterval = 10) -> Bool {
        finished.enter()
        task.resume()
        return finished.wait(timeout: .now() + timeout) == .success
    }
}

/// Waits for a completion handler.
final class Completion<T: Sendable>: @unchecked Sendable {
    private let sem = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var values: [T] = []
    func fulfil(_ v: T) { lock.withLock { values.append(v) }; sem.signal() }
    func wait(_ timeout: TimeInterval = 10) -> T? {
        guard sem.wait(timeout: .now() + timeout) == .success else { return nil }
        return lock.withLock { values.first }
    }
    var count: Int { lock.withLock { values.count } }
}
