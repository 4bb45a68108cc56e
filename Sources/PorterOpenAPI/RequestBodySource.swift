import Foundation
import OpenAPIRuntime
import PorterCore

/// A request's `HTTPBody` and the passes made over it: one `BodyPipe` for the first
/// attempt, and a fresh one for each time Porter must send the body again (a 307 or 308
/// redirect, an authentication retry) when the body can be read more than once. A pass
/// starts reading the body when the upload first asks for bytes, so a request that never
/// connects leaves its body unread.
final class RequestBodySource: @unchecked Sendable {
    private let body: HTTPBody
    private let length: Int64?
    private let url: URL
    private let lock = NSLock()
    private var pipe: BodyPipe?
    private var passes = 0
    private var failure: (any Error)?
    private var ended = false

    init(body: HTTPBody, length: Int64?, url: URL) {
        self.body = body
        self.length = length
        self.url = url
    }

    /// The error of the body itself (its sequence threw, or gave another length than it
    /// announced), once there is one.
    var bodyError: (any Error)? { lock.withLock { failure } }

    /// A new pass over the body, or nil when it cannot be read again (or the task ended).
    func makePipe() -> BodyPipe? {
        let made = lock.withLock { () -> (BodyPipe?, BodyPipe?) in
            guard !ended, passes == 0 || body.iterationBehavior == .multiple else { return (nil, nil) }
            passes += 1
            let old = pipe
            pipe = BodyPipe(knownLength: length, url: url) { pipe in self.start(pipe) }
            return (pipe, old)
        }
        made.1?.close()
        return made.0
    }

    /// The task ended: whatever pass is under way stops.
    func close() {
        let current = lock.withLock { () -> BodyPipe? in
            ended = true
            return pipe
        }
        current?.close()
    }

    private func start(_ pipe: BodyPipe) {
        let body = self.body
        let length = self.length
        let url = self.url
        let producer = Task {
            var produced: Int64 = 0
            do {
                for try await chunk in body {
                    if chunk.isEmpty { continue }
                    produced += Int64(chunk.count)
                    if let length, produced > length {
                        throw PorterError(.requestBodyStreamExhausted,
                                          "the request body gave more than the \(length) bytes it announced", url: url)
                    }
                    guard await pipe.offer(chunk) else { return }
                }
                if let length, produced != length {
                    throw PorterError(.requestBodyStreamExhausted,
                                      "the request body ended after \(produced) of the \(length) bytes it announced", url: url)
                }
                pipe.finish()
            } catch {
                // After the pipe closed (the task ended), the body's errors are its own
                // cancellation: nobody is waiting for them.
                guard !pipe.isClosed else { return }
                self.record(error)
                pipe.fail(error)
            }
        }
        pipe.producer = producer
    }

    private func record(_ error: any Error) {
        lock.withLock { if failure == nil { failure = error } }
    }
}

/// One pass over a request body, between the task that iterates the `HTTPBody` (the
/// producer, which `offer`s chunks) and Porter's upload thread, which `read`s them (it may
/// block: Porter reads a stream body on a thread of its own). At most `limit` bytes wait
/// here: a producer ahead of the upload waits until it catches up.
final class BodyPipe: BodyStream, @unchecked Sendable {
    let knownLength: Int64?
    private let url: URL
    private let condition = NSCondition()
    private var chunks: [ArraySlice<UInt8>] = []
    private var head = 0           // chunks before it are read
    private var buffered = 0
    private var ended = false
    private var failure: (any Error)?
    private var closed = false
    private var producerWaiting: CheckedContinuation<Bool, Never>?
    private var producerTask: Task<Void, Never>?
    /// Starts the producer: on the first read.
    private var startProducer: (@Sendable (BodyPipe) -> Void)?
    static let limit = 128 << 10

    init(knownLength: Int64?, url: URL, startProducer: @escaping @Sendable (BodyPipe) -> Void) {
        self.knownLength = knownLength
        self.url = url
        self.startProducer = startProducer
    }

    /// The task iterating the body, cancelled when the pipe closes.
    var producer: Task<Void, Never>? {
        get { condition.withLock { producerTask } }
        set {
            let cancelNow = condition.withLock { () -> Bool in
                producerTask = newValue
                return closed
            }
            if cancelNow { newValue?.cancel() }
        }
    }

    var isClosed: Bool { condition.withLock { closed } }

    /// Hands `chunk` to the upload; returns once there is room for more, false when the
    /// pipe closed (stop producing).
    func offer(_ chunk: ArraySlice<UInt8>) async -> Bool {
        await withCheckedContinuation { (cont: CheckedContinuation<Bool, Never>) in
            condition.lock()
            if closed {
                condition.unlock()
                cont.resume(returning: false)
                return
            }
            chunks.append(chunk)
            buffered += chunk.count
            condition.broadcast()
            if buffered < BodyPipe.limit {
                condition.unlock()
                cont.resume(returning: true)
            } else {
                producerWaiting = cont
                condition.unlock()
            }
        }
    }

    /// The body ended (after its last chunk).
    func finish() {
        condition.withLock {
            ended = true
            condition.broadcast()
        }
    }

    /// The body failed: the upload fails.
    func fail(_ error: any Error) {
        condition.withLock {
            if failure == nil { failure = error }
            condition.broadcast()
        }
    }

    /// The task ended: the reader stops waiting, the producer stops producing.
    func close() {
        let (waiting, producer) = condition.withLock { () -> (CheckedContinuation<Bool, Never>?, Task<Void, Never>?) in
            closed = true
            startProducer = nil
            chunks.removeAll()
            head = 0
            buffered = 0
            condition.broadcast()
            defer { producerWaiting = nil }
            return (producerWaiting, producerTask)
        }
        waiting?.resume(returning: false)
        producer?.cancel()
    }

    /// Porter's upload thread: blocks until the producer has bytes, the body ends, fails,
    /// or the task ends.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        condition.lock()
        if let start = startProducer {
            startProducer = nil
            condition.unlock()
            start(self)
            condition.lock()
        }
        while head == chunks.count && !ended && failure == nil && !closed { condition.wait() }
        if head < chunks.count, !closed {
            var copied = 0
            while copied < buffer.count, head < chunks.count {
                let first = chunks[head]
                let n = min(buffer.count - copied, first.count)
                first.withUnsafeBytes { src in
                    UnsafeMutableRawBufferPointer(rebasing: buffer[copied..<(copied + n)])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: src[0..<n]))
                }
                copied += n
                if n == first.count {
                    chunks[head] = []
                    head += 1
                } else {
                    chunks[head] = first.dropFirst(n)
                }
            }
            if head == chunks.count {
                chunks.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 64, head * 2 > chunks.count {
                chunks.removeFirst(head)
                head = 0
            }
            buffered -= copied
            var wake: CheckedContinuation<Bool, Never>?
            if buffered < BodyPipe.limit {
                wake = producerWaiting
                producerWaiting = nil
            }
            condition.unlock()
            wake?.resume(returning: true)
            return copied
        }
        defer { condition.unlock() }
        if let failure { throw failure }
        if closed { throw PorterError(.cancelled, "the request ended before its body was sent", url: url) }
        return 0
    }
}
