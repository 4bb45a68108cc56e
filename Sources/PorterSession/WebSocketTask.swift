import Foundation
import PorterCore
import HTTPTypes

/// The open and close of a WebSocket task (URLSessionWebSocketDelegate's two calls),
/// on the session's delegate queue.
public protocol WebSocketDelegate: AnyObject, Sendable {
    func webSocketTask(_ task: WebSocketTask, didOpenWithProtocol protocol: String?)
    func webSocketTask(_ task: WebSocketTask, didCloseWith code: WebSocketTask.CloseCode, reason: Data?)
    /// The task ended: nil after a clean close, else why (URLSession's didCompleteWithError).
    func webSocketTask(_ task: WebSocketTask, didCompleteWithError error: PorterError?)
}

extension WebSocketDelegate {
    public func webSocketTask(_ task: WebSocketTask, didOpenWithProtocol protocol: String?) {}
    public func webSocketTask(_ task: WebSocketTask, didCloseWith code: WebSocketTask.CloseCode, reason: Data?) {}
    public func webSocketTask(_ task: WebSocketTask, didCompleteWithError error: PorterError?) {}
}

/// A WebSocket connection (RFC 6455): Porter's URLSessionWebSocketTask.
///
/// Made by `Session.webSocketTask(with:)` for a ws:// or wss:// URL (http and https
/// are taken as ws and wss). `resume()` connects through the session's proxy and TLS
/// settings, sends the opening handshake (with the request's header fields, the
/// session's additional headers and its cookies) and checks the answer. Messages are
/// then sent and received whole; fragments from the server are joined, pings are
/// answered, and a server that breaks the protocol gets the close code the RFC names
/// (1002, 1007, 1009) and the task fails. Not supported: extensions (permessage-deflate
/// is not offered), redirects and authentication challenges in the handshake.
public final class WebSocketTask: @unchecked Sendable, CustomStringConvertible {
    public enum Message: Sendable, Equatable {
        case data(Data)
        case string(String)
    }

    /// A close code (RFC 6455 §7.4): the registered ones by name, any other by value.
    public struct CloseCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let invalid = CloseCode(rawValue: 0)
        public static let normalClosure = CloseCode(rawValue: 1000)
        public static let goingAway = CloseCode(rawValue: 1001)
        public static let protocolError = CloseCode(rawValue: 1002)
        public static let unsupportedData = CloseCode(rawValue: 1003)
        public static let noStatusReceived = CloseCode(rawValue: 1005)
        public static let abnormalClosure = CloseCode(rawValue: 1006)
        public static let invalidFramePayloadData = CloseCode(rawValue: 1007)
        public static let policyViolation = CloseCode(rawValue: 1008)
        public static let messageTooBig = CloseCode(rawValue: 1009)
        public static let mandatoryExtensionMissing = CloseCode(rawValue: 1010)
        public static let internalServerError = CloseCode(rawValue: 1011)
        public static let tlsHandshakeFailure = CloseCode(rawValue: 1015)
        public var description: String { "\(rawValue)" }

        /// Whether a close frame may carry this code (1005, 1006 and 1015 are only
        /// reported, never sent; 3000–4999 belong to libraries and applications).
        static func maySend(_ code: Int) -> Bool {
            switch code {
            case 1000...1003, 1007...1014, 3000...4999: return true
            default: return false
            }
        }
    }

    public let taskIdentifier: Int
    public let originalRequest: Request
    /// The largest message `receive()` accepts (1 MiB, as URLSession); a larger one
    /// fails the task with close code 1009. A change applies from the next frame read.
    public var maximumMessageSize: Int {
        get { lock.withLock { $0.maximumMessageSize } }
        set { lock.withLock { $0.maximumMessageSize = min(max(125, newValue), WebSocketTask.largestMessageSize) } }
    }
    /// The cap on `maximumMessageSize` (2 GiB - 1): `.max` means "as large as allowed".
    public static let largestMessageSize = Int(Int32.max)
    public var taskDescription: String? {
        get { lock.withLock { $0.description } }
        set { lock.withLock { $0.description = newValue } }
    }

    private struct Shared {
        var state = TaskState.suspended
        var maximumMessageSize = 1 << 20
        var description: String?
        var closeCode = CloseCode.invalid
        var closeReason: Data?
        var error: PorterError?
        var response: Response?
        var agreedProtocol: String?
    }
    private let lock = Locked(Shared())
    private let session: Session?
    private let delegate: (any WebSocketDelegate)?
    private let protocols: [String]
    private let queue = DispatchQueue(label: "porter.websocket")

    // queue only:
    private var stream: (any ByteStream)?
    private var phase = Phase.idle
    private enum Phase { case idle, connecting, handshaking, open, closing, closed }
    private var key = ""
    private var head: [UInt8] = []
    private var parser = WebSocketFrameParser(maximumPayload: 1 << 20)
    private var assembler = WebSocketMessageAssembler(maximumMessageSize: 1 << 20)
    private var messages: [Message] = []
    private var messageBytes = 0
    private var receivers: [@Sendable (Result<Message, PorterError>) -> Void] = []
    private var pongHandlers: [(payload: [UInt8], done: @Sendable (PorterError?) -> Void)] = []
    private var nextPing: UInt32 = 0
    private var reading = false
    private var closeSent = false
    private var closeTimer: DispatchWorkItem?
    private var openTimer: DispatchWorkItem?
    private var waitingSends: [(WebSocketFrame, @Sendable (PorterError?) -> Void)] = []
    private var pongInFlight = false
    private var latestPing: [UInt8]?

    private let invalidatedAtCreation: Bool

    init(session: Session, identifier: Int, request: Request, protocols: [String], delegate: (any WebSocketDelegate)?,
         invalidated: Bool = false) {
        self.invalidatedAtCreation = invalidated
        self.session = session
        self.taskIdentifier = identifier
        self.originalRequest = request
        self.protocols = protocols
        self.delegate = delegate
    }

    public var description: String { "WebSocketTask \(taskIdentifier) \(originalRequest.url.absoluteString) \(state)" }
    public var state: TaskState { lock.withLock { $0.state } }
    /// The close code: the server's, or the one the task closed with; `.invalid` while open.
    public var closeCode: CloseCode { lock.withLock { $0.closeCode } }
    public var closeReason: Data? { lock.withLock { $0.closeReason } }
    /// Why the task failed, once it has (nil after a clean close).
    public var error: PorterError? { lock.withLock { $0.error } }
    /// The server's handshake answer (101, or the status that refused the upgrade).
    public var response: Response? { lock.withLock { $0.response } }
    /// The subprotocol the server chose among those offered, once open.
    public var agreedProtocol: String? { lock.withLock { $0.agreedProtocol } }

    // MARK: - API

    public func resume() {
        let start = lock.withLock { s -> Bool in
            guard s.state == .suspended else { return false }
            s.state = .running
            return true
        }
        guard start else { return }
        queue.async { self.connect() }
    }

    /// Ends the connection at once, without a close handshake; outstanding calls fail
    /// with `.cancelled`.
    public func cancel() {
        queue.async { self.finish(PorterError(.cancelled, "the WebSocket task was cancelled", url: self.originalRequest.url), code: nil) }
    }

    /// Sends a close frame with `code` and `reason` (at most 123 bytes), waits up to 5 s for
    /// the server's, then ends the connection. Messages already received can still be read.
    public func cancel(with code: CloseCode, reason: Data?) {
        queue.async { self.startClose(code, reason ?? Data()) }
    }

    /// Sends a message whole (one frame); `completionHandler` runs once it was written.
    /// A send asked before the connection is open waits for it.
    public func send(_ message: Message, completionHandler: @escaping @Sendable (PorterError?) -> Void) {
        queue.async { [self] in
            let frame: WebSocketFrame
            switch message {
            case .data(let d): frame = WebSocketFrame(fin: true, opcode: .binary, payload: Array(d))
            case .string(let s): frame = WebSocketFrame(fin: true, opcode: .text, payload: Array(s.utf8))
            }
            sendWhenOpen(frame) { error in self.deliver { completionHandler(error) } }
        }
    }

    public func send(_ message: Message) async throws {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            send(message) { error in
                if let error { c.resume(throwing: error) } else { c.resume() }
            }
        }
    }

    /// The next whole message. Messages that arrived before the close are still given;
    /// after them, the call fails (the task's error, or a closed-connection error).
    public func receive(completionHandler: @escaping @Sendable (Result<Message, PorterError>) -> Void) {
        queue.async { [self] in
            receivers.append(completionHandler)
            serveReceivers()
            readMore()
        }
    }

    public func receive() async throws -> Message {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Message, any Error>) in
            receive { result in c.resume(with: result.mapError { $0 as any Error }) }
        }
    }

    /// Sends a ping; `pongReceiveHandler` runs when its pong comes back (nil), or with
    /// the error that ended the connection first.
    public func sendPing(pongReceiveHandler: @escaping @Sendable (PorterError?) -> Void) {
        queue.async { [self] in
            guard phase != .closing && phase != .closed else { return deliver { pongReceiveHandler(self.notOpen()) } }
            nextPing &+= 1
            let payload = withUnsafeBytes(of: nextPing.bigEndian) { Array($0) }
            pongHandlers.append((payload, pongReceiveHandler))
            sendWhenOpen(WebSocketFrame(fin: true, opcode: .ping, payload: payload)) { error in
                if let error { self.queue.async { self.failPong(payload, error) } }
            }
            readMore()
        }
    }

    // MARK: - connection (queue)

    /// Writes a frame now if the connection is open, after the handshake if it is not
    /// yet (sends asked before or during the opening wait for it, as URLSession's do).
    private func sendWhenOpen(_ frame: WebSocketFrame, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        switch phase {
        case .open: write(frame, completion)
        case .idle, .connecting, .handshaking: waitingSends.append((frame, completion))
        case .closing, .closed: completion(notOpen())
        }
    }

    private func deliver(_ work: @escaping @Sendable () -> Void) {
        if let session { session.deliver(work) } else { DispatchQueue.global().async(execute: work) }
    }

    private func notOpen() -> PorterError {
        if let error = lock.withLock({ $0.error }) { return error }
        switch phase {
        case .idle, .connecting, .handshaking:
            return PorterError(.unsupportedConfiguration, "the WebSocket is not open yet (resume() it and wait for it to open)", url: originalRequest.url)
        default:
            return PorterError(.networkConnectionLost, "the WebSocket is closed (code \(closeCode))", url: originalRequest.url)
        }
    }

    private func connect() {
        guard phase == .idle else { return }
        let url = originalRequest.url
        if invalidatedAtCreation {
            return finish(PorterError(.sessionInvalidated, "the session was invalidated", url: url), code: nil)
        }
        let scheme = url.scheme?.lowercased() ?? ""
        let secure: Bool
        switch scheme {
        case "ws", "http": secure = false
        case "wss", "https": secure = true
        default:
            return finish(PorterError(.unsupportedURL, "a WebSocket URL starts with ws:// or wss://", url: url), code: nil)
        }
        guard let host = url.host, !host.isEmpty, url.fragment == nil else {
            return finish(PorterError(.badURL, "a WebSocket URL needs a host and no fragment (RFC 6455 §3)", url: url), code: nil)
        }
        // The host goes into the Host field: no controls, spaces or separators of a field.
        guard host.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ",") && $0 != UInt8(ascii: "/") }) else {
            return finish(PorterError(.badURL, "the URL's host is not a host name or address", url: url), code: nil)
        }
        // Subprotocols are tokens (RFC 6455 §4.1, RFC 7230 §3.2.6).
        guard protocols.allSatisfy(HTTPSyntax.isToken) else {
            return finish(PorterError(.unsupportedConfiguration, "a subprotocol name must be a token (letters, digits and !#$%&'*+-.^_`|~)", url: url), code: nil)
        }
        guard let session else { return finish(PorterError(.sessionInvalidated, "the session is gone", url: url), code: nil) }
        let port = url.port ?? (secure ? 443 : 80)
        maximumSizes()
        guard let stream = session.openStream(to: ByteStreamTarget(host: host, port: port, secure: secure),
                                              scheme: secure ? "https" : "http") else {
            return finish(PorterError(.unsupportedURL, "no registered handler carries streams (is the http handler registered? Porter.bootstrap())", url: url), code: nil)
        }
        self.stream = stream
        phase = .connecting
        armOpenTimer()
        stream.open { error in
            self.queue.async {
                guard self.phase == .connecting else { return }
                if let error { return self.finish(error, code: nil) }
                self.sendHandshake(host: host, port: port, secure: secure)
            }
        }
    }

    private func maximumSizes() {
        let limit = lock.withLock { $0.maximumMessageSize }
        parser = WebSocketFrameParser(maximumPayload: limit)
        assembler = WebSocketMessageAssembler(maximumMessageSize: limit)
    }

    private func sendHandshake(host: String, port: Int, secure: Bool) {
        guard let stream, let session else { return }
        var nonce = [UInt8](repeating: 0, count: 16)
        var rng = SystemRandomNumberGenerator()
        for i in nonce.indices { nonce[i] = rng.next() }
        key = Data(nonce).base64EncodedString()
        let url = originalRequest.url
        // The path and query as they are encoded in the URL: decoding them would let a
        // %0D%0A in a URL into the request line.
        let parts = URLComponents(url: url, resolvingAgainstBaseURL: false)
        var target = parts?.percentEncodedPath ?? "/"
        if target.isEmpty { target = "/" }
        if let query = parts?.percentEncodedQuery { target += "?" + query }
        guard !target.utf8.contains(where: { $0 <= 0x20 || $0 >= 0x7F }) else {
            return finish(PorterError(.badURL, "the URL's path has characters a request line cannot carry", url: url), code: nil)
        }
        let defaultPort = secure ? 443 : 80
        let hostField = (host.contains(":") ? "[\(host)]" : host) + (port == defaultPort ? "" : ":\(port)")
        var lines = ["GET \(target) HTTP/1.1", "Host: \(hostField)", "Upgrade: websocket", "Connection: Upgrade",
                     "Sec-WebSocket-Key: \(key)", "Sec-WebSocket-Version: 13"]
        if !protocols.isEmpty { lines.append("Sec-WebSocket-Protocol: " + protocols.joined(separator: ", ")) }
        let reserved: Set<String> = ["host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
                                     "sec-websocket-protocol", "sec-websocket-extensions", "content-length", "transfer-encoding"]
        var named = Set<String>()
        for field in originalRequest.headerFields where !reserved.contains(field.name.canonicalName) {
            guard !field.value.contains(where: { $0 == "\r" || $0 == "\n" }) else { continue }
            named.insert(field.name.canonicalName)
            lines.append("\(field.name.rawName): \(field.value)")
        }
        for field in session.configuration.additionalHeaders
        where !reserved.contains(field.name.canonicalName) && !named.contains(field.name.canonicalName) {
            guard !field.value.contains(where: { $0 == "\r" || $0 == "\n" }) else { continue }
            lines.append("\(field.name.rawName): \(field.value)")
        }
        if session.configuration.httpShouldSetCookies, !named.contains("cookie"),
           let cookies = session.configuration.cookieStore?.cookieHeader(for: cookieURL, mainDocumentURL: nil) {
            lines.append("Cookie: \(cookies)")
        }
        let text = lines.joined(separator: "\r\n") + "\r\n\r\n"
        phase = .handshaking
        stream.write(Data(text.utf8)) { error in
            if let error { self.queue.async { self.finish(error, code: nil) } }
        }
        readHead()
    }

    /// The http(s) URL cookies are matched against (RFC 6455 §4.1: ws is http, wss https).
    private var cookieURL: URL {
        var c = URLComponents(url: originalRequest.url, resolvingAgainstBaseURL: false)
        if c?.scheme == "ws" { c?.scheme = "http" } else if c?.scheme == "wss" { c?.scheme = "https" }
        return c?.url ?? originalRequest.url
    }

    private static let headLimit = 16 * 1024

    private func readHead() {
        guard let stream else { return }
        stream.read(maxLength: 4096) { result in
            self.queue.async {
                guard self.phase == .handshaking else { return }
                switch result {
                case .failure(let error): self.finish(error, code: nil)
                case .success(let data):
                    if data.isEmpty {
                        return self.finish(PorterError(.networkConnectionLost, "the server closed the connection during the handshake",
                                                       url: self.originalRequest.url), code: nil)
                    }
                    self.head.append(contentsOf: data)
                    self.headArrived()
                }
            }
        }
    }

    private func headArrived() {
        guard let end = WebSocketTask.endOfHead(head) else {
            if head.count > WebSocketTask.headLimit {
                return finish(PorterError(.badServerResponse, "the handshake answer is longer than 16 KiB", url: originalRequest.url), code: nil)
            }
            return readHead()
        }
        let rest = Array(head[(end + 4)...])
        let bytes = Array(head[..<end])
        head = []
        let url = originalRequest.url
        do {
            let parsed = try WebSocketHandshake.parseHead(bytes)
            var fields = HTTPFields()
            for f in parsed.fields {
                if let name = HTTPField.Name(f.name) { fields.append(HTTPField(name: name, value: f.value)) }
            }
            var response = Response(url: url, mimeType: nil, expectedContentLength: -1, statusCode: parsed.status, headerFields: fields)
            response.statusLine = "HTTP/1.1 \(parsed.status) \(parsed.reason)"
            lock.withLock { $0.response = response }
            if let store = session?.configuration.cookieStore, session?.configuration.httpShouldSetCookies == true {
                let setCookies = parsed.values("Set-Cookie")
                if !setCookies.isEmpty { store.storeCookies(fromHeaders: setCookies, for: cookieURL, mainDocumentURL: nil) }
            }
            guard parsed.status == 101 else {
                return finish(PorterError(.badServerResponse, "the server refused the WebSocket upgrade: \(parsed.status) \(parsed.reason)",
                                          url: url), code: nil)
            }
            let agreed = try WebSocketHandshake.validate(parsed, key: key, offered: protocols)
            lock.withLock { $0.agreedProtocol = agreed }
            phase = .open
            openTimer?.cancel()
            if let delegate { deliver { delegate.webSocketTask(self, didOpenWithProtocol: agreed) } }
            let sends = waitingSends
            waitingSends = []
            for (frame, done) in sends { write(frame, done) }
            parser.append(rest)
            processFrames()
            readMore()
        } catch {
            finish(PorterError(.badServerResponse, "the WebSocket handshake failed: \(error.message)", url: url), code: nil)
        }
    }

    static func endOfHead(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i
        }
        return nil
    }

    /// Reads while someone waits for a message or a pong, or while little is buffered
    /// (so pings are answered and the close is seen); a consumer that stops reading
    /// stops the reads once a message's worth waits (back-pressure on the server).
    private func readMore() {
        guard phase == .open || phase == .closing, !reading, let stream else { return }
        let limit = lock.withLock { $0.maximumMessageSize }
        guard receivers.count > 0 || phase == .closing || messageBytes < limit else { return }
        reading = true
        stream.read(maxLength: 64 * 1024) { result in
            self.queue.async {
                self.reading = false
                guard self.phase == .open || self.phase == .closing else { return }
                switch result {
                case .failure(let error):
                    self.finish(error, code: .abnormalClosure)
                case .success(let data):
                    if data.isEmpty {
                        if self.phase == .closing {
                            return self.finish(nil, code: nil)
                        }
                        return self.finish(PorterError(.networkConnectionLost, "the server closed the connection without a close frame",
                                                       url: self.originalRequest.url), code: .abnormalClosure)
                    }
                    self.parser.append(data)
                    self.processFrames()
                    self.readMore()
                }
            }
        }
    }

    private func processFrames() {
        // The limit applies from the next frame when it changes while open.
        let limit = lock.withLock { $0.maximumMessageSize }
        parser.maximumPayload = limit
        assembler.maximumMessageSize = limit
        while phase == .open || phase == .closing {
            let event: WebSocketEvent?
            do {
                guard let frame = try parser.next() else { return }
                event = try assembler.take(frame)
            } catch {
                return failConnection(error)
            }
            guard let event else { continue }
            switch event {
            case .message(let m):
                guard phase == .open else { continue }   // data after our close is dropped (§5.5.1)
                messages.append(m)
                messageBytes += WebSocketTask.size(m)
                serveReceivers()
            case .ping(let payload):
                if !closeSent { answerPing(payload) }
            case .pong(let payload):
                if let i = pongHandlers.firstIndex(where: { $0.payload == payload }) {
                    let handler = pongHandlers.remove(at: i)
                    deliver { handler.done(nil) }
                }
            case .close(let code, let reason):
                lock.withLock { s in
                    s.closeCode = code ?? .noStatusReceived
                    s.closeReason = reason
                }
                if !closeSent {
                    closeSent = true
                    var body: [UInt8] = []
                    if let code { body = [UInt8(code.rawValue >> 8), UInt8(code.rawValue & 0xFF)] }
                    write(WebSocketFrame(fin: true, opcode: .close, payload: body)) { _ in
                        self.queue.async { self.finish(nil, code: nil) }
                    }
                    phase = .closing
                    armCloseTimer()
                } else {
                    finish(nil, code: nil)
                }
                return
            }
        }
    }

    /// One pong on its way at a time; pings that come meanwhile are answered by one pong
    /// for the latest (RFC 6455 §5.5.3 allows it), so a server that pings without reading
    /// cannot grow the write queue.
    private func answerPing(_ payload: [UInt8]) {
        if pongInFlight {
            latestPing = payload
            return
        }
        pongInFlight = true
        write(WebSocketFrame(fin: true, opcode: .pong, payload: payload)) { _ in
            self.queue.async {
                self.pongInFlight = false
                if let next = self.latestPing, !self.closeSent {
                    self.latestPing = nil
                    self.answerPing(next)
                }
            }
        }
    }

    /// What a queued message costs: its bytes, and at least 64 (an empty message is not
    /// free to keep, so a flood of them also stops the reads).
    private static func size(_ m: Message) -> Int {
        switch m {
        case .data(let d): return max(64, d.count)
        case .string(let s): return max(64, s.utf8.count)
        }
    }

    private func serveReceivers() {
        while !receivers.isEmpty && !messages.isEmpty {
            let r = receivers.removeFirst()
            let m = messages.removeFirst()
            messageBytes -= WebSocketTask.size(m)
            deliver { r(.success(m)) }
        }
        if phase == .closed && messages.isEmpty && !receivers.isEmpty {
            let error = notOpen()
            let waiting = receivers
            receivers = []
            for r in waiting { deliver { r(.failure(error)) } }
        }
    }

    /// The server broke the protocol: send the close code the RFC names, then end.
    private func failConnection(_ error: WebSocketProtocolError) {
        let failure = PorterError(error.code == .messageTooBig ? .dataLengthExceedsMaximum : .badServerResponse,
                                  "the WebSocket server broke the protocol: \(error.message) (close code \(error.code))",
                                  url: originalRequest.url)
        lock.withLock { s in
            s.closeCode = error.code
            if s.error == nil { s.error = failure }
        }
        if !closeSent {
            closeSent = true
            let body = [UInt8(error.code.rawValue >> 8), UInt8(error.code.rawValue & 0xFF)]
            write(WebSocketFrame(fin: true, opcode: .close, payload: body)) { _ in
                self.queue.async { self.finish(failure, code: error.code) }
            }
            phase = .closing
            armCloseTimer()
        } else {
            finish(failure, code: error.code)
        }
    }

    private func startClose(_ code: CloseCode, _ reason: Data) {
        switch phase {
        case .open:
            guard CloseCode.maySend(code.rawValue) || code == .invalid else {
                return finish(PorterError(.unsupportedConfiguration, "the close code \(code) may not be sent", url: originalRequest.url), code: nil)
            }
            closeSent = true
            phase = .closing
            lock.withLock { s in
                s.closeCode = code == .invalid ? .noStatusReceived : code
                s.closeReason = reason
            }
            var body: [UInt8] = []
            if code != .invalid {
                body = [UInt8(code.rawValue >> 8), UInt8(code.rawValue & 0xFF)] + WebSocketTask.closeReason(reason)
            }
            write(WebSocketFrame(fin: true, opcode: .close, payload: body)) { _ in }
            armCloseTimer()
            readMore()
        case .closing, .closed:
            return
        case .idle, .connecting, .handshaking:
            finish(PorterError(.cancelled, "the WebSocket task was cancelled", url: originalRequest.url), code: nil)
        }
    }

    /// A closing handshake gets 5 s: a peer that neither answers nor reads (so our close
    /// frame never leaves) cannot hold the task open.
    private func armCloseTimer() {
        guard closeTimer == nil else { return }
        let timer = DispatchWorkItem { [weak self] in
            guard let self else { return }
            let failure = self.lock.withLock { $0.error }
            self.finish(failure, code: nil)
        }
        closeTimer = timer
        queue.asyncAfter(deadline: .now() + 5, execute: timer)
    }

    /// Until the connection is open: the session's request timeout (or the request's) for
    /// the connect and the handshake together, as URLSession's.
    private func armOpenTimer() {
        let limit = originalRequest.timeoutInterval > 0 ? originalRequest.timeoutInterval
            : (session?.configuration.timeoutIntervalForRequest ?? 60)
        let timer = DispatchWorkItem { [weak self] in
            guard let self, self.phase == .connecting || self.phase == .handshaking else { return }
            self.finish(PorterError(.timedOut, "the WebSocket did not open within \(limit) s", url: self.originalRequest.url), code: nil)
        }
        openTimer = timer
        queue.asyncAfter(deadline: .now() + limit, execute: timer)
    }

    private func write(_ frame: WebSocketFrame, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        guard let stream else { return completion(notOpen()) }
        var rng = SystemRandomNumberGenerator()
        let mask = (UInt8(truncatingIfNeeded: rng.next()), UInt8(truncatingIfNeeded: rng.next()),
                    UInt8(truncatingIfNeeded: rng.next()), UInt8(truncatingIfNeeded: rng.next()))
        stream.write(Data(frame.encoded(mask: mask)), completion)
    }

    /// At most 123 bytes of the reason, cut at a UTF-8 character boundary (§5.5.1).
    static func closeReason(_ reason: Data) -> [UInt8] {
        var bytes = Array(reason.prefix(123))
        while !bytes.isEmpty, String(validating: bytes, as: UTF8.self) == nil { bytes.removeLast() }
        return bytes
    }

    private func failPong(_ payload: [UInt8], _ error: PorterError) {
        guard let i = pongHandlers.firstIndex(where: { $0.payload == payload }) else { return }
        let handler = pongHandlers.remove(at: i)
        deliver { handler.done(error) }
    }

    /// Ends the task: with `error` (nil: a clean close), reporting `code` as the close
    /// code when none was set (1006 for a lost connection).
    private func finish(_ error: PorterError?, code: CloseCode?) {
        guard phase != .closed else { return }
        phase = .closed
        closeTimer?.cancel()
        openTimer?.cancel()
        stream?.close()
        stream = nil
        let (closeCode, reason) = lock.withLock { s -> (CloseCode, Data?) in
            s.state = .completed
            if s.error == nil { s.error = error }
            if s.closeCode == .invalid, let code { s.closeCode = code }
            return (s.closeCode, s.closeReason)
        }
        let failure = error ?? notOpen()
        let sends = waitingSends
        waitingSends = []
        for (_, done) in sends { done(failure) }
        let pongs = pongHandlers
        pongHandlers = []
        for p in pongs { deliver { p.done(failure) } }
        serveReceivers()
        if let delegate {
            if closeCode != .invalid { deliver { delegate.webSocketTask(self, didCloseWith: closeCode, reason: reason) } }
            let ended = lock.withLock { $0.error }
            deliver { delegate.webSocketTask(self, didCompleteWithError: ended) }
        }
    }
}

extension Session {
    /// A WebSocket task for `url` (ws://, wss://), offering `protocols` as subprotocols.
    public func webSocketTask(with url: URL, protocols: [String] = [], delegate: (any WebSocketDelegate)? = nil) -> WebSocketTask {
        webSocketTask(with: Request(url: url), protocols: protocols, delegate: delegate)
    }

    /// A WebSocket task for a request: its header fields go into the opening handshake
    /// (a Sec-WebSocket-Protocol field there is replaced by `protocols`).
    /// A task made after the session was invalidated fails with `.sessionInvalidated`.
    public func webSocketTask(with request: Request, protocols: [String] = [], delegate: (any WebSocketDelegate)? = nil) -> WebSocketTask {
        let (id, invalidated) = reserveTaskIdentifier()
        let task = WebSocketTask(session: self, identifier: id, request: request, protocols: protocols, delegate: delegate,
                                 invalidated: invalidated)
        track(task, identifier: id)
        return task
    }
}
