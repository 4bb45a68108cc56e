import Foundation
import PorterCore
import PorterSession
import PorterEngine

/// A TCP connection to a host and port: Porter's URLSessionStreamTask.
///
/// Made by `Session.streamTask(withHostName:port:)`; nothing happens until `resume()`.
/// Reads and writes may be asked before the connection is up: they wait for it, and each
/// direction is served in the order asked. The connection is libcurl's (connect-only),
/// so it goes through the session's proxy (as a CONNECT tunnel) and address overrides,
/// and `startSecureConnection()` verifies the server with the session's trust settings.
/// Completion handlers run on the session's delegate queue.
public final class StreamTask: @unchecked Sendable, CustomStringConvertible {
    public let taskIdentifier: Int
    public let host: String
    public let port: Int
    public var taskDescription: String? {
        get { lock.withLock { $0.description } }
        set { lock.withLock { $0.description = newValue } }
    }
    private let session: Session?
    private let stream: (any ByteStream)?
    private let taskQueue = TaskQueue(label: "porter.stream-task")
    private var queue: DispatchQueue { taskQueue.queue }

    /// An operation the app asked, kept by the id the machine answers it by.
    private enum Pending {
        case read(minLength: Int, maxLength: Int, @Sendable (Data?, Bool, PorterError?) -> Void)
        /// The bytes are dropped once handed to the stream.
        case write(Data?, @Sendable (PorterError?) -> Void)
    }
    private struct State {
        var state = TaskState.suspended
        var error: PorterError?
        var description: String?
    }
    private let lock = Locked(State())
    // queue only:
    /// The life cycle: the shell performs what it decides and feeds back what happened.
    private var machine = ConnectionTaskMachine(kind: .stream)
    /// Events not yet handled (see `handle`).
    private var inbox: [ConnectionTaskMachine.Event] = []
    private var operations: [Int: Pending] = [:]
    private var nextOperation = 0
    private var timeouts: [Int: TimeInterval] = [:]
    private var timers: [ConnectionTaskMachine.Timer: DispatchWorkItem] = [:]
    /// Reads waiting for bytes, in order (ids of `operations`).
    private var reads: [Int] = []
    /// What `succeed` hands a read.
    private var readAnswers: [Int: (Data, Bool)] = [:]
    private var readInFlight = false
    /// Bytes read for a read that timed out: the next read gets them first.
    private var carry = Data()
    private var atEnd = false

    private let startError: PorterError?

    init(session: Session, identifier: Int, host: String, port: Int, stream: (any ByteStream)?, startError: PorterError? = nil) {
        self.session = session
        self.taskIdentifier = identifier
        self.host = host
        self.port = port
        self.stream = stream
        self.startError = startError
    }

    /// Runs `event` through the machine before returning, on the task's queue (at once
    /// when already on it): the state has changed when resume() or cancel() returns.
    private func now(_ event: ConnectionTaskMachine.Event) {
        taskQueue.runNow(deliversInline: session?.deliversInline == true) { self.handle(event) }
    }

    public var state: TaskState { lock.withLock { $0.state } }
    /// Why the connection failed or ended, once it has.
    public var error: PorterError? { lock.withLock { $0.error } }
    public var description: String { "StreamTask \(taskIdentifier) \(host):\(port) \(state)" }

    /// Connects. A task that fails to connect fails every read and write it was asked.
    public func resume() {
        now(.resume)
    }

    /// Closes the connection at once: outstanding reads and writes fail with `.cancelled`.
    public func cancel() {
        now(.cancel)
    }

    /// Reads at least `minLength` bytes (fewer only at the end of the stream) and at most
    /// `maxLength`; `atEOF` is true when the stream has ended. A read that waits longer than
    /// `timeout` seconds (0: no limit) fails with `.timedOut`, and the bytes it had gathered
    /// go to the next read.
    public func readData(ofMinLength minLength: Int, maxLength: Int, timeout: TimeInterval,
                         completionHandler: @escaping @Sendable (Data?, Bool, PorterError?) -> Void) {
        queue.async { [self] in
            guard minLength >= 0, maxLength >= 1, minLength <= maxLength else {
                return deliver { completionHandler(nil, false, PorterError(.unsupportedConfiguration, "a read needs 0 <= minLength <= maxLength and maxLength >= 1")) }
            }
            ask(.read(minLength: minLength, maxLength: maxLength, completionHandler), timeout: timeout,
                PorterError(.timedOut, "no data within the read's timeout"))
        }
    }

    /// `readData(ofMinLength:maxLength:timeout:)` for async callers.
    public func read(minLength: Int = 1, maxLength: Int, timeout: TimeInterval = 0) async throws -> (data: Data, atEOF: Bool) {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<(data: Data, atEOF: Bool), any Error>) in
            readData(ofMinLength: minLength, maxLength: maxLength, timeout: timeout) { data, eof, error in
                if let error { c.resume(throwing: error) } else { c.resume(returning: (data ?? Data(), eof)) }
            }
        }
    }

    /// Writes all of `data`, after the writes asked before it. `timeout` (0: no limit)
    /// bounds the wait for the write to complete; it then fails with `.timedOut`.
    public func write(_ data: Data, timeout: TimeInterval, completionHandler: @escaping @Sendable (PorterError?) -> Void) {
        // Through the task's queue, as startSecureConnection goes: a write asked after it
        // reaches the stream after it, so it is encrypted.
        queue.async { [self] in
            ask(.write(data, completionHandler), timeout: timeout, PorterError(.timedOut, "the write did not complete in \(timeout) s"))
        }
    }

    /// `write(_:timeout:completionHandler:)` for async callers.
    public func write(_ data: Data, timeout: TimeInterval = 0) async throws {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            write(data, timeout: timeout) { error in
                if let error { c.resume(throwing: error) } else { c.resume() }
            }
        }
    }

    /// After the writes already asked for, ends the sending side: the server reads the
    /// end of the stream (a TCP half-close); reads go on.
    public func closeWrite() {
        guard let stream else { return }
        queue.async { stream.closeWrite() }
    }

    /// Ends the reading side: outstanding and later reads complete at the end of the stream.
    public func closeRead() {
        stream?.closeRead()
    }

    /// After the writes already asked for, starts TLS with the host (verified with the
    /// session's trust settings: CA file, or the system's CAs; `tlsVerificationDisabled`
    /// turns it off). Reads and writes asked after it go through TLS; a failed handshake
    /// ends the task with `.serverCertificateUntrusted` or `.secureConnectionFailed`.
    ///
    /// Plain bytes that arrived and were not read yet (those of a read that timed out)
    /// would be read after the handshake as if they had come through TLS: a task holding
    /// some fails with `.secureConnectionFailed` instead of starting TLS.
    public func startSecureConnection() {
        guard let stream else { return }
        queue.async { [self] in
            guard carry.isEmpty else {
                return handle(.failed(PorterError(.secureConnectionFailed,
                    "\(carry.count) plain byte(s) arrived before TLS was asked for and were not read: not starting TLS over them"),
                    closeCode: nil, attempt: nil))
            }
            stream.startTLS(serverName: host) { [self] error in
                if let error { queue.async { self.handle(.failed(error, closeCode: nil, attempt: nil)) } }
            }
        }
    }

    // MARK: queue only

    private func deliver(_ work: @escaping @Sendable () -> Void) {
        if let session { session.deliver(work) } else { DispatchQueue.global().async(execute: work) }
    }

    /// An event met while an earlier one's actions are performed (a read served at once,
    /// a failure found while connecting) waits for them: each event's actions are performed
    /// whole and in order, so nothing is performed after the end.
    private func handle(_ event: ConnectionTaskMachine.Event) {
        inbox.append(event)
        guard inbox.count == 1 else { return }
        while let next = inbox.first {
            for action in machine.handle(next) { perform(action) }
            inbox.removeFirst()
        }
    }

    private func ask(_ operation: Pending, timeout: TimeInterval, _ timeoutError: PorterError) {
        nextOperation += 1
        let id = nextOperation
        operations[id] = operation
        if timeout > 0 { timeouts[id] = timeout }
        handle(.asked(ConnectionTaskMachine.Operation(id: id, timeoutError: timeout > 0 ? timeoutError : nil)))
    }

    private func perform(_ action: ConnectionTaskMachine.Action) {
        switch action {
        case .publishState(let state):
            lock.withLock { $0.state = state }
        case .connect:
            guard let stream else {
                let error = startError ?? PorterError(.unsupportedURL, "no registered handler carries streams (is the http handler registered? Porter.bootstrap())")
                return handle(.failed(error, closeCode: nil, attempt: nil))
            }
            stream.open { [self] error in
                if let error { queue.async { self.handle(.failed(error, closeCode: nil, attempt: nil)) } }
            }
        case .closeConnection:
            stream?.close()
        case .schedule(let timer):
            guard case .operation(let id) = timer, let seconds = timeouts[id] else { return }
            let item = DispatchWorkItem { [weak self] in self?.handle(.timerFired(timer)) }
            timers[timer] = item
            queue.asyncAfter(deadline: .now() + seconds, execute: item)
        case .cancelTimer(let timer):
            timers.removeValue(forKey: timer)?.cancel()
        case .perform(let id):
            switch operations[id] {
            case .read?:
                reads.append(id)
                pumpReads()
            case .write(let data?, let done)?:
                operations[id] = .write(nil, done)
                guard let stream else {
                    return handle(.operationFailed(id: id, PorterError(.unsupportedURL, "no registered handler carries streams")))
                }
                stream.write(data) { [self] error in
                    queue.async {
                        if let error { self.handle(.operationFailed(id: id, error)) } else { self.handle(.answered(id: id)) }
                    }
                }
            case .write(nil, _)?, nil:
                break
            }
        case .succeed(let id):
            timeouts[id] = nil
            switch operations.removeValue(forKey: id) {
            case .read(_, _, let done)?:
                guard let (data, eof) = readAnswers.removeValue(forKey: id) else { return }
                deliver { done(data, eof, nil) }
            case .write(_, let done)?:
                deliver { done(nil) }
            case nil:
                break
            }
        case .fail(let id, let error):
            timeouts[id] = nil
            reads.removeAll { $0 == id }
            switch operations.removeValue(forKey: id) {
            case .read(_, _, let done)?:
                deliver { done(nil, false, error) }
            case .write(_, let done)?:
                deliver { done(error) }
            case nil:
                break
            }
        case .publishEnd(let end):
            lock.withLock { s in
                s.state = .completed
                s.error = end.error
            }
        case .finish:
            session?.untrack(identifier: taskIdentifier)
        case .sendHandshake, .reportOpen, .enter, .writeClose:
            // A WebSocket's; a stream has no handshake.
            break
        }
    }

    /// Serves the first read from what was gathered, or asks the stream for more.
    private func pumpReads() {
        while let first = reads.first, case .read(let minLength, let maxLength, _)? = operations[first] {
            if carry.count >= max(1, minLength) || atEnd || (minLength == 0 && !carry.isEmpty) {
                let take = carry.prefix(maxLength)
                carry.removeFirst(take.count)
                reads.removeFirst()
                readAnswers[first] = (Data(take), atEnd && carry.isEmpty)
                handle(.answered(id: first))
                continue
            }
            guard !readInFlight, let stream else { return }
            readInFlight = true
            stream.read(maxLength: max(maxLength - carry.count, 1)) { [self] result in
                queue.async {
                    self.readInFlight = false
                    switch result {
                    case .success(let data):
                        if data.isEmpty { self.atEnd = true } else { self.carry.append(data) }
                        self.pumpReads()
                    case .failure(let error):
                        self.handle(.failed(error, closeCode: nil, attempt: nil))
                    }
                }
            }
            return
        }
    }
}

extension Session {
    /// A stream task to `hostname:port` (URLSession's `streamTask(withHostName:port:)`),
    /// carried by the handler registered for http (libcurl's, after `Porter.bootstrap()`).
    /// A task made after the session was invalidated fails with `.sessionInvalidated`.
    public func streamTask(withHostName hostname: String, port: Int) -> StreamTask {
        let (id, invalidated) = reserveTaskIdentifier()
        let target = ByteStreamTarget(host: hostname, port: port, secure: false)
        let task = StreamTask(session: self, identifier: id, host: hostname, port: port,
                              stream: invalidated ? nil : openStream(to: target, scheme: "http"),
                              startError: invalidated ? PorterError(.sessionInvalidated, "the session was invalidated") : nil)
        track(task, identifier: id)
        return task
    }
}

extension StreamTask: ConnectionTask {}
