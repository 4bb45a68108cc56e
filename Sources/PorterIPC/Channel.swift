import CPorterIPC
import Foundation

/// Who is at the other end of a Unix socket (SO_PEERCRED): the kernel's word, not the
/// peer's.
public struct PeerCredentials: Sendable, Equatable {
    public var pid: pid_t
    public var uid: uid_t
    public var gid: gid_t
}

/// A PorterIPC connection over a stream socket, with blocking calls: one thread receives,
/// any thread sends (sends are serialised). Every error is an `IPCError`; after one the
/// connection is of no further use.
public final class Channel: @unchecked Sendable {
    public let fd: Int32
    private let sendLock = NSLock()
    private let closeLock = NSLock()
    private var closed = false
    // Receiving thread only:
    private var decoder: FrameDecoder
    /// The buffer `receive` reads into, made on first use and kept (a fresh one per frame
    /// cost a 256 KiB allocation and fill for every small message).
    private var chunk: [UInt8] = []
    /// The version agreed in the handshake (0 before it).
    public private(set) var version: UInt16 = 0
    /// Descriptors that arrived with the bytes (SCM_RIGHTS), in order, not yet taken
    /// (receiving thread only; see `receivesDescriptors`).
    private var descriptors: [Int32] = []
    /// At most this many unclaimed descriptors are kept; more are closed.
    public static let descriptorLimit = 8

    /// Whether `receive` keeps descriptors the peer passes (SCM_RIGHTS) for
    /// `takeDescriptor`. Off (the default): the kernel drops any a peer sends, so a peer
    /// cannot fill this process's descriptor table. Set before the first receive.
    public var receivesDescriptors = false

    /// Takes ownership of `fd`, a connected stream socket.
    public init(fd: Int32, maximumPayload: Int = 1 << 20) {
        self.fd = fd
        self.decoder = FrameDecoder(maximumPayload: maximumPayload)
    }

    /// The descriptor is released only here: a send racing a `close()` then fails on the
    /// shut-down socket instead of writing to whatever socket reused the number.
    deinit {
        shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
        for d in descriptors { Glibc.close(d) }
    }

    /// The oldest descriptor received and not yet taken (the caller owns it), or nil.
    /// Receiving thread only: a frame that says a descriptor came with it takes it here
    /// once `receive` returned that frame (the descriptor arrives with the frame's first
    /// byte, so it is here by then).
    public func takeDescriptor() -> Int32? {
        descriptors.isEmpty ? nil : descriptors.removeFirst()
    }

    /// A receive that waits longer than `seconds` fails (0: wait for ever).
    public func setReceiveTimeout(_ seconds: Double) {
        var t = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, socklen_t(MemoryLayout<timeval>.size))
    }

    public var isClosed: Bool { closeLock.withLock { closed } }

    /// Connects to the Unix socket at `path`.
    public static func connect(path: String, maximumPayload: Int = 1 << 20) throws(IPCError) -> Channel {
        let fd = porter_ipc_connect(path)
        guard fd >= 0 else { throw IPCError(.system, "cannot connect to \(path): \(String(cString: strerror(errno)))") }
        return Channel(fd: fd, maximumPayload: maximumPayload)
    }

    /// Two connected channels (a socketpair), for a parent and the child it starts.
    public static func pair(maximumPayload: Int = 1 << 20) throws(IPCError) -> (Channel, Channel) {
        var fds: [Int32] = [-1, -1]
        guard porter_ipc_socketpair(&fds) == 0 else {
            throw IPCError(.system, "socketpair: \(String(cString: strerror(errno)))")
        }
        return (Channel(fd: fds[0], maximumPayload: maximumPayload), Channel(fd: fds[1], maximumPayload: maximumPayload))
    }

    /// The peer's process, user and group, as the kernel recorded them at connect.
    public var peer: PeerCredentials? {
        var pid: pid_t = 0, uid: uid_t = 0, gid: gid_t = 0
        guard porter_ipc_peer(fd, &pid, &uid, &gid) == 0 else { return nil }
        return PeerCredentials(pid: pid, uid: uid, gid: gid)
    }

    /// Ends the connection: a thread blocked in a receive wakes with end of file, and
    /// later sends fail. The descriptor itself is closed when the channel goes away.
    public func close() {
        closeLock.lock()
        defer { closeLock.unlock() }
        guard !closed else { return }
        closed = true
        shutdown(fd, Int32(SHUT_RDWR))
    }

    // MARK: frames

    public func send(_ frame: Frame) throws(IPCError) {
        try sendRaw(frame.encoded())
    }

    /// Sends `frame` with `descriptor` attached to its first byte (SCM_RIGHTS), for a peer
    /// that `receivesDescriptors`. The caller still owns (and closes) its copy.
    public func send(_ frame: Frame, passing descriptor: Int32) throws(IPCError) {
        try sendRaw(frame.encoded(), passing: descriptor)
    }

    /// Sends bytes that are already frames (or the rest of one), blocking until all went.
    /// `passing`: a descriptor to hand the peer with the first byte (SCM_RIGHTS); the
    /// caller keeps its own copy and closes it.
    public func sendRaw(_ bytes: [UInt8], passing descriptor: Int32 = -1) throws(IPCError) {
        sendLock.lock()
        defer { sendLock.unlock() }
        if isClosed { throw IPCError(.closed, "the connection was closed") }
        var sent = 0
        var pass = descriptor
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes {
                porter_ipc_send_with_fd(fd, $0.baseAddress! + sent, $0.count - sent, pass, Int32(MSG_NOSIGNAL))
            }
            if n > 0 { pass = -1 }
            if n < 0 {
                if errno == EINTR { continue }
                throw IPCError(errno == EPIPE || errno == ECONNRESET ? .closed : .system,
                               "cannot send: \(String(cString: strerror(errno)))")
            }
            sent += n
        }
    }

    /// Sends one frame of `kind` whose payload is `prefix` followed by `body`, gathering
    /// the pieces with sendmsg instead of copying the body into a frame first.
    public func send(kind: Frame.Kind, prefix: [UInt8], body: UnsafeRawBufferPointer) throws(IPCError) {
        let headLength = Frame.headerLength + prefix.count
        let failure = withUnsafeTemporaryAllocation(byteCount: headLength, alignment: 8) { head -> IPCError? in
            Frame.writeHeader(kind: kind, payloadLength: prefix.count + body.count, to: head.baseAddress!)
            prefix.withUnsafeBytes { if let p = $0.baseAddress { (head.baseAddress! + Frame.headerLength).copyMemory(from: p, byteCount: $0.count) } }
            do throws(IPCError) { try sendGathered(UnsafeRawBufferPointer(head), body) } catch { return error }
            return nil
        }
        if let failure { throw failure }
    }

    /// Sends one data frame whose payload is `tag` (8 bytes, big-endian: which stream the
    /// bytes belong to; `FrameDecoder.takeTaggedDataHead`) followed by `body`: the header
    /// is built on the stack and the body goes from where it is (sendmsg), so a chunk
    /// costs no allocation and no copy on this side.
    public func sendData(tag: UInt64, body: UnsafeRawBufferPointer) throws(IPCError) {
        let headLength = Frame.headerLength + FrameDecoder.tagLength
        let failure = withUnsafeTemporaryAllocation(byteCount: headLength, alignment: 8) { head -> IPCError? in
            Frame.writeHeader(kind: .data, payloadLength: FrameDecoder.tagLength + body.count, to: head.baseAddress!)
            head.storeBytes(of: tag.bigEndian, toByteOffset: Frame.headerLength, as: UInt64.self)
            do throws(IPCError) { try sendGathered(UnsafeRawBufferPointer(head), body) } catch { return error }
            return nil
        }
        if let failure { throw failure }
    }

    /// Sends `head` then `body` as one run of bytes (sendmsg with two pieces), whole.
    private func sendGathered(_ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) throws(IPCError) {
        sendLock.lock()
        defer { sendLock.unlock() }
        if isClosed { throw IPCError(.closed, "the connection was closed") }
        var headSent = 0, bodySent = 0
        while headSent < head.count || bodySent < body.count {
            var pieces = (iovec(iov_base: UnsafeMutableRawPointer(mutating: head.baseAddress! + headSent), iov_len: head.count - headSent),
                          iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress.map { $0 + bodySent }), iov_len: body.count - bodySent))
            let n: Int = withUnsafeMutableBytes(of: &pieces) { raw in
                let iov = raw.baseAddress!.assumingMemoryBound(to: iovec.self)
                var m = msghdr()
                if headSent < head.count {
                    m.msg_iov = iov
                    m.msg_iovlen = body.count > bodySent ? 2 : 1
                } else {
                    m.msg_iov = iov + 1
                    m.msg_iovlen = 1
                }
                return sendmsg(fd, &m, Int32(MSG_NOSIGNAL))
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw IPCError(errno == EPIPE || errno == ECONNRESET ? .closed : .system,
                               "cannot send: \(String(cString: strerror(errno)))")
            }
            let toHead = min(n, head.count - headSent)
            headSent += toHead
            bodySent += n - toHead
        }
    }

    /// Frames with payloads this large are read straight into their own storage.
    static let directRead = 64 << 10

    /// The next frame (blocks). A goodbye arrives as `.closed` with the peer's reason.
    public func receive() throws(IPCError) -> Frame {
        while true {
            if let frame = try decoder.next() {
                if frame.kind == .goodbye {
                    throw IPCError(.closed, String(decoding: frame.payload, as: UTF8.self))
                }
                return frame
            }
            // A large frame (a body chunk) that has begun to arrive: the rest is read into
            // the payload itself. Not where descriptors may come with the bytes (those
            // need recvmsg's control data, read below).
            if !receivesDescriptors, let large = try decoder.takeLargeFrameHead(minimum: Self.directRead) {
                let frame = try receiveRest(of: large)
                if frame.kind == .goodbye { throw IPCError(.closed, String(decoding: frame.payload, as: UTF8.self)) }
                return frame
            }
            if chunk.isEmpty { chunk = [UInt8](repeating: 0, count: 256 << 10) }
            let n: Int
            if receivesDescriptors {
                var passed = [Int32](repeating: -1, count: 8)
                var count: Int32 = 0
                n = chunk.withUnsafeMutableBytes { porter_ipc_recv_with_fds(fd, $0.baseAddress, $0.count, &passed, 8, &count) }
                for d in passed.prefix(Int(max(0, count))) {
                    if descriptors.count < Self.descriptorLimit { descriptors.append(d) } else { Glibc.close(d) }
                }
            } else {
                n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { throw IPCError(.closed, "the peer did not answer in time") }
                throw IPCError(.closed, "the connection failed: \(String(cString: strerror(errno)))")
            }
            if n == 0 {
                throw IPCError(.closed, decoder.bufferedCount > 0 ? "the peer closed the connection mid-frame" : "the peer closed the connection")
            }
            decoder.append(chunk[0..<n])
        }
    }

    /// What `receiveIncoming` hands out: a frame, or the body of a data frame with its tag.
    public enum Incoming: Sendable {
        case frame(Frame)
        /// A data frame: its tag (the first 8 bytes of its payload, big-endian) and the rest.
        case data(tag: UInt64, body: Data)
    }

    /// The most `receiveIncoming` reads ahead of the frame it needs: what it reads ahead of
    /// a data frame's header is copied once more (through the decoder), the rest of the
    /// body is read straight into its own storage.
    static let readAhead = 16 << 10

    /// The next frame (blocks), with data frames split into their tag and their body: the
    /// body is read from the socket into storage of its own (one allocation, and one copy
    /// for all but what was read ahead with the frames before it) and handed out as `Data`
    /// without another copy. Descriptors the peer passes are kept as `receive` keeps them.
    /// A data frame shorter than its tag is malformed; a goodbye arrives as `.closed`.
    public func receiveIncoming() throws(IPCError) -> Incoming {
        while true {
            if let head = try decoder.takeTaggedDataHead() {
                return .data(tag: head.tag, body: try receiveBody(head.bodyLength))
            }
            if let frame = try decoder.next() {
                if frame.kind == .goodbye { throw IPCError(.closed, String(decoding: frame.payload, as: UTF8.self)) }
                return .frame(frame)
            }
            // A large message that has begun to arrive: the rest straight into its payload.
            if try decoder.headKind() != .data, !receivesDescriptors,
               let large = try decoder.takeLargeFrameHead(minimum: Self.directRead) {
                let frame = try receiveRest(of: large)
                if frame.kind == .goodbye { throw IPCError(.closed, String(decoding: frame.payload, as: UTF8.self)) }
                return .frame(frame)
            }
            if chunk.isEmpty { chunk = [UInt8](repeating: 0, count: 256 << 10) }
            let midFrame = decoder.bufferedCount > 0
            var failure: IPCError?
            let n = chunk.withUnsafeMutableBytes { b -> Int in
                do throws(IPCError) { return try receiveSome(b.baseAddress!, min(b.count, Self.readAhead), midFrame: midFrame) } catch {
                    failure = error
                    return 0
                }
            }
            if let failure { throw failure }
            decoder.append(chunk[0..<n])
        }
    }

    /// Reads a data frame's body of `length` bytes: what the decoder holds, then the socket.
    private func receiveBody(_ length: Int) throws(IPCError) -> Data {
        guard length > 0 else { return Data() }
        guard let base = malloc(length) else { throw IPCError(.system, "cannot allocate \(length) bytes for a data frame") }
        var filled = decoder.takeBuffered(into: UnsafeMutableRawBufferPointer(start: base, count: length))
        while filled < length {
            do {
                filled += try receiveSome(base + filled, length - filled, midFrame: true)
            } catch {
                free(base)
                throw error
            }
        }
        return Data(bytesNoCopy: base, count: length, deallocator: .free)
    }

    /// One read of up to `count` bytes from the socket (keeping passed descriptors when
    /// `receivesDescriptors`); at least one byte, or an error (the peer's end included).
    private func receiveSome(_ base: UnsafeMutableRawPointer, _ count: Int, midFrame: Bool) throws(IPCError) -> Int {
        while true {
            let n: Int
            if receivesDescriptors {
                var passed: (Int32, Int32, Int32, Int32, Int32, Int32, Int32, Int32) = (-1, -1, -1, -1, -1, -1, -1, -1)
                var got: Int32 = 0
                n = withUnsafeMutableBytes(of: &passed) { p in
                    porter_ipc_recv_with_fds(fd, base, count, p.baseAddress!.assumingMemoryBound(to: Int32.self), 8, &got)
                }
                withUnsafeBytes(of: passed) { p in
                    for d in p.bindMemory(to: Int32.self).prefix(Int(max(0, min(8, got)))) {
                        if descriptors.count < Self.descriptorLimit { descriptors.append(d) } else { Glibc.close(d) }
                    }
                }
            } else {
                n = recv(fd, base, count, 0)
            }
            if n > 0 { return n }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { throw IPCError(.closed, "the peer did not answer in time") }
                throw IPCError(.closed, "the connection failed: \(String(cString: strerror(errno)))")
            }
            throw IPCError(.closed, midFrame ? "the peer closed the connection mid-frame" : "the peer closed the connection")
        }
    }

    /// Reads the rest of a large frame's payload straight into the payload's storage.
    private func receiveRest(of large: (kind: Frame.Kind, length: Int, head: [UInt8])) throws(IPCError) -> Frame {
        var failure: IPCError?
        let payload = [UInt8](unsafeUninitializedCapacity: large.length) { storage, initialized in
            let base = UnsafeMutableRawPointer(storage.baseAddress!)
            large.head.withUnsafeBytes { if let from = $0.baseAddress { base.copyMemory(from: from, byteCount: $0.count) } }
            var filled = large.head.count
            while filled < large.length {
                let n = recv(fd, base + filled, large.length - filled, 0)
                if n > 0 {
                    filled += n
                    continue
                }
                if n < 0, errno == EINTR { continue }
                if n < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                    failure = IPCError(.closed, "the peer did not answer in time")
                } else if n < 0 {
                    failure = IPCError(.closed, "the connection failed: \(String(cString: strerror(errno)))")
                } else {
                    failure = IPCError(.closed, "the peer closed the connection mid-frame")
                }
                break
            }
            initialized = filled
        }
        if let failure { throw failure }
        return Frame(kind: large.kind, payload: payload)
    }

    /// Sets the socket's send and receive buffers (the kernel may cap them at its
    /// `net.core.wmem_max` / `rmem_max`): a peer that streams bodies can then have several
    /// chunks in flight while this side reads, instead of waiting for each.
    public func setBufferSizes(_ bytes: Int) {
        Channel.setBufferSizes(fd, bytes)
    }

    /// As `setBufferSizes`, for a socket not (yet) in a channel (a child's end of a pair).
    public static func setBufferSizes(_ fd: Int32, _ bytes: Int) {
        var size = Int32(clamping: bytes)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Says why, then closes.
    public func goodbye(_ reason: String) {
        try? send(Frame(kind: .goodbye, payload: Array(reason.utf8.prefix(4096))))
        // Closing with the peer's bytes unread would reset the connection and the peer
        // could lose the goodbye: stop sending, then read what it sent (briefly) first.
        shutdown(fd, Int32(SHUT_WR))
        setReceiveTimeout(0.2)
        var sink = [UInt8](repeating: 0, count: 4096)
        var total = 0
        while total < 1 << 20 {
            let n = sink.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            total += n
        }
        close()
    }

    // MARK: messages

    public func send<M: Encodable>(message: M) throws(IPCError) {
        let data: Data
        do {
            data = try JSONEncoder().encode(message)
        } catch {
            throw IPCError(.malformed, "cannot encode \(M.self): \(error)")
        }
        try send(Frame(kind: .message, payload: Array(data)))
    }

    /// The next frame as a message of type `M`; any other frame or a message that does
    /// not decode is `.malformed`.
    public func receive<M: Decodable>(_ type: M.Type) throws(IPCError) -> M {
        let frame = try receive()
        guard frame.kind == .message else { throw IPCError(.malformed, "expected a message, got a frame of kind \(frame.kind)") }
        return try Channel.decode(type, from: frame.payload)
    }

    public static func decode<M: Decodable>(_ type: M.Type, from payload: [UInt8]) throws(IPCError) -> M {
        do {
            return try JSONDecoder().decode(type, from: Data(payload))
        } catch {
            throw IPCError(.malformed, "not a valid \(M.self) message: \(error)")
        }
    }

    // MARK: handshake

    /// The connecting side: sends `hello`, returns the version the acceptor chose.
    @discardableResult
    public func greet(_ hello: Hello) throws(IPCError) -> UInt16 {
        try send(hello.frame)
        let reply = try Hello(frame: try receive())
        guard reply.service == hello.service, reply.minimumVersion == reply.maximumVersion,
              (hello.minimumVersion...hello.maximumVersion).contains(reply.minimumVersion) else {
            let e = IPCError(.versionMismatch, "the peer answered with \(reply.service) \(reply.minimumVersion)–\(reply.maximumVersion)")
            goodbye(e.description)
            throw e
        }
        version = reply.minimumVersion
        return version
    }

    /// The accepting side: reads the peer's hello and answers with the agreed version,
    /// or with a goodbye saying why there is none (then throws).
    @discardableResult
    public func answer(_ hello: Hello) throws(IPCError) -> UInt16 {
        let peerHello: Hello
        let agreed: UInt16
        do {
            peerHello = try Hello(frame: try receive())
            agreed = try hello.agree(with: peerHello)
        } catch {
            goodbye(error.description)
            throw error
        }
        try send(Hello(service: hello.service, minimumVersion: agreed, maximumVersion: agreed).frame)
        version = agreed
        return agreed
    }
}

/// A listening Unix socket.
public final class Listener: @unchecked Sendable {
    public let fd: Int32
    public let path: String

    /// Listens at `path` (the socket file is 0600). An existing socket file that nobody
    /// listens on any more (left by a killed process) is replaced; anything else at the
    /// path is an error.
    public init(path: String) throws(IPCError) {
        var st = stat()
        if lstat(path, &st) == 0 {
            guard (st.st_mode & S_IFMT) == S_IFSOCK else {
                throw IPCError(.system, "\(path) exists and is not a socket")
            }
            let probe = porter_ipc_connect(path)
            if probe >= 0 {
                Glibc.close(probe)
                throw IPCError(.system, "another process listens at \(path)")
            }
            unlink(path)
        }
        let fd = porter_ipc_listen(path, 64)
        guard fd >= 0 else { throw IPCError(.system, "cannot listen at \(path): \(String(cString: strerror(errno)))") }
        self.fd = fd
        self.path = path
    }

    /// Takes a socket that already listens (one systemd passed).
    public init(adopting fd: Int32, path: String) {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        self.fd = fd
        self.path = path
    }

    /// The next connection; nil when the listener was closed.
    public func accept() -> Channel? {
        while true {
            let c = porter_ipc_accept(fd)
            if c >= 0 { return Channel(fd: c) }
            if errno == EINTR || errno == ECONNABORTED { continue }
            // Out of descriptors or memory for a moment: wait, do not stop serving.
            if errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM {
                usleep(100_000)
                continue
            }
            return nil
        }
    }

    public func close() {
        shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
    }
}
