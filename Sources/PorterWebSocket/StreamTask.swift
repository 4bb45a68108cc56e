import Foundation
import PorterCore
import PorterSession

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
    private let queue = DispatchQueue(label: "porter.stream-task")

    private struct Read {
        let id: Int
        let minLength: Int
        let maxLength: Int
        let done: @Sendable (Data?, Bool, PorterError?) -> Void
        var timer: DispatchWorkItem?
    }
    private struct State {
        var state = TaskState.suspended
        var error: PorterError?
        var description: String?
    }
    private let lock = Locked(State())
    // queue only:
    private var reads: [Read] = []
    private var nextRead = 0
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

    public var state: TaskState { lock.withLock { $0.state } }
    /// Why the connection failed or ended, once it has.
    public var error: PorterError? { lock.withLock { $0.error } }
    public var description: String { "StreamTask \(taskIdentifier) \(host):\(port) \(state)" }

    /// Connects. A task that fails to connect fails every read and write it was asked.
    public func resume() {
        let start = lock.withLock { s -> Bool in
            guard s.state == .suspended else { return false }
            s.state = .running
            return true
        }
        guard start else { return }
        guard let stream else {
            let error = startError ?? PorterError(.unsupportedURL, "no registered handler carries streams (is the http handler registered? Porter.bootstrap())")
            return queue.async { self.fail(error) }
        }
        stream.open { [self] error in
            if let error { queue.async { self.fail(error) } }
        }
    }

    /// Closes the connection at once: outstanding reads and writes fail with `.cancelled`.
    public func cancel() {
        let was = lock.withLock { s -> TaskState in
            let was = s.state
            if s.state != .completed {
                s.state = .completed
                s.error = s.error ?? PorterError(.cancelled, "the stream task was cancelled")
            }
            return was
        }
        guard was != .completed else { return }
        stream?.close()
        queue.async { self.failReads(PorterError(.cancelled, "the stream task was cancelled")) }
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
            if let error = lock.withLock({ $0.state == .completed ? ($0.error ?? PorterError(.cancelled, "the stream task ended")) : nil }) {
                return deliver { completionHandler(nil, false, error) }
            }
            nextRead += 1
            var read = Read(id: nextRead, minLength: minLength, maxLength: maxLength, done: completionHandler)
            if timeout > 0 {
                let id = read.id
                let timer = DispatchWorkItem { [weak self] in self?.timeOut(read: id) }
                read.timer = timer
                queue.asyncAfter(deadline: .now() + timeout, execute: timer)
            }
            reads.append(read)
            pumpReads()
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
        if let error = lock.withLock({ $0.state == .completed ? ($0.error ?? PorterError(.cancelled, "the stream task ended")) : nil }) {
            return deliver { completionHandler(error) }
        }
        guard let stream else { return deliver { completionHandler(PorterError(.unsupportedURL, "no registered handler carries streams")) } }
        let once = Once()
        if timeout > 0 {
            queue.asyncAfter(deadline: .now() + timeout) { [self] in
                if once.claim() { deliver { completionHandler(PorterError(.timedOut, "the write did not complete in \(timeout) s")) } }
            }
        }
        // Through the task's queue, as startSecureConnection goes: a write asked after it
        // reaches the stream after it, so it is encrypted.
        queue.async { [self] in
            stream.write(data) { [self] error in
                if once.claim() { deliver { completionHandler(error) } }
            }
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
                stream.close()
                return fail(PorterError(.secureConnectionFailed,
                    "\(carry.count) plain byte(s) arrived before TLS was asked for and were not read: not starting TLS over them"))
            }
            stream.startTLS(serverName: host) { [self] error in
                if let error { queue.async { self.fail(error) } }
            }
        }
    }

    // MARK: queue only

    private func deliver(_ work: @escaping @Sendable () -> Void) {
        if let session { session.deliver(work) } else { DispatchQueue.global().async(execute: work) }
    }

    private func fail(_ error: PorterError) {
        lock.withLock { s in
            if s.state != .completed { s.state = .completed }
            if s.error == nil { s.error = error }
        }
        failReads(error)
    }

    private func failReads(_ error: PorterError) {
        let pending = reads
        reads = []
        for r in pending {
            r.timer?.cancel()
            let done = r.done
            deliver { done(nil, false, error) }
        }
    }

    private func timeOut(read id: Int) {
        guard let i = reads.firstIndex(where: { $0.id == id }) else { return }
        let done = reads.remove(at: i).done
        deliver { done(nil, false, PorterError(.timedOut, "no data within the read's timeout")) }
    }

    /// Serves the first read from what was gathered, or asks the stream for more.
    private func pumpReads() {
        while let first = reads.first {
            if carry.count >= max(1, first.minLength) || (atEnd && !reads.isEmpty) || (first.minLength == 0 && !carry.isEmpty) {
                let take = carry.prefix(first.maxLength)
                carry.removeFirst(take.count)
                reads.removeFirst()
                first.timer?.cancel()
                let eof = atEnd && carry.isEmpty
                let data = Data(take)
                let done = first.done
                deliver { done(data, eof, nil) }
                continue
            }
            guard !readInFlight, let stream else { return }
            readInFlight = true
            stream.read(maxLength: max(first.maxLength - carry.count, 1)) { [self] result in
                queue.async {
                    self.readInFlight = false
                    switch result {
                    case .success(let data):
                        if data.isEmpty { self.atEnd = true } else { self.carry.append(data) }
                        self.pumpReads()
                    case .failure(let error):
                        self.fail(error)
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

/// True for the first caller only (a completion raced by its timeout).
final class Once: @unchecked Sendable {
    private let flag = Locked(false)
    func claim() -> Bool {
        flag.withLock { taken in
            if taken { return false }
            taken = true
            return true
        }
    }
}
