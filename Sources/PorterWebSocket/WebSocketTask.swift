import Foundation
import PorterCore
import PorterSession
import PorterEngine
import HTTPTypes

/// The open and close of a WebSocket task (URLSessionWebSocketDelegate's two calls),
/// on the session's delegate queue.
public protocol WebSocketDelegate: AnyObject, Sendable {
    func webSocketTask(_ task: WebSocketTask, didOpenWithProtocol protocol: String?)
    func webSocketTask(_ task: WebSocketTask, didCloseWith code: WebSocketTask.CloseCode, reason: Data?)
    /// The task ended: nil after a clean close, else why (URLSession's didCompleteWithError).
    func webSocketTask(_ task: WebSocketTask, didCompleteWithError error: PorterError?)
    /// The server asked for credentials during the opening handshake (a 401: Negotiate,
    /// NTLM, Digest or Basic, the strongest offered first). The default answer is
    /// `.performDefaultHandling`: the URL's or the credential store's credential, once
    /// (Negotiate: the user's Kerberos tickets).
    func webSocketTask(_ task: WebSocketTask, didReceive challenge: AuthenticationChallenge,
                       completion: @escaping @Sendable (ChallengeDisposition) -> Void)
}

extension WebSocketDelegate {
    public func webSocketTask(_ task: WebSocketTask, didOpenWithProtocol protocol: String?) {}
    public func webSocketTask(_ task: WebSocketTask, didCloseWith code: WebSocketTask.CloseCode, reason: Data?) {}
    public func webSocketTask(_ task: WebSocketTask, didCompleteWithError error: PorterError?) {}
    public func webSocketTask(_ task: WebSocketTask, didReceive challenge: AuthenticationChallenge,
                              completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        completion(.performDefaultHandling)
    }
}

/// A WebSocket connection (RFC 6455): Porter's URLSessionWebSocketTask.
///
/// Made by `Session.webSocketTask(with:)` for a ws:// or wss:// URL (http and https
/// are taken as ws and wss). `resume()` connects through the session's proxy and TLS
/// settings, sends the opening handshake (with the request's header fields, the
/// session's additional headers and its cookies) and checks the answer. Messages are
/// then sent and received whole; fragments from the server are joined, pings are
/// answered, and a server that breaks the protocol gets the close code the RFC names
/// (1002, 1007, 1009) and the task fails. permessage-deflate (RFC 7692) is offered unless
/// the session or the task turns it off; redirects and authentication challenges in the
/// opening handshake are followed as a data task's are.
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
        static func maySend(_ code: Int) -> Bool { ConnectionTaskMachine.maySend(closeCode: code) }
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
    /// The permessage-deflate offer of the opening handshake (nil: none). Starts as the
    /// session's `webSocketPerMessageDeflate` says; a change counts until `resume()`.
    public var perMessageDeflate: PerMessageDeflate? {
        get { lock.withLock { $0.offeredDeflate } }
        set { lock.withLock { $0.offeredDeflate = newValue } }
    }
    /// What the server agreed to of permessage-deflate, once open (nil: no compression).
    public var agreedPerMessageDeflate: PerMessageDeflate? { lock.withLock { $0.agreedDeflate } }

    struct Shared {
        var state = TaskState.suspended
        var maximumMessageSize = 1 << 20
        var description: String?
        var closeCode = CloseCode.invalid
        var closeReason: Data?
        var error: PorterError?
        var response: Response?
        var agreedProtocol: String?
        var offeredDeflate: PerMessageDeflate?
        var agreedDeflate: PerMessageDeflate?
        var currentRequest: Request
    }
    let lock: Locked<Shared>
    let session: Session?
    let delegate: (any WebSocketDelegate)?
    let protocols: [String]
    private let taskQueue = TaskQueue(label: "porter.websocket")
    var queue: DispatchQueue { taskQueue.queue }

    /// What waits for the connection to open: a message is encoded (and compressed) only
    /// once the extensions are known.
    enum Outgoing {
        case message(Message)
        case control(WebSocketFrame)
    }
    /// An operation the app asked, kept by the id the machine answers it by.
    enum Pending {
        /// The outgoing frame is dropped once written.
        case send(Outgoing?, @Sendable (PorterError?) -> Void)
        case ping([UInt8], @Sendable (PorterError?) -> Void)
        case receive(@Sendable (Result<Message, PorterError>) -> Void)
    }

    // queue only:
    /// The life cycle: the shell performs what it decides and feeds back what happened.
    var machine: ConnectionTaskMachine
    /// Events not yet handled (see `handle`).
    var inbox: [ConnectionTaskMachine.Event] = []
    /// The connection attempt `stream` belongs to (from the machine's `connect`).
    var attempt = 0
    /// How frames are read (from the machine's `enter`); nil before the opening.
    var mode: ConnectionTaskMachine.Mode?
    var timers: [ConnectionTaskMachine.Timer: DispatchWorkItem] = [:]
    var operations: [Int: Pending] = [:]
    var nextOperation = 0
    /// Where the current attempt's handshake goes (from `connect`).
    var target: (request: Request, host: String, port: Int, secure: Bool)?
    var stream: (any ByteStream)?
    var handshake = WebSocketOpening()
    var parser = WebSocketFrameParser(maximumPayload: 1 << 20)
    var assembler = WebSocketMessageAssembler(maximumMessageSize: 1 << 20)
    var deflater: WebSocketDeflateStream?
    var deflaterResetsPerMessage = false
    var messages: [Message] = []
    var messageBytes = 0
    /// The parser met a protocol violation: nothing more is parsed (the machine decides
    /// when the connection fails; frames are read on only for the end of the stream).
    var parserFailed = false
    /// A message was handed to the app and it has not asked for the next yet (it may be
    /// answering it).
    var appHasTheTurn = false
    /// Receives waiting for a message, in order (ids of `operations`).
    var receivers: [Int] = []
    /// Messages handed over by `succeed`, by receive id.
    var answers: [Int: Message] = [:]
    /// Pings written, waiting for their pongs (ids of `operations`).
    var pings: [(payload: [UInt8], id: Int)] = []
    var nextPing: UInt32 = 0
    var reading = false
    /// A large message is being written a piece at a time; frames asked meanwhile wait in
    /// `heldWrites`, in order (WebSocketTask+Writer).
    var writingInPieces = false
    var heldWrites: [() -> Void] = []
    /// Pongs written but not yet sent: frames are not read on while `pongWindow` wait.
    var pongsInFlight = 0
    static let pongWindow = 16

    let invalidatedAtCreation: Bool
    let openingTimeout: Double

    init(session: Session, identifier: Int, request: Request, protocols: [String], delegate: (any WebSocketDelegate)?,
         invalidated: Bool = false) {
        self.invalidatedAtCreation = invalidated
        self.session = session
        self.taskIdentifier = identifier
        self.originalRequest = request
        self.protocols = protocols
        self.delegate = delegate
        var shared = Shared(currentRequest: request)
        shared.offeredDeflate = session.configuration.webSocketPerMessageDeflate ? PerMessageDeflate() : nil
        self.lock = Locked(shared)
        let limit = request.timeoutInterval > 0 ? request.timeoutInterval : session.configuration.timeoutIntervalForRequest
        self.openingTimeout = limit
        self.machine = ConnectionTaskMachine(kind: .webSocket, url: request.url, openingTimeout: limit)
    }

    /// Runs `event` through the machine before returning, on the task's queue (at once
    /// when already on it: an event met while others are performed waits in the inbox):
    /// a task's state has changed when resume() or cancel() returns, as URLSessionTask's.
    private func now(_ event: ConnectionTaskMachine.Event) {
        taskQueue.runNow(deliversInline: session?.deliversInline == true) { self.handle(event) }
    }

    public var description: String { "WebSocketTask \(taskIdentifier) \(originalRequest.url.absoluteString) \(state)" }
    public var state: TaskState { lock.withLock { $0.state } }
    /// The request of the handshake that opened (or last tried): after a redirect, the
    /// URL it led to.
    public var currentRequest: Request { lock.withLock { $0.currentRequest } }
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
        now(.resume)
    }

    /// Ends the connection at once, without a close handshake; outstanding calls fail
    /// with `.cancelled`.
    public func cancel() {
        now(.cancel)
    }

    /// Sends a close frame with `code` and `reason` (at most 123 bytes), waits up to 5 s for
    /// the server's, then ends the connection. Messages already received can still be read.
    public func cancel(with code: CloseCode, reason: Data?) {
        now(.close(code: code.rawValue, reason: reason ?? Data()))
    }

    /// Sends a message whole (one frame, compressed when permessage-deflate was agreed and
    /// that makes it smaller); `completionHandler` runs once it was written. A send asked
    /// before the connection is open waits for it.
    public func send(_ message: Message, completionHandler: @escaping @Sendable (PorterError?) -> Void) {
        queue.async { [self] in ask(.send(.message(message), completionHandler), waitsForOpen: true) }
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
            appHasTheTurn = false
            // Messages that arrived before the end are still given after it.
            if receivers.isEmpty, !messages.isEmpty {
                let m = messages.removeFirst()
                messageBytes -= WebSocketTask.size(m)
                appHasTheTurn = true
                deliver { completionHandler(.success(m)) }
                return readMore()
            }
            ask(.receive(completionHandler), waitsForOpen: false)
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
            nextPing &+= 1
            let payload = withUnsafeBytes(of: nextPing.bigEndian) { Array($0) }
            ask(.ping(payload, pongReceiveHandler), waitsForOpen: true)
        }
    }

    func deliver(_ work: @escaping @Sendable () -> Void) {
        if let session { session.deliver(work) } else { DispatchQueue.global().async(execute: work) }
    }

    /// What a write on a connection that is gone fails with.
    func connectionGone() -> PorterError {
        PorterError(.networkConnectionLost, "the WebSocket connection is closed", url: originalRequest.url)
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

extension WebSocketTask: ConnectionTask {}
