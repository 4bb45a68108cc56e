import Foundation
import PorterCore
import PorterStorage

/// The handler for `file:` URLs.
///
/// - Reads stream in chunks of `chunkSize` (128 KiB, as cat: the buffers in flight stay
///   in the CPU's cache) on the task's executor, a queue of the handler's own, so each
///   chunk reaches the task with no thread hop; memory stays constant whatever the
///   file's size, and back-pressure is honoured.
/// - A folder gives a `DirectoryListing` (`text/x-porter-listing`).
/// - Only local URLs: a host other than empty or `localhost` is refused.
/// - A request with a body (an upload task) writes the file atomically: the bytes go
///   to a temporary file in the same folder, which is renamed over the target only
///   when complete, so readers see the old file or the new one, never a mix.
/// - Downloads resume: the validator is the file's size and modification time.
/// - A request carrying a `BodyDestination` gets a regular file's body written there by
///   `FileCopy` (copy_file_range / sendfile: in the kernel), not as data.
public final class FileHandler: ProtocolHandler, @unchecked Sendable {
    public static var schemes: Set<String> { ["file"] }
    public static let chunkSize = 128 << 10
    static let chunksPerTurn = 8
    /// Bytes per FileCopy call when the body goes straight to a `BodyDestination`
    /// (`chunksPerTurn` of them per turn of the queue).
    static let directChunkSize: Int64 = 4 << 20

    /// A queue per load: the task's life cycle runs where the file is read.
    public static func executor(for request: Request, context: SessionContext) -> (any TaskExecutor)? {
        QueueExecutor(label: "porter.file")
    }

    private let request: Request
    private let client: any ProtocolClient
    private let queue: DispatchQueue
    private let flow = FlowControl()
    /// Chunks in flight are bounded by the session's receive buffer; keep that many warm.
    private let pool: BufferPool
    private var fd: Int32 = -1
    private var remaining: Int64 = 0
    /// Read until read() says the end, not a stat size (procfs, sysfs, empty-looking files).
    private var readsToEnd = false
    /// The caller's `BodyDestination`, when the body goes there instead of through didLoad.
    private var destination: BodyDestination?

    public init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
        self.queue = (client.context.executor as? QueueExecutor)?.queue ?? DispatchQueue(label: "porter.file")
        let limit = client.context.configuration.receiveBufferLimit
        self.pool = BufferPool(bufferSize: FileHandler.chunkSize, keep: limit / FileHandler.chunkSize + 3)
    }

    deinit { if fd >= 0 { close(fd) } }

    public static func canonicalRequest(for request: Request) -> Request {
        var r = request
        r.url = r.url.standardizedFileURL
        return r
    }

    public func startLoading() {
        queue.async { [self] in
            do {
                let path = try FileHandler.localPath(of: request.url)
                if request.body != nil {
                    try upload(to: path)
                } else {
                    try openForReading(path)
                }
            } catch let error as PorterError {
                finish(error)
            } catch {
                finish(PorterError(.unknown, "\(error)", url: request.url))
            }
        }
    }

    public func stopLoading() {
        flow.stop()
        queue.async { [self] in closeFile() }
    }
    public func pauseDelivery() { flow.pause() }
    public func resumeDelivery() {
        flow.resume()
        queue.async { [self] in pump() }
    }

    /// The file-system path of a `file:` URL; refuses remote hosts and empty paths.
    static func localPath(of url: URL) throws -> String {
        if let host = url.host, !host.isEmpty, host.lowercased() != "localhost" {
            throw PorterError(.unsupportedURL, "file: URLs with a remote host (\(host)) are not supported", url: url)
        }
        let path = url.path  // percent-decoded
        guard path.hasPrefix("/") else { throw PorterError(.badURL, "a file: URL needs an absolute path", url: url) }
        return path
    }

    /// procfs and sysfs: file systems whose stat sizes say nothing about what read gives.
    /// Told by where the open file really is (statfs is not in Swift's Glibc module).
    static func isPseudoFileSystem(_ fd: Int32) -> Bool {
        var buffer = [CChar](repeating: 0, count: 64)
        let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        guard n > 0 else { return false }
        let prefix = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return prefix.hasPrefix("/proc/") || prefix.hasPrefix("/sys/")
    }

    static func validator(_ st: stat) -> String {
        "\(st.st_size)-\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)-\(st.st_ino)"
    }

    private func finish(_ error: PorterError?) {
        closeFile()
        guard !flow.isStopped else { return }
        flow.stop()
        if let error { client.didFail(with: error) } else { client.didFinishLoading() }
    }

    private func closeFile() {
        if fd >= 0 { close(fd); fd = -1 }
    }

    // MARK: reading

    private func openForReading(_ path: String) throws {
        // O_NONBLOCK so a FIFO or a device cannot hang the open; cleared for regular files.
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        if fd < 0 { throw PorterError.fromErrno(errno, url: request.url, doing: "cannot open \(path)") }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw PorterError.fromErrno(errno, url: request.url, doing: "cannot stat \(path)") }
        switch st.st_mode & S_IFMT {
        case S_IFDIR:
            closeFile()
            try list(path)
            return
        case S_IFREG:
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        default:
            throw PorterError(.resourceUnavailable, "\(path) is not a regular file or a folder", url: request.url)
        }
        // procfs and sysfs report sizes that are not the content's (0, or 4096): such a
        // file, or any that says it is empty, is read to its end with no length promised.
        readsToEnd = st.st_size == 0 || FileHandler.isPseudoFileSystem(fd)
        let size = Int64(st.st_size)
        let validator = FileHandler.validator(st)
        var offset: Int64 = 0
        if let range = request.resumeRange, range.validator == validator, range.offset > 0, range.offset <= size {
            offset = range.offset
            guard lseek(fd, off_t(offset), SEEK_SET) == offset else {
                throw PorterError.fromErrno(errno, url: request.url, doing: "cannot seek in \(path)")
            }
        }
        remaining = readsToEnd ? Int64.max : size - offset
        let mime = MediaTypes.mimeType(forPath: path)
        var response = Response(url: request.url, mimeType: mime, expectedContentLength: readsToEnd ? -1 : remaining)
        response.headerFields[.contentType] = mime
        if !readsToEnd { response.headerFields[.contentLength] = String(remaining) }
        response.validator = validator
        if offset > 0 { response.resumeOffset = offset }
        var metrics = TransactionMetrics(request: request)
        metrics.fetchStartDate = Date()
        client.didReceive(response, cacheStoragePolicy: .notAllowed)
        if request.method == "HEAD" {
            finish(nil)
            return
        }
        client.didCollect(metrics)
        // Only a body whose length is known goes straight to the caller's descriptor: one
        // read to the end (procfs) streams as data.
        if !readsToEnd, let wanted = request.property(forKey: BodyDestination.property) as? BodyDestination {
            destination = wanted
        }
        pump()
    }

    /// Reads and delivers until paused, stopped or at the end (on `queue`). Every
    /// `chunksPerTurn` chunks it lets the queue's other work run first (the queue is the
    /// task's executor: a cancel or a timeout waits behind a running pump).
    private func pump() {
        guard fd >= 0 else { return }
        if let destination {
            pump(into: destination)
            return
        }
        var turn = 0
        while remaining > 0 {
            if flow.isStopped || flow.isPaused { return }
            turn += 1
            if turn > FileHandler.chunksPerTurn {
                queue.async { [self] in pump() }
                return
            }
            let want = Int(min(Int64(FileHandler.chunkSize), remaining))
            let buffer = pool.take()
            let n = read(fd, buffer, want)
            if n <= 0 {
                let err = errno
                pool.give(buffer)
                if n < 0 && err == EINTR { continue }
                if n == 0 && readsToEnd { break }
                finish(n < 0 ? PorterError.fromErrno(err, url: request.url, doing: "read failed")
                             : PorterError(.networkConnectionLost, "the file shrank while it was read", url: request.url))
                return
            }
            remaining -= Int64(n)
            client.didLoad(pool.data(buffer, count: n))
        }
        finish(nil)
    }

    /// `pump` for a body that goes to `destination` by FileCopy, in the kernel, with the
    /// same turns, stops and pauses.
    private func pump(into destination: BodyDestination) {
        var turn = 0
        while remaining > 0 {
            if flow.isStopped || flow.isPaused { return }
            turn += 1
            if turn > FileHandler.chunksPerTurn {
                queue.async { [self] in pump() }
                return
            }
            let want = min(FileHandler.directChunkSize, remaining)
            let n: Int64
            do {
                n = try FileCopy.copy(from: fd, to: destination.fd, limit: want)
            } catch {
                finish(error.writing
                       ? PorterError(.cannotWriteToFile, "cannot write the body", url: request.url, cause: .errno(error.code))
                       : PorterError.fromErrno(error.code, url: request.url, doing: "read failed"))
                return
            }
            destination.add(n)
            remaining -= n
            if n < want {
                finish(PorterError(.networkConnectionLost, "the file shrank while it was read", url: request.url))
                return
            }
        }
        finish(nil)
    }

    private func list(_ path: String) throws {
        guard let dir = opendir(path) else {
            throw PorterError.fromErrno(errno, url: request.url, doing: "cannot list \(path)")
        }
        defer { closedir(dir) }
        var entries: [DirectoryListing.Entry] = []
        while let ent = readdir(dir) {
            let name = withUnsafeBytes(of: ent.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            var st = stat()
            let full = path.hasSuffix("/") ? path + name : path + "/" + name
            guard lstat(full, &st) == 0 else { continue }
            let kind: DirectoryListing.Entry.Kind
            switch st.st_mode & S_IFMT {
            case S_IFDIR: kind = .directory
            case S_IFREG: kind = .file
            case S_IFLNK: kind = .symlink
            default: kind = .other
            }
            entries.append(DirectoryListing.Entry(name: name, kind: kind, size: Int64(st.st_size),
                                                  modified: Date(timeIntervalSince1970: TimeInterval(st.st_mtim.tv_sec))))
        }
        let body = DirectoryListing(entries: entries).serialized()
        var response = Response(url: request.url, mimeType: DirectoryListing.mimeType,
                                expectedContentLength: Int64(body.count), textEncodingName: "utf-8")
        response.headerFields[.contentType] = DirectoryListing.contentType
        response.headerFields[.contentLength] = String(body.count)
        client.didReceive(response, cacheStoragePolicy: .notAllowed)
        if request.method != "HEAD", !body.isEmpty { client.didLoad(body) }
        finish(nil)
    }

    // MARK: writing

    private func upload(to path: String) throws {
        let base = path.hasSuffix("/") ? "" : PathText.lastComponent(of: path)
        var existing = stat()
        let isFolder = stat(path, &existing) == 0 && (existing.st_mode & S_IFMT) == S_IFDIR
        guard !base.isEmpty, !path.hasSuffix("/"), !request.url.hasDirectoryPath, !isFolder else {
            throw PorterError(.cannotCreateFile, "an upload needs a file name, not a folder", url: request.url)
        }
        // The output rule (OutputFile): a device, FIFO or socket is written through; anything
        // else is written beside the target and renamed over it when whole.
        let writesThrough = OutputFile.kind(of: path) == .special
        let out: Int32
        let temp: String
        do {
            if writesThrough {
                out = try OutputFile.openThrough(path)
                temp = path
            } else {
                (out, temp) = try OutputFile.makeTemporary(beside: path)
            }
        } catch {
            var e = error
            e.url = request.url
            throw e
        }
        var done = false
        defer {
            close(out)
            if !done, !writesThrough { unlink(temp) }
        }
        let expected = request.body?.knownLength ?? -1
        var total: Int64 = 0
        func put(_ raw: UnsafeRawBufferPointer) throws {
            var off = 0
            while off < raw.count {
                if flow.isStopped { throw PorterError(.cancelled, "upload stopped", url: request.url) }
                let n = write(out, raw.baseAddress! + off, raw.count - off)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw PorterError(.cannotWriteToFile, "cannot write \(temp)", url: request.url, cause: .errno(errno))
                }
                off += n
            }
            total += Int64(raw.count)
            client.didSendBodyData(bytesSent: Int64(raw.count), totalBytesSent: total, totalBytesExpectedToSend: expected)
        }
        var buffer = [UInt8](repeating: 0, count: FileHandler.chunkSize)
        switch request.body {
        case .data(let d)?:
            var off = 0
            repeat {
                let end = min(d.count, off + FileHandler.chunkSize)
                try d[off..<end].withUnsafeBytes { try put($0) }
                off = end
            } while off < d.count
        case .file(let source)?:
            let src = open(source.path, O_RDONLY | O_CLOEXEC)
            if src < 0 { throw PorterError.fromErrno(errno, url: source, doing: "cannot open the upload's source file") }
            defer { close(src) }
            // File to file by FileCopy (in the kernel), a chunk at a time for progress and stops.
            while true {
                if flow.isStopped { throw PorterError(.cancelled, "upload stopped", url: request.url) }
                let n: Int64
                do {
                    n = try FileCopy.copy(from: src, to: out, limit: Int64(FileHandler.chunkSize))
                } catch {
                    throw error.writing
                        ? PorterError(.cannotWriteToFile, "cannot write \(temp)", url: request.url, cause: .errno(error.code))
                        : PorterError.fromErrno(error.code, url: source, doing: "cannot read the upload's source file")
                }
                if n == 0 { break }
                total += n
                client.didSendBodyData(bytesSent: n, totalBytesSent: total, totalBytesExpectedToSend: expected)
            }
        case .stream(let stream)?:
            while true {
                let n = try buffer.withUnsafeMutableBytes { try stream.read(into: $0) }
                if n <= 0 { break }
                try buffer.withUnsafeBytes { try put(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            }
        case nil:
            break
        }
        if writesThrough {
            done = true
            var response = Response(url: request.url, mimeType: nil, expectedContentLength: 0)
            response.headerFields[.contentLength] = "0"
            client.didReceive(response, cacheStoragePolicy: .notAllowed)
            finish(nil)
            return
        }
        do {
            try OutputFile.commit(temporary: temp, fd: out, to: path)
        } catch {
            var e = error
            e.url = request.url
            throw e
        }
        done = true
        var response = Response(url: request.url, mimeType: nil, expectedContentLength: 0)
        response.headerFields[.contentLength] = "0"
        client.didReceive(response, cacheStoragePolicy: .notAllowed)
        finish(nil)
    }
}
