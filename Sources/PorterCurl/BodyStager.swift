import Foundation
import PorterCore
import Synchronization

/// Batches the body bytes libcurl hands a write callback into few, large, recycled
/// buffers for the client (loop thread only). A full buffer goes at once, a partial one
/// when the loop is about to wait: one hand-over (one thread wake-up downstream) per
/// buffer rather than per callback, and no fresh allocation per chunk (a 512 KiB one
/// would be mmapped and page-faulted each time). A small body of known length gets a
/// buffer of exactly its size instead.
///
/// A body whose caller named a `BodyDestination` (the CLI's stdout) skips all of that:
/// each chunk is written from libcurl's own buffer straight to the descriptor, on the
/// loop thread, as curl does — no copy, no buffer, no hand-over, no thread hop.
public final class BodyStager {
    public static let bufferSize = 512 * 1024

    private let client: any ProtocolClient
    private let pool: BufferPool
    private var staging: UnsafeMutableRawPointer?
    private var staged = 0
    private var capacity = 0
    private var pooled = true
    private var expected: Int64 = -1
    private var delivered: Int64 = 0
    /// Where this body is written instead of being handed over (`reset`). Its count grows
    /// with each write, so a task that ends early (a timeout, a cancel) reports what was
    /// written before its completion is delivered.
    private var destination: BodyDestination?
    /// Why writing to `destination` failed; the load fails with it (`stage` said false).
    public private(set) var writeError: PorterError?

    /// `loop`: the loop whose buffers the stager fills (one pool per loop, shared by its
    /// transfers, not one per load).
    public init(client: any ProtocolClient, loop: CurlLoop) {
        self.client = client
        pool = loop.bodyBuffers
    }

    deinit { drop() }

    /// A new body begins; `expectedLength` is its length when known (-1 otherwise).
    /// `destination`: the descriptor the body goes to instead of the client (the request's
    /// `BodyDestination`), when the handler delivers nothing else of this body through
    /// the client (no stored prefix) and no cache needs a copy of it.
    public func reset(expectedLength: Int64, destination: BodyDestination? = nil) {
        drop()
        expected = expectedLength
        delivered = 0
        self.destination = destination
        writeError = nil
    }

    /// Takes one chunk of the body. False when writing it to the destination failed
    /// (`writeError`): the handler aborts the transfer.
    @discardableResult
    public func stage(_ bytes: UnsafeRawBufferPointer, transfer: CurlTransfer) -> Bool {
        if let destination { return write(bytes, to: destination) }
        var offset = 0
        while offset < bytes.count {
            if staging == nil { staging = takeBuffer() }
            let n = min(capacity - staged, bytes.count - offset)
            (staging! + staged).copyMemory(from: bytes.baseAddress! + offset, byteCount: n)
            staged += n
            offset += n
            if staged == capacity { handOver() }
        }
        if staging != nil { transfer.requestFlush() }
        return true
    }

    /// Writes all of `bytes` to the destination, waiting when the descriptor is full
    /// (a pipe whose reader is slow, even one set non-blocking): the transfer waits with
    /// it, as curl's does.
    private func write(_ bytes: UnsafeRawBufferPointer, to destination: BodyDestination) -> Bool {
        guard writeError == nil else { return false }
        var offset = 0
        while offset < bytes.count {
            let n = Foundation.write(destination.fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n >= 0 {
                offset += n
                continue
            }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK {
                var p = pollfd(fd: destination.fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&p, 1, -1)
                continue
            }
            destination.add(Int64(offset))
            writeError = PorterError(.cannotWriteToFile, "cannot write the body", cause: .errno(code))
            return false
        }
        destination.add(Int64(bytes.count))
        return true
    }

    private func takeBuffer() -> UnsafeMutableRawPointer {
        staged = 0
        let remaining = expected - delivered
        if expected >= 0, remaining > 0, remaining < Int64(BodyStager.bufferSize) {
            capacity = Int(remaining)
            pooled = false
            return UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        }
        capacity = pool.bufferSize
        pooled = true
        return pool.take()
    }

    /// Gives what is staged to the client now.
    public func handOver() {
        guard let buffer = staging else { return }
        staging = nil
        delivered += Int64(staged)
        if staged > 0 {
            client.didLoad(pooled ? pool.data(buffer, count: staged)
                                  : Data(bytesNoCopy: buffer, count: staged, deallocator: .custom { p, _ in p.deallocate() }))
        } else {
            release(buffer)
        }
        staged = 0
    }

    /// Forgets what is staged (the load was stopped).
    public func drop() {
        if let buffer = staging { release(buffer) }
        staging = nil
        staged = 0
    }

    private func release(_ buffer: UnsafeMutableRawPointer) {
        if pooled { pool.give(buffer) } else { buffer.deallocate() }
    }
}

/// Reads a request body for libcurl's read callback (loop thread).
public final class BodySource {
    private let source: RequestBody
    private var offset = 0
    private var fd: Int32 = -1
    public let length: Int64?

    public init(_ body: RequestBody) {
        source = body
        length = body.knownLength
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        switch source {
        case .data(let d):
            let n = min(buffer.count, d.count - offset)
            guard n > 0 else { return 0 }
            d.withUnsafeBytes { src in buffer.baseAddress!.copyMemory(from: src.baseAddress! + offset, byteCount: n) }
            offset += n
            return n
        case .file(let url):
            if fd < 0 {
                fd = open(url.path, O_RDONLY | O_CLOEXEC)
                if fd < 0 { throw PorterError.fromErrno(errno, url: url, doing: "cannot open the request body") }
            }
            while true {
                let n = Foundation.read(fd, buffer.baseAddress!, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n < 0 { throw PorterError.fromErrno(errno, url: url, doing: "cannot read the request body") }
                return n
            }
        case .stream(let s):
            return try s.read(into: buffer)
        }
    }

    /// The stream of a `.stream` body, which `CurlLoadState` reads on a thread of its own.
    var stream: (any BodyStream)? {
        if case .stream(let s) = source { return s }
        return nil
    }

    public func close() {
        if fd >= 0 { Foundation.close(fd); fd = -1 }
    }

    deinit { close() }
}

/// What a libcurl handler shares between the threads that call it (stop, pause) and its
/// upload plumbing (the body, libcurl's read callback, upload progress), so the http and
/// ftp handlers keep one copy of it.
public final class CurlLoadState: @unchecked Sendable {
    // Read by the write callback for every chunk (16 KiB): atomics, not a lock.
    private let stopped = Atomic<Bool>(false)
    private let paused = Atomic<Bool>(false)
    // Loop thread only:
    /// The transfer in progress, if any.
    public var transfer: CurlTransfer?
    public private(set) var body: BodySource?
    private var pump: StreamPump?
    private var lastSent: Int64 = 0
    /// Body bytes handed to libcurl: what "sent" may count at most (libcurl's own count
    /// includes a chunked upload's framing).
    private var bodyRead: Int64 = 0
    // The receive-rate gate (loop thread): a token bucket of `rate` bytes a second.
    private var rate: Double = 0
    private var tokens: Double = 0
    private var refilled: UInt64 = 0
    private var rateHeld = false
    /// The loop of the transfer, for waking a paused upload (set by `startUpload`).
    private weak var loop: CurlLoop?

    public init() {}

    /// `stopLoading`: no callback reaches the client after this; the transfer, the upload
    /// and whatever `stager` holds are dropped on the loop.
    public func stopLoading(on loop: CurlLoop, stager: BodyStager) {
        stop()
        loop.enqueue { [self] in
            transfer?.cancel()
            transfer = nil
            closeUpload()
            stager.drop()
        }
    }

    /// `resumeDelivery`: lets libcurl deliver again.
    public func resumeDelivery(on loop: CurlLoop) {
        setPaused(false)
        loop.enqueue { [self] in transfer?.resume() }
    }

    public var isStopped: Bool { stopped.load(ordering: .acquiring) }
    public var wantsPause: Bool { paused.load(ordering: .acquiring) }
    public func stop() { stopped.store(true, ordering: .releasing) }
    public func setPaused(_ value: Bool) { paused.store(value, ordering: .releasing) }

    /// A new attempt sends `body` from its start (loop thread). A stream body is read on
    /// a thread of its own, so a slow stream pauses its upload instead of the loop.
    public func startUpload(_ body: RequestBody?, on loop: CurlLoop) {
        closeUpload()
        self.loop = loop
        self.body = body.map(BodySource.init)
        if let stream = self.body?.stream {
            pump = StreamPump(stream) { [weak self] in
                guard let self, let loop = self.loop else { return }
                loop.enqueue { [weak self] in
                    guard let self else { return }
                    self.transfer?.resumeUpload(keepReceivePaused: self.wantsPause)
                }
            }
        }
        lastSent = 0
        bodyRead = 0
    }

    /// Holds the receive rate to `bytesPerSecond` over any window, not just on average:
    /// libcurl's CURLOPT_MAX_RECV_SPEED_LARGE reads up to a hundred buffers between two
    /// checks and averages over 3 s, so a download started with a burst of a megabyte
    /// (318 KB/s for "200k"). Loop thread, before the transfer starts.
    public func limitRate(_ bytesPerSecond: Int64?) {
        rate = Double(max(0, bytesPerSecond ?? 0))
        tokens = burst
        refilled = DispatchTime.now().uptimeNanoseconds
        rateHeld = false
    }

    /// A tenth of a second's worth (at least 1 KiB) may pass at once.
    private var burst: Double { max(1024, rate / 10) }

    /// The write callback's gate (loop thread): true when `count` bytes may be taken now;
    /// false when the transfer must pause (CURL_WRITEFUNC_PAUSE: libcurl hands the same
    /// bytes again) — it is resumed when they may pass.
    public func admit(_ count: Int, on loop: CurlLoop) -> Bool {
        guard rate > 0 else { return true }
        if rateHeld { return false }
        let now = DispatchTime.now().uptimeNanoseconds
        tokens = min(burst, tokens + Double(now &- refilled) / 1e9 * rate)
        refilled = now
        let need = min(Double(count), burst)
        if tokens >= need {
            tokens -= Double(count)
            return true
        }
        rateHeld = true
        let wait = (need - tokens) / rate
        DispatchQueue.global().asyncAfter(deadline: .now() + wait) { [weak self, weak loop] in
            loop?.enqueue { [weak self] in
                guard let self, self.rateHeld else { return }
                self.rateHeld = false
                if !self.isStopped, !self.wantsPause { self.transfer?.resume() }
            }
        }
        return false
    }

    public func closeUpload() {
        body?.close()
        pump?.close()
        pump = nil
    }

    /// libcurl's read callback (loop thread).
    public func read(_ buffer: UnsafeMutableRawBufferPointer) -> CurlTransfer.ReadResult {
        guard let body, !isStopped else { return .abort }
        let result: CurlTransfer.ReadResult
        if let pump {
            result = pump.read(into: buffer)
        } else {
            do {
                let n = try body.read(into: buffer)
                result = n == 0 ? .end : .bytes(n)
            } catch {
                return .abort
            }
        }
        if case .bytes(let n) = result { bodyRead += Int64(n) }
        return result
    }

    /// libcurl's progress callback: reports upload progress to `client` (loop thread).
    public func progress(uploadTotal total: Int64, uploaded now: Int64, client: any ProtocolClient) -> Bool {
        if isStopped { return false }
        // Body bytes only: libcurl's count includes a chunked body's framing.
        let sent = min(now, bodyRead)
        if sent > lastSent {
            let delta = sent - lastSent
            lastSent = sent
            client.didSendBodyData(bytesSent: delta, totalBytesSent: sent,
                                   totalBytesExpectedToSend: total > 0 ? total : (body?.length ?? -1))
        }
        return true
    }
}

/// Reads a stream body ahead on a thread of its own, into at most 256 KiB, so that a
/// stream that blocks (an application producing the body slowly) holds up its own
/// upload only, never the loop thread and the other transfers on it. libcurl's read
/// callback takes what is there; when nothing is, the upload pauses and `onReady` asks
/// the loop to continue it once the stream produced more.
final class StreamPump: @unchecked Sendable {
    private let condition = NSCondition()
    private var chunks: [Data] = []
    private var head = 0           // bytes of chunks[0] already taken
    private var buffered = 0
    private var ended = false
    private var failed = false
    private var closed = false
    private var consumerWaits = false
    private let onReady: @Sendable () -> Void
    private static let limit = 256 << 10
    private static let chunk = 64 << 10

    init(_ stream: any BodyStream, onReady: @escaping @Sendable () -> Void) {
        self.onReady = onReady
        let thread = Thread { [self] in run(stream) }
        thread.name = "porter.upload-stream"
        thread.start()
    }

    private func run(_ stream: any BodyStream) {
        var scratch = [UInt8](repeating: 0, count: StreamPump.chunk)
        while true {
            condition.lock()
            while buffered >= StreamPump.limit && !closed { condition.wait() }
            let stop = closed
            condition.unlock()
            if stop { return }
            var n = 0
            var readFailed = false
            do {
                n = try scratch.withUnsafeMutableBytes { try stream.read(into: $0) }
            } catch {
                readFailed = true
            }
            condition.lock()
            if readFailed || n < 0 { failed = true } else if n == 0 { ended = true } else {
                chunks.append(Data(scratch[0..<n]))
                buffered += n
            }
            let wake = consumerWaits
            consumerWaits = false
            let done = ended || failed || closed
            condition.unlock()
            if wake { onReady() }
            if done { return }
        }
    }

    /// libcurl's read callback (loop thread): never blocks.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> CurlTransfer.ReadResult {
        condition.lock()
        defer { condition.unlock() }
        var copied = 0
        while copied < buffer.count, !chunks.isEmpty {
            let first = chunks[0]
            let n = min(buffer.count - copied, first.count - head)
            first.withUnsafeBytes { src in
                (buffer.baseAddress! + copied).copyMemory(from: src.baseAddress! + head, byteCount: n)
            }
            copied += n
            head += n
            if head == first.count { chunks.removeFirst(); head = 0 }
        }
        if copied > 0 {
            buffered -= copied
            condition.broadcast()
            return .bytes(copied)
        }
        if failed { return .abort }
        if ended { return .end }
        consumerWaits = true
        return .pause
    }

    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }
}
