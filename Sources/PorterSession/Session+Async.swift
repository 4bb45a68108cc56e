import Foundation
import PorterCore

/// Holds a task for a Swift cancellation handler that may run before it exists.
private final class TaskBox: @unchecked Sendable {
    private let lock = NSLock()
    private var task: SessionTask?
    private var cancelled = false
    func set(_ t: SessionTask) {
        let cancelNow = lock.withLock { () -> Bool in task = t; return cancelled }
        if cancelNow { t.cancel() }
    }
    func cancel() {
        let t = lock.withLock { () -> SessionTask? in cancelled = true; return task }
        t?.cancel()
    }
}

extension Session {
    /// Loads `request` into memory. Throws `PorterError`.
    public func data(for request: Request) async throws -> (Data, Response) {
        try await data(for: request, delegate: nil)
    }

    /// Loads `request` into memory, asking `delegate` (before the session's delegate)
    /// about redirects, challenges, metrics and upload progress, as URLSession's
    /// `data(for:delegate:)`.
    public func data(for request: Request, delegate: (any TaskDelegate)?) async throws -> (Data, Response) {
        let box = TaskBox()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (cont: CheckedContinuation<(Data, Response), Error>) in
                let task = inlineDataTask(with: request, upload: nil) { data, response, error in
                    Session.resume(cont, data ?? Data(), response, error, url: request.url)
                }
                if let delegate { task.delegate = delegate }
                box.set(task)
                task.resume()
            }
        } onCancel: { box.cancel() }
    }

    public func data(from url: URL) async throws -> (Data, Response) {
        try await data(for: Request(url: url))
    }

    /// Sends `body` (a GET request is sent as PUT) and returns the response body.
    public func upload(for request: Request, from body: Data) async throws -> (Data, Response) {
        try await upload(request) { self.inlineDataTask(with: request, upload: .data(body), completion: $0) }
    }

    public func upload(for request: Request, fromFile file: URL) async throws -> (Data, Response) {
        try await upload(request) { self.inlineDataTask(with: request, upload: .file(file), completion: $0) }
    }

    /// Sends `body`, asking `delegate` first (upload progress, redirects, challenges).
    public func upload(for request: Request, from body: Data, delegate: (any TaskDelegate)?) async throws -> (Data, Response) {
        try await upload(request, delegate: delegate) { self.inlineDataTask(with: request, upload: .data(body), completion: $0) }
    }

    private func upload(_ request: Request, delegate: (any TaskDelegate)? = nil,
                        make: (@escaping @Sendable (Data?, Response?, PorterError?) -> Void) -> DataTask) async throws -> (Data, Response) {
        let box = TaskBox()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (cont: CheckedContinuation<(Data, Response), Error>) in
                let task = make { data, response, error in
                    Session.resume(cont, data ?? Data(), response, error, url: request.url)
                }
                if let delegate { task.delegate = delegate }
                box.set(task)
                task.resume()
            }
        } onCancel: { box.cancel() }
    }

    /// Downloads to a file the caller owns (in the temporary directory): move or
    /// delete it when done. On failure no file is left behind.
    public func download(for request: Request) async throws -> (URL, Response) {
        try await download(url: request.url) { self.inlineDownloadTask(with: request, resumeData: nil, completion: $0) }
    }

    /// The same, asking `delegate` first (progress through a `DownloadDelegate`,
    /// redirects, challenges), as URLSession's `download(for:delegate:)`.
    public func download(for request: Request, delegate: (any TaskDelegate)?) async throws -> (URL, Response) {
        try await download(url: request.url, delegate: delegate) {
            self.inlineDownloadTask(with: request, resumeData: nil, completion: $0)
        }
    }

    public func download(from url: URL) async throws -> (URL, Response) {
        try await download(for: Request(url: url))
    }

    /// Continues a download from resume data.
    public func download(resumeFrom resumeData: Data) async throws -> (URL, Response) {
        try await download(url: nil) {
            self.inlineDownloadTask(with: Request(url: URL(string: "about:resume-data")!), resumeData: resumeData, completion: $0)
        }
    }

    private func download(url: URL?, delegate: (any TaskDelegate)? = nil,
                          make: (@escaping @Sendable (URL?, Response?, PorterError?) -> Void) -> DownloadTask) async throws -> (URL, Response) {
        let box = TaskBox()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (cont: CheckedContinuation<(URL, Response), Error>) in
                let task = make { location, response, error in
                    if let error { cont.resume(throwing: error); return }
                    guard let location, let response else {
                        cont.resume(throwing: PorterError(.unknown, "download finished without a file", url: url))
                        return
                    }
                    // The task removes `location` when this returns; give the caller its own name.
                    let owned = location.deletingLastPathComponent()
                        .appendingPathComponent("porter-\(UUID().uuidString).download")
                    if rename(location.path, owned.path) == 0 {
                        cont.resume(returning: (owned, response))
                    } else {
                        cont.resume(throwing: PorterError(.cannotMoveFile, "cannot keep the downloaded file",
                                                          url: response.url, cause: .errno(errno)))
                    }
                }
                if let delegate { task.delegate = delegate }
                box.set(task)
                task.resume()
            }
        } onCancel: { box.cancel() }
    }

    /// Starts loading and returns once the response is in; the body arrives through
    /// the returned sequence. A slow consumer slows the transfer: at most
    /// `configuration.receiveBufferLimit` bytes wait in memory.
    public func bytes(for request: Request) async throws -> (AsyncBytes, Response) {
        try await bytes(for: request, delegate: nil)
    }

    /// The same, asking `delegate` first (redirects, challenges, metrics), as URLSession's
    /// `bytes(for:delegate:)`.
    public func bytes(for request: Request, delegate: (any TaskDelegate)?) async throws -> (AsyncBytes, Response) {
        let buffer = ByteStreamBuffer()
        let task = streamTask(with: request, buffer: buffer)
        if let delegate { task.delegate = delegate }
        buffer.task = task
        let handle = AsyncBytes.Handle(buffer: buffer, task: task)
        let response = try await withTaskCancellationHandler {
            try await buffer.waitForResponse {
                task.resume()
            }
        } onCancel: { task.cancel() }
        return (AsyncBytes(handle: handle), response)
    }

    public func bytes(from url: URL) async throws -> (AsyncBytes, Response) {
        try await bytes(for: Request(url: url))
    }

    static func resume(_ cont: CheckedContinuation<(Data, Response), Error>, _ data: Data, _ response: Response?,
                       _ error: PorterError?, url: URL) {
        if let error { cont.resume(throwing: error) } else if let response { cont.resume(returning: (data, response)) } else {
            cont.resume(throwing: PorterError(.badServerResponse, "finished without a response", url: url))
        }
    }
}

/// The queue between a streaming task and its consumer.
final class ByteStreamBuffer: @unchecked Sendable {
    private let lock = NSLock()
    private var chunks: [Data] = []
    private var head = 0
    private var response: Response?
    private var finished = false
    private var failure: PorterError?
    private var responseWaiter: CheckedContinuation<Response, Error>?
    private var chunkWaiter: CheckedContinuation<Data?, Error>?
    weak var task: SessionTask?

    func waitForResponse(start: () -> Void) async throws -> Response {
        try await withCheckedThrowingContinuation { cont in
            lock.withLock { responseWaiter = cont }
            start()
        }
    }

    func deliver(response: Response) {
        let waiter = lock.withLock { () -> CheckedContinuation<Response, Error>? in
            self.response = response
            defer { responseWaiter = nil }
            return responseWaiter
        }
        waiter?.resume(returning: response)
    }

    func append(_ data: Data) {
        let waiter = lock.withLock { () -> CheckedContinuation<Data?, Error>? in
            if let w = chunkWaiter {
                chunkWaiter = nil
                return w
            }
            chunks.append(data)
            return nil
        }
        if let waiter {
            task?.driver.consumed(data.count)
            waiter.resume(returning: data)
        }
    }

    func finish(_ error: PorterError?) {
        let (rw, cw) = lock.withLock { () -> (CheckedContinuation<Response, Error>?, CheckedContinuation<Data?, Error>?) in
            finished = true
            failure = error
            defer { responseWaiter = nil; chunkWaiter = nil }
            return (responseWaiter, chunkWaiter)
        }
        if let rw {
            rw.resume(throwing: error ?? PorterError(.badServerResponse, "finished without a response"))
        }
        if let cw {
            if let error { cw.resume(throwing: error) } else { cw.resume(returning: nil) }
        }
    }

    private enum Ready { case chunk(Data), end, fail(PorterError), wait }

    /// Takes what is ready; when nothing is and `waiter` is given, registers it for `append`/`finish`.
    private func takeReady(orRegister waiter: CheckedContinuation<Data?, Error>?) -> Ready {
        lock.withLock {
            if head < chunks.count {
                let c = chunks[head]
                chunks[head] = Data()
                head += 1
                if head > 64 && head * 2 > chunks.count { chunks.removeFirst(head); head = 0 }
                return .chunk(c)
            }
            if finished { return failure.map { .fail($0) } ?? .end }
            if let waiter { chunkWaiter = waiter }
            return .wait
        }
    }

    /// The next chunk, nil at the end; throws the task's error.
    func next() async throws -> Data? {
        switch takeReady(orRegister: nil) {
        case .chunk(let c):
            task?.driver.consumed(c.count)
            return c
        case .end: return nil
        case .fail(let e): throw e
        case .wait:
            // A cancelled consumer cancels the transfer, which ends this wait with `.cancelled`.
            let task = self.task
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { cont in
                    switch self.takeReady(orRegister: cont) {
                    case .chunk(let c):
                        self.task?.driver.consumed(c.count)
                        cont.resume(returning: c)
                    case .end: cont.resume(returning: nil)
                    case .fail(let e): cont.resume(throwing: e)
                    case .wait: break
                    }
                }
            } onCancel: { task?.cancel() }
        }
    }
}

/// The body of a `bytes(for:)` load: an async sequence of bytes (or of chunks, via
/// `chunks`). Dropping it before the end cancels the task.
public struct AsyncBytes: AsyncSequence, Sendable {
    public typealias Element = UInt8

    final class Handle: @unchecked Sendable {
        let buffer: ByteStreamBuffer
        let task: SessionTask
        init(buffer: ByteStreamBuffer, task: SessionTask) {
            self.buffer = buffer
            self.task = task
        }
        deinit {
            if task.state != .completed { task.cancel() }
        }
    }

    let handle: Handle

    /// The task doing the load.
    public var task: SessionTask { handle.task }

    public struct Iterator: AsyncIteratorProtocol {
        let handle: Handle
        var chunk = Data()
        var index = 0
        public mutating func next() async throws -> UInt8? {
            while index >= chunk.endIndex {
                guard let c = try await handle.buffer.next() else { return nil }
                chunk = c
                index = chunk.startIndex
            }
            defer { index += 1 }
            return chunk[index]
        }
    }

    public func makeAsyncIterator() -> Iterator { Iterator(handle: handle) }

    /// The body as it arrives, chunk by chunk (faster than byte by byte).
    public var chunks: Chunks { Chunks(handle: handle) }

    public struct Chunks: AsyncSequence, Sendable {
        public typealias Element = Data
        let handle: Handle
        public struct Iterator: AsyncIteratorProtocol {
            let handle: Handle
            public mutating func next() async throws -> Data? { try await handle.buffer.next() }
        }
        public func makeAsyncIterator() -> Iterator { Iterator(handle: handle) }
    }

    /// All of the remaining body.
    public func collect() async throws -> Data {
        var all = Data()
        for try await c in chunks { all.append(c) }
        return all
    }

    /// The body as lines of UTF-8 text, as Foundation's `AsyncBytes.lines`: a line ends at
    /// LF, CR, CR LF, NEL, LINE SEPARATOR or PARAGRAPH SEPARATOR, which is not part of it;
    /// a last line without an ending is a line too; malformed UTF-8 becomes U+FFFD.
    public var lines: Lines { Lines(handle: handle) }

    /// The body as characters (grapheme clusters) of UTF-8 text, as Foundation's
    /// `AsyncBytes.characters`; a cluster split across chunks still arrives whole.
    public var characters: Characters { Characters(handle: handle) }

    public struct Lines: AsyncSequence, Sendable {
        public typealias Element = String
        let handle: Handle
        public struct Iterator: AsyncIteratorProtocol {
            let handle: Handle
            var pending: [UInt8] = []
            var chunk = Data()
            var index = 0
            var done = false
            /// A CR ended the last line: an LF right after it belongs to that ending.
            var skipLF = false

            public mutating func next() async throws -> String? {
                while true {
                    while index < chunk.endIndex {
                        let b = chunk[index]
                        index += 1
                        if skipLF {
                            skipLF = false
                            if b == 0x0A { continue }
                        }
                        switch b {
                        case 0x0A:
                            return take(dropping: 0)
                        case 0x0D:
                            skipLF = true
                            return take(dropping: 0)
                        default:
                            pending.append(b)
                            // NEL (C2 85), LS (E2 80 A8), PS (E2 80 A9) end a line too.
                            let n = pending.count
                            if n >= 2, pending[n - 2] == 0xC2, pending[n - 1] == 0x85 { return take(dropping: 2) }
                            if n >= 3, pending[n - 3] == 0xE2, pending[n - 2] == 0x80, pending[n - 1] == 0xA8 || pending[n - 1] == 0xA9 {
                                return take(dropping: 3)
                            }
                        }
                    }
                    if done { return nil }
                    if let c = try await handle.buffer.next() {
                        chunk = c
                        index = chunk.startIndex
                    } else {
                        done = true
                        if !pending.isEmpty { return take(dropping: 0) }
                        return nil
                    }
                }
            }

            private mutating func take(dropping n: Int) -> String {
                let line = String(decoding: pending[0..<(pending.count - n)], as: UTF8.self)
                pending.removeAll(keepingCapacity: true)
                return line
            }
        }
        public func makeAsyncIterator() -> Iterator { Iterator(handle: handle) }
    }

    public struct Characters: AsyncSequence, Sendable {
        public typealias Element = Character
        let handle: Handle
        public struct Iterator: AsyncIteratorProtocol {
            let handle: Handle
            /// Bytes not yet decoded (an incomplete UTF-8 sequence at a chunk's end).
            var undecoded: [UInt8] = []
            /// Decoded characters not yet handed out; the last one is kept back until more
            /// text shows it is complete.
            var ready: [Character] = []
            var held: String = ""
            var done = false

            public mutating func next() async throws -> Character? {
                while ready.isEmpty {
                    if done {
                        guard let c = held.first else { return nil }
                        held.removeFirst()
                        return c
                    }
                    if let c = try await handle.buffer.next() {
                        undecoded.append(contentsOf: c)
                        // Decode up to the last complete UTF-8 sequence.
                        var end = undecoded.count
                        var back = 0
                        while back < Swift.min(3, end), undecoded[end - 1 - back] & 0xC0 == 0x80 { back += 1 }
                        if back < end {
                            let lead = undecoded[end - 1 - back]
                            let need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1
                            if need > back + 1 { end -= back + 1 }
                        }
                        held += String(decoding: undecoded[0..<end], as: UTF8.self)
                        undecoded.removeFirst(end)
                        // All but the last character are complete.
                        if held.count > 1 {
                            let last = held.index(before: held.endIndex)
                            ready = Array(held[..<last]).reversed()
                            held = String(held[last...])
                        }
                    } else {
                        done = true
                        if !undecoded.isEmpty { held += String(decoding: undecoded, as: UTF8.self) }
                        undecoded.removeAll()
                    }
                }
                return ready.removeLast()
            }
        }
        public func makeAsyncIterator() -> Iterator { Iterator(handle: handle) }
    }
}
