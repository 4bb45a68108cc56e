import CCurl
import Foundation
import PorterCore

/// One libcurl easy handle and the callbacks of the handler that owns it. Created,
/// configured, started, paused and ended on its loop's thread only; the closures run
/// there too. Protocol-neutral: the http and ftp handlers both drive it.
public final class CurlTransfer: @unchecked Sendable {
    public enum WriteResult { case consumed, pause, abort }
    public enum ReadResult { case bytes(Int), end, pause, abort }

    public let loop: CurlLoop
    let easy: UnsafeMutableRawPointer
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
    private var lists: [UnsafeMutablePointer<curl_slist>] = []
    private var started = false
    private var ended = false
    /// A connect-only transfer: its connection stays in the loop once connected, until
    /// `closeConnection()` (set before `start`).
    public var keepsConnection = false
    /// The handle carries state libcurl writes out only when it is closed (an alt-svc
    /// cache, CURLOPT_ALTSVC): it is cleaned up, not reset for the next transfer, so the
    /// file is written and no other transfer inherits the handle's alternatives.
    public var closesHandle = false
    /// The host whose per-host connection limit this load counts against, when it uses a
    /// connection alone (HTTP/1.x, FTP), and its priority: loads waiting for a connection
    /// to the host start highest priority first (`HostQueue`). nil: started at once, as
    /// libcurl sees fit (set by `CurlOptions.apply`, before `start`).
    public var queueHost: String?
    public var priority: Float = 0.5
    /// The HTTP/2 stream weight libcurl took for this load (CURLOPT_STREAM_WEIGHT), if set.
    public internal(set) var streamWeight: Int?
    /// Waiting in its loop for its host's connection limit: not in the multi handle yet
    /// (loop thread).
    var isWaiting = false

    /// One header line as received, CRLF included. Return false to abort.
    // The callbacks are assigned whole before the transfer starts and read whole by
    // libcurl's callbacks (several per load): no access can overlap another, so they
    // skip the runtime's exclusivity check.
    @exclusivity(unchecked) public var onHeader: (UnsafeRawBufferPointer) -> Bool = { _ in true }
    /// Body bytes. `.pause` leaves them with libcurl, which offers them again after `resume()`.
    @exclusivity(unchecked) public var onData: (UnsafeRawBufferPointer) -> WriteResult = { _ in .consumed }
    /// Fill the buffer with upload bytes.
    @exclusivity(unchecked) public var onRead: (UnsafeMutableRawBufferPointer) -> ReadResult = { _ in .end }
    /// Progress (download total/now, upload total/now). Return false to abort. libcurl
    /// calls it several times per transfer, so a transfer without it (a load that sends no
    /// body reports no upload progress) asks libcurl for none (CURLOPT_NOPROGRESS).
    @exclusivity(unchecked) public var onProgress: ((Int64, Int64, Int64, Int64) -> Bool)? {
        didSet {
            if (oldValue == nil) != (onProgress == nil) {
                _ = porter_easy_setopt_long(easy, CURLOPT_NOPROGRESS, onProgress == nil ? 1 : 0)
            }
        }
    }
    /// The end, exactly once, unless `cancel()` came first.
    @exclusivity(unchecked) public var onComplete: (CURLcode) -> Void = { _ in }
    /// Called before the loop waits, once per `requestFlush()`.
    @exclusivity(unchecked) public var onFlush: () -> Void = {}

    /// What libcurl reports through CURLOPT_DEBUGFUNCTION: the kind (`DebugKind`) and
    /// the bytes, exactly as sent or received. Off (no CURLOPT_VERBOSE) until `debug(_:)`.
    public typealias DebugSink = @Sendable (DebugKind, UnsafeRawBufferPointer) -> Void
    /// curl_infotype's values.
    public enum DebugKind: Int32, Sendable {
        case text = 0, headerIn = 1, headerOut = 2, dataIn = 3, dataOut = 4, sslDataIn = 5, sslDataOut = 6
    }
    private var debugSink: DebugSink?
    /// Reports libcurl's traffic to `sink` (curl -v, --trace): the request head as sent,
    /// with the fields libcurl adds itself. Loop thread, before `start()`.
    public func debug(_ sink: @escaping DebugSink) {
        debugSink = sink
        _ = porter_easy_setopt_ptr(easy, CURLOPT_DEBUGDATA, Unmanaged.passUnretained(self).toOpaque())
        _ = porter_easy_setopt_debug_cb(easy, curlDebug)
        _ = porter_easy_setopt_long(easy, CURLOPT_VERBOSE, 1)
    }
    fileprivate func reportDebug(_ type: Int32, _ bytes: UnsafeRawBufferPointer) {
        guard let debugSink, let kind = DebugKind(rawValue: type) else { return }
        debugSink(kind, bytes)
    }
    private var flushRequested = false

    /// Asks for one `onFlush` call before the loop next waits (loop thread).
    public func requestFlush() {
        guard !flushRequested, !ended else { return }
        flushRequested = true
        loop.requestFlush(self)
    }

    func flush() {
        flushRequested = false
        if !ended { onFlush() }
    }

    /// Loop thread only. Throws `.resourceUnavailable` when libcurl cannot make a handle
    /// (out of memory): never a trap.
    public init(loop: CurlLoop) throws {
        guard loop.isUsable, let handle = loop.takeHandle() else {
            throw PorterError(.resourceUnavailable, "libcurl could not make a transfer handle (out of memory?)")
        }
        self.loop = loop
        easy = handle
        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = porter_easy_setopt_ptr(easy, CURLOPT_PRIVATE, me)
        _ = porter_easy_setopt_ptr(easy, CURLOPT_WRITEDATA, me)
        _ = porter_easy_setopt_ptr(easy, CURLOPT_HEADERDATA, me)
        _ = porter_easy_setopt_ptr(easy, CURLOPT_READDATA, me)
        _ = porter_easy_setopt_ptr(easy, CURLOPT_XFERINFODATA, me)
        _ = porter_easy_setopt_data_cb(easy, CURLOPT_WRITEFUNCTION, curlWrite)
        _ = porter_easy_setopt_data_cb(easy, CURLOPT_HEADERFUNCTION, curlHeader)
        _ = porter_easy_setopt_data_cb(easy, CURLOPT_READFUNCTION, curlRead)
        _ = porter_easy_setopt_xferinfo_cb(easy, curlProgress)
        _ = porter_easy_setopt_long(easy, CURLOPT_NOPROGRESS, 1)  // until onProgress is set
        _ = porter_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        errorBuffer.initialize(to: 0)
        _ = porter_easy_setopt_ptr(easy, CURLOPT_ERRORBUFFER, errorBuffer)
    }

    /// libcurl's detail message for the last failure ("" when none).
    public var errorText: String { String(cString: errorBuffer) }

    /// A new transfer, or nil after telling `client` the load failed (libcurl could not
    /// make a handle). Loop thread only.
    public static func make(on loop: CurlLoop, reportingTo client: any ProtocolClient, url: URL) -> CurlTransfer? {
        do {
            return try CurlTransfer(loop: loop)
        } catch {
            var failure = (error as? PorterError) ?? PorterError(.resourceUnavailable, "\(error)")
            failure.url = url
            client.didFail(with: failure)
            return nil
        }
    }

    deinit {
        // The handle is out of the multi handle by now (finish, cancel, or never started):
        // reset, it serves the next transfer. Lists go after it, as it pointed at them.
        if closesHandle { curl_easy_cleanup(easy) } else { loop.recycle(easy) }
        for l in lists { curl_slist_free_all(l) }
        errorBuffer.deallocate()
    }

    // MARK: options (loop thread)

    @discardableResult public func set(_ option: CURLoption, _ value: Int) -> CURLcode {
        porter_easy_setopt_long(easy, option, value)
    }
    @discardableResult public func set(_ option: CURLoption, offset value: Int64) -> CURLcode {
        porter_easy_setopt_off(easy, option, curl_off_t(value))
    }
    /// libcurl copies strings (since 7.17), so `value` need not outlive the call.
    @discardableResult public func set(_ option: CURLoption, _ value: String?) -> CURLcode {
        guard let value else { return porter_easy_setopt_ptr(easy, option, nil) }
        return value.withCString { porter_easy_setopt_ptr(easy, option, $0) }
    }
    /// A list option (headers); the list lives as long as the transfer.
    @discardableResult public func set(_ option: CURLoption, list: [String]) -> CURLcode {
        var head: UnsafeMutablePointer<curl_slist>?
        for item in list { head = item.withCString { curl_slist_append(head, $0) } }
        if let head { lists.append(head) }
        return porter_easy_setopt_ptr(easy, option, head)
    }

    public func info(_ info: CURLINFO) -> Int {
        var v = 0
        _ = porter_easy_getinfo_long(easy, info, &v)
        return v
    }
    public func info(offset info: CURLINFO) -> Int64 {
        var v: curl_off_t = 0
        _ = porter_easy_getinfo_off(easy, info, &v)
        return Int64(v)
    }
    /// The TLS version and cipher suite of the connection this transfer used, if TLS.
    public func tlsInfo() -> (version: String, cipher: String)? {
        var version = [CChar](repeating: 0, count: 128), cipher = [CChar](repeating: 0, count: 128)
        guard porter_tls_info(easy, &version, &cipher, 128) == 0 else { return nil }
        let v = cText(version)
        let c = cText(cipher)
        return v.isEmpty ? nil : (v, c)
    }

    /// The peer's certificates (leaf first) as DER, from CURLINFO_CERTINFO (needs CURLOPT_CERTINFO).
    public func certificateChain() -> [Data] {
        var info: UnsafeMutablePointer<curl_certinfo>?
        guard porter_easy_getinfo_certinfo(easy, &info) == CURLE_OK, let info, let lists = info.pointee.certinfo else { return [] }
        var chain: [Data] = []
        for i in 0..<Int(info.pointee.num_of_certs) {
            var item = lists[i]
            while let node = item {
                if let text = node.pointee.data.map({ String(cString: $0) }), text.hasPrefix("Cert:"),
                   let der = CurlTransfer.der(fromPEM: String(text.dropFirst(5))) {
                    chain.append(der)
                }
                item = node.pointee.next
            }
        }
        return chain
    }

    static func der(fromPEM pem: String) -> Data? {
        let body = pem.split(whereSeparator: \.isNewline).filter { !$0.hasPrefix("-----") }.joined()
        return Data(base64Encoded: body)
    }

    public func info(string info: CURLINFO) -> String? {
        var p: UnsafePointer<CChar>?
        guard porter_easy_getinfo_string(easy, info, &p) == CURLE_OK, let p else { return nil }
        return String(cString: p)
    }

    // MARK: life (loop thread)

    public func start() {
        guard !started else { return }
        started = true
        loop.add(self)
    }

    /// Ends the transfer without calling `onComplete`.
    public func cancel() {
        guard !ended else { return }
        ended = true
        loop.remove(self)
        clearCallbacks()
    }

    /// Closes the connection a connect-only transfer kept (loop thread).
    public func closeConnection() {
        ended = true
        loop.remove(self)
        clearCallbacks()
    }

    /// The socket of a connect-only transfer's connection, or nil.
    public var activeSocket: Int32? {
        var fd: curl_socket_t = -1
        guard porter_easy_getinfo_socket(easy, &fd) == CURLE_OK, fd >= 0 else { return nil }
        return fd
    }

    /// Sends on a connect-only connection: libcurl's result (CURLE_AGAIN when the
    /// socket is full) and the bytes taken.
    public func send(_ bytes: UnsafeRawBufferPointer) -> (code: CURLcode, count: Int) {
        var n = 0
        let rc = curl_easy_send(easy, bytes.baseAddress, bytes.count, &n)
        return (rc, n)
    }

    /// Receives on a connect-only connection: libcurl's result (CURLE_AGAIN when nothing
    /// is there yet) and the byte count (0 with CURLE_OK at the end of the stream).
    public func receive(into buffer: UnsafeMutableRawBufferPointer) -> (code: CURLcode, count: Int) {
        var n = 0
        let rc = curl_easy_recv(easy, buffer.baseAddress, buffer.count, &n)
        return (rc, n)
    }

    /// Lets a paused upload flow again; the download side stays paused if `keepReceivePaused`.
    public func resumeUpload(keepReceivePaused: Bool) {
        guard started, !ended else { return }
        unpause(keepReceivePaused ? porter_curlpause_recv : porter_curlpause_cont)
    }

    /// Lets paused data (and uploads) flow again.
    public func resume() {
        guard started, !ended else { return }
        unpause(porter_curlpause_cont)
    }

    /// Unpausing delivers the data libcurl held back, through the write callback, from
    /// inside curl_easy_pause: a callback that fails it (a decoding error, a bomb past its
    /// ratio) fails there, and libcurl reports it nowhere else. It ends the transfer.
    private func unpause(_ action: Int32) {
        // Not in the multi handle yet: nothing is held back, and libcurl refuses a pause
        // call on a handle without a connection.
        guard !isWaiting else { return }
        let rc = curl_easy_pause(easy, action)
        if rc != CURLE_OK, !ended {
            loop.remove(self)
            finish(rc)
        }
    }

    func finish(_ code: CURLcode) {
        assert(loop.isCurrent, "a transfer finished off its loop thread")
        guard !ended else { return }
        ended = true
        let done = onComplete
        clearCallbacks()
        done(code)
    }

    /// Drops the closures (they capture the handler) so nothing runs after the end.
    private func clearCallbacks() {
        onHeader = { _ in false }
        onData = { _ in .abort }
        onRead = { _ in .abort }
        onProgress = nil
        onComplete = { _ in }
        onFlush = {}
        debugSink = nil
    }
}

private func transfer(_ p: UnsafeMutableRawPointer?) -> CurlTransfer? {
    p.map { Unmanaged<CurlTransfer>.fromOpaque($0).takeUnretainedValue() }
}

private let curlWrite: porter_curl_data_cb = { ptr, size, count, user in
    guard let t = transfer(user), let ptr else { return 0 }
    assert(t.loop.isCurrent, "libcurl wrote off the transfer's loop thread")
    let n = size * count
    switch t.onData(UnsafeRawBufferPointer(start: ptr, count: n)) {
    case .consumed: return n
    case .pause: return porter_writefunc_pause
    case .abort: return 0
    }
}

private let curlHeader: porter_curl_data_cb = { ptr, size, count, user in
    guard let t = transfer(user), let ptr else { return 0 }
    assert(t.loop.isCurrent, "libcurl sent a header off the transfer's loop thread")
    let n = size * count
    return t.onHeader(UnsafeRawBufferPointer(start: ptr, count: n)) ? n : 0
}

private let curlRead: porter_curl_data_cb = { ptr, size, count, user in
    guard let t = transfer(user), let ptr else { return porter_readfunc_abort }
    switch t.onRead(UnsafeMutableRawBufferPointer(start: ptr, count: size * count)) {
    case .bytes(let n): return n
    case .end: return 0
    case .pause: return porter_readfunc_pause
    case .abort: return porter_readfunc_abort
    }
}

private let curlProgress: porter_curl_xferinfo_cb = { user, dlTotal, dlNow, ulTotal, ulNow in
    guard let t = transfer(user) else { return 1 }
    guard let progress = t.onProgress else { return 0 }
    return progress(Int64(dlTotal), Int64(dlNow), Int64(ulTotal), Int64(ulNow)) ? 0 : 1
}

private let curlDebug: porter_curl_debug_cb = { _, type, data, size, user in
    guard let t = transfer(user), let data else { return 0 }
    t.reportDebug(type, UnsafeRawBufferPointer(start: data, count: size))
    return 0
}
