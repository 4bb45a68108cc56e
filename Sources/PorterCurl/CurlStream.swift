import CCurl
import Foundation
import PorterCore

/// A `ByteStream` on libcurl's connect-only mode: libcurl resolves, connects (through
/// the session's proxy, as a CONNECT tunnel), and does the TLS handshake for a secure
/// target with the session's trust settings; then the stream sends and receives with
/// `curl_easy_send` / `curl_easy_recv` on the loop's thread, and the loop waits for the
/// stream's socket together with libcurl's own. TLS started later (`startTLS`) is
/// OpenSSL's on the same socket, as libcurl cannot start it on an open connection.
public final class CurlStream: ByteStream, @unchecked Sendable {
    public let target: ByteStreamTarget
    private let configuration: SessionConfiguration
    private let loop: CurlLoop
    private let url: URL?

    private enum WriteOp {
        case bytes(Data, sent: Int, (@Sendable (PorterError?) -> Void))
        case startTLS(String, (@Sendable (PorterError?) -> Void))
        case closeWrite
    }
    private enum Phase { case idle, opening, open, closed }

    // Loop thread only:
    private var phase = Phase.idle
    private var transfer: CurlTransfer?
    private var socket: Int32 = -1
    /// The descriptor the loop polls: OpenSSL's own once TLS was started on the stream,
    /// else libcurl's.
    var pollSocket: Int32 { tlsSocket >= 0 ? tlsSocket : socket }
    /// Bytes libcurl had received when the stream opened (read to tie the connection to
    /// the handle: see `connect`), served before any other.
    private var early = Data()
    private var tls: OpaquePointer?
    private var handshaking: (@Sendable (PorterError?) -> Void)?
    private var reads: [(maxLength: Int, done: @Sendable (Result<Data, PorterError>) -> Void)] = []
    private var writes: [WriteOp] = []
    private var readClosed = false
    private var atEnd = false
    private var failure: PorterError?
    /// `open`'s completion until the connection is up (a close meanwhile answers it).
    private var opening: (@Sendable (PorterError?) -> Void)?
    /// OpenSSL's own copy of the socket (dup): libcurl closing its descriptor can never
    /// leave OpenSSL on a number the process has given to another connection.
    private var tlsSocket: Int32 = -1
    /// What OpenSSL waits for before the last read or write can go on.
    private var tlsWants = Int16(POLLIN)
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

    public init(target: ByteStreamTarget, configuration: SessionConfiguration, loop: CurlLoop? = nil) {
        self.target = target
        self.configuration = configuration
        self.loop = loop ?? CurlLoop.streamLoop(for: configuration)
        let host = target.host.contains(":") && !target.host.hasPrefix("[") ? "[\(target.host)]" : target.host
        url = URL(string: "\(target.secure ? "https" : "http")://\(host):\(target.port)/")
    }

    deinit {
        if let tls { porter_tls_free(tls) }
        if tlsSocket >= 0 { _ = Glibc.close(tlsSocket) }
        // A stream let go without close(): its connection leaves the loop too (no closure
        // of the loop holds the stream any more, so nothing else touches the transfer).
        if let transfer { loop.enqueue { transfer.closeConnection() } }
    }

    public func open(_ completion: @escaping @Sendable (PorterError?) -> Void) {
        loop.enqueue { self.connect(completion) }
    }

    public func read(maxLength: Int, _ completion: @escaping @Sendable (Result<Data, PorterError>) -> Void) {
        loop.enqueue {
            self.reads.append((max(1, maxLength), completion))
            self.pump()
        }
    }

    public func write(_ data: Data, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        loop.enqueue {
            self.writes.append(.bytes(data, sent: 0, completion))
            self.pump()
        }
    }

    public func closeWrite() {
        loop.enqueue {
            self.writes.append(.closeWrite)
            self.pump()
        }
    }

    public func closeRead() {
        loop.enqueue {
            self.readClosed = true
            if self.pollSocket >= 0 { shutdown(self.pollSocket, Int32(SHUT_RD)) }
            self.pump()
        }
    }

    public func startTLS(serverName: String, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        loop.enqueue {
            self.writes.append(.startTLS(serverName, completion))
            self.pump()
        }
    }

    public func close() {
        loop.enqueue { self.end(PorterError(.cancelled, "the stream was closed", url: self.url)) }
    }

    // MARK: loop thread

    private func connect(_ completion: @escaping @Sendable (PorterError?) -> Void) {
        guard phase == .idle else {
            return completion(PorterError(.unsupportedConfiguration, "the stream was already opened", url: url))
        }
        guard let url else {
            phase = .closed
            return completion(PorterError(.badURL, "not a host name: \(target.host)"))
        }
        let t: CurlTransfer
        do { t = try CurlTransfer(loop: loop) } catch {
            phase = .closed
            return completion((error as? PorterError) ?? PorterError(.resourceUnavailable, "\(error)"))
        }
        phase = .opening
        transfer = t
        opening = completion
        let request = Request(url: url)
        CurlOptions.apply(to: t, request: request, configuration: configuration, protocols: "http,https")
        t.set(CURLOPT_URL, url.absoluteString)
        t.set(CURLOPT_CONNECT_ONLY, 1)
        // ALPN offers http/1.1 only: a WebSocket handshake is HTTP/1.1, and an h2 server
        // would otherwise take the connection over for HTTP/2 frames.
        t.set(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))
        // The connection sits idle in the stream loop's cache while open: never too old.
        t.set(CURLOPT_MAXAGE_CONN, Int(Int32.max))
        if configuration.proxies.proxy(for: url) != nil { t.set(CURLOPT_HTTPPROXYTUNNEL, 1) }
        t.keepsConnection = true
        t.onComplete = { [weak self, weak t] code in
            guard let self else { return }
            guard code == CURLE_OK, let t, let fd = t.activeSocket else {
                let error = PorterError.curl(code == CURLE_OK ? CURLE_COULDNT_CONNECT : code, url: url, detail: t?.errorText)
                self.end(error)
                return
            }
            self.socket = fd
            self.phase = .open
            // libcurl detaches a connect-only connection from its handle when it connects
            // and leaves it idle in the multi's cache until the first send or receive; an
            // idle connection with bytes waiting looks dead to libcurl, which closes it when
            // the next stream of the loop connects. A first receive now ties it to the
            // handle for good; what it reads is served first.
            switch self.receive(self.buffer.count) {
            case .success(let data?):
                if data.isEmpty { self.atEnd = true } else { self.early = data }
            case .success(nil):
                break
            case .failure(let error):
                self.end(error)
                return
            }
            let done = self.opening
            self.opening = nil
            done?(nil)
            self.pump()
        }
        t.start()
    }

    /// Ends the stream: every outstanding operation fails with `error`.
    private func end(_ error: PorterError) {
        guard phase != .closed else { return }
        phase = .closed
        failure = error
        loop.watch(self, events: 0)
        if let tls {
            porter_tls_free(tls)
            self.tls = nil
        }
        if tlsSocket >= 0 {
            _ = Glibc.close(tlsSocket)
            tlsSocket = -1
        }
        transfer?.closeConnection()
        transfer = nil
        socket = -1
        let pendingReads = reads, pendingWrites = writes, shake = handshaking, open = opening
        reads = []
        writes = []
        handshaking = nil
        opening = nil
        open?(error)
        shake?(error)
        for r in pendingReads { r.done(.failure(error)) }
        for w in pendingWrites {
            switch w {
            case .bytes(_, _, let done), .startTLS(_, let done): done(error)
            case .closeWrite: break
            }
        }
    }

    /// OpenSSL's protocol version number for a configured TLS version (0: none set).
    static func openSSLVersion(_ v: TLSVersion?) -> Int32 {
        switch v {
        case .tls1_0?: return 0x0301
        case .tls1_1?: return 0x0302
        case .tls1_2?: return 0x0303
        case .tls1_3?: return 0x0304
        case nil: return 0
        }
    }

    /// The socket is ready for what the stream waited for.
    func socketReady(_ events: Int16) {
        pump()
    }

    /// Moves every outstanding operation as far as the socket allows, then waits for the
    /// events that would let it go further.
    private func pump() {
        if phase == .closed {
            let r = reads, w = writes
            reads = []
            writes = []
            let error = failure ?? PorterError(.cancelled, "the stream was closed", url: url)
            for x in r { x.done(.failure(error)) }
            for x in w { if case .bytes(_, _, let done) = x { done(error) } else if case .startTLS(_, let done) = x { done(error) } }
            return
        }
        guard phase == .open else { return }
        var events: Int16 = 0
        if let wait = pumpHandshake() {
            events |= wait
        } else if handshaking == nil {
            events |= pumpWrites()
            if phase != .open { return }
            if handshaking == nil {
                events |= pumpReads()
            } else if let wait = pumpHandshake() {
                events |= wait
            }
        }
        guard phase == .open else { return }
        loop.watch(self, events: events)
    }

    /// Drives a TLS handshake in progress: the events it waits for, or nil when none runs.
    private func pumpHandshake() -> Int16? {
        guard let done = handshaking, let tls else { return nil }
        var err = [CChar](repeating: 0, count: 512)
        let rc = porter_tls_handshake(tls, &err, err.count)
        switch rc {
        case 0:
            handshaking = nil
            done(nil)
            return nil
        case 1: return Int16(POLLIN)
        case 2: return Int16(POLLOUT)
        default:
            let text = cText(err)
            let error = PorterError(rc == -2 ? .serverCertificateUntrusted : .secureConnectionFailed,
                                    text.isEmpty ? "the TLS handshake failed" : text, url: url)
            handshaking = nil
            done(error)
            end(error)
            return nil
        }
    }

    private func pumpWrites() -> Int16 {
        while let first = writes.first {
            switch first {
            case .closeWrite:
                writes.removeFirst()
                if let tls { porter_tls_shutdown(tls) }
                if pollSocket >= 0 { shutdown(pollSocket, Int32(SHUT_WR)) }
            case .startTLS(let name, let done):
                writes.removeFirst()
                guard tls == nil, !target.secure else {
                    done(PorterError(.unsupportedConfiguration, "the stream already uses TLS", url: url))
                    continue
                }
                guard early.isEmpty else {
                    // Plain bytes nobody read would be served after the handshake.
                    let error = PorterError(.secureConnectionFailed,
                                            "plain bytes arrived before TLS started and were not read: not starting TLS over them", url: url)
                    done(error)
                    end(error)
                    return 0
                }
                var err = [CChar](repeating: 0, count: 512)
                let c = configuration
                tlsSocket = fcntl(socket, F_DUPFD_CLOEXEC, 0)
                var settings = porter_tls_settings()
                settings.verify = c.tlsVerificationDisabled ? 0 : 1
                settings.minimum_version = CurlStream.openSSLVersion(c.tlsMinimumVersion)
                settings.maximum_version = CurlStream.openSSLVersion(c.tlsMaximumVersion)
                let made = name.withCString { namePointer in
                    withOptionalCString(c.caCertificateFile) { ca in
                        withOptionalCString(c.pinnedPublicKey) { pin in
                            withOptionalCString(c.clientCertificate?.certificatePath) { cert in
                                withOptionalCString(c.clientCertificate?.keyPath) { key in
                                    settings.ca_file = ca
                                    settings.pinned_key = pin
                                    settings.certificate = cert
                                    settings.key = key
                                    return porter_tls_new(tlsSocket, namePointer, &settings, &err, err.count)
                                }
                            }
                        }
                    }
                }
                guard tlsSocket >= 0, let made else {
                    let error = PorterError(.secureConnectionFailed, tlsSocket < 0 ? "cannot duplicate the socket" : cText(err), url: url)
                    done(error)
                    end(error)
                    return 0
                }
                tls = made
                handshaking = done
                return 0   // reads and later writes wait for the handshake
            case .bytes(let data, let sent, let done):
                if sent >= data.count {
                    writes.removeFirst()
                    done(nil)
                    continue
                }
                switch send(data, from: sent) {
                case .success(let n?):
                    writes[0] = .bytes(data, sent: sent + n, done)
                case .success(nil):
                    return tls == nil ? Int16(POLLOUT) : tlsWants
                case .failure(let error):
                    end(error)
                    return 0
                }
            }
        }
        return 0
    }

    private func pumpReads() -> Int16 {
        while let first = reads.first {
            if readClosed || atEnd {
                reads.removeFirst()
                first.done(.success(Data()))
                continue
            }
            if !early.isEmpty {
                reads.removeFirst()
                let take = early.prefix(first.maxLength)
                early.removeFirst(take.count)
                first.done(.success(Data(take)))
                continue
            }
            let wanted = min(first.maxLength, buffer.count)
            switch receive(wanted) {
            case .success(let data?):
                reads.removeFirst()
                if data.isEmpty { atEnd = true }
                first.done(.success(data))
            case .success(nil):
                return tls == nil ? Int16(POLLIN) : tlsWants
            case .failure(let error):
                end(error)
                return 0
            }
        }
        return 0
    }

    private func send(_ data: Data, from offset: Int) -> Result<Int?, PorterError> {
        data.withUnsafeBytes { (all: UnsafeRawBufferPointer) -> Result<Int?, PorterError> in
            let rest = UnsafeRawBufferPointer(rebasing: all[offset..<all.count])
            if let tls {
                var err = [CChar](repeating: 0, count: 256)
                let n = porter_tls_write(tls, rest.baseAddress, rest.count, &err, err.count)
                if n > 0 { return .success(n) }
                if n == -1 || n == -2 {
                    tlsWants = Int16(n == -1 ? POLLIN : POLLOUT)
                    return .success(nil)
                }
                return .failure(PorterError(.networkConnectionLost, "TLS write failed: \(cText(err))", url: url))
            }
            guard let transfer else { return .failure(PorterError(.cancelled, "the stream was closed", url: url)) }
            let (code, n) = transfer.send(rest)
            if code == CURLE_OK { return .success(n) }
            if code == CURLE_AGAIN { return .success(nil) }
            return .failure(PorterError.curl(code, url: url, detail: transfer.errorText))
        }
    }

    /// Bytes received (empty at the end of the stream), nil when none are there yet.
    private func receive(_ count: Int) -> Result<Data?, PorterError> {
        buffer.withUnsafeMutableBytes { (raw: UnsafeMutableRawBufferPointer) -> Result<Data?, PorterError> in
            let room = UnsafeMutableRawBufferPointer(rebasing: raw[0..<count])
            if let tls {
                var err = [CChar](repeating: 0, count: 256)
                let n = porter_tls_read(tls, room.baseAddress, room.count, &err, err.count)
                if n >= 0 { return .success(Data(room[0..<n])) }
                if n == -1 || n == -2 {
                    tlsWants = Int16(n == -1 ? POLLIN : POLLOUT)
                    return .success(nil)
                }
                return .failure(PorterError(.networkConnectionLost, "TLS read failed: \(cText(err))", url: url))
            }
            guard let transfer else { return .failure(PorterError(.cancelled, "the stream was closed", url: url)) }
            let (code, n) = transfer.receive(into: room)
            if code == CURLE_OK { return .success(Data(room[0..<n])) }
            if code == CURLE_AGAIN { return .success(nil) }
            return .failure(PorterError.curl(code, url: url, detail: transfer.errorText))
        }
    }
}

/// Calls `body` with a C string of `value`, or NULL.
private func withOptionalCString<R>(_ value: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let value else { return body(nil) }
    return value.withCString { body($0) }
}

/// The text of a NUL-terminated C buffer.
func cText(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
