import Foundation
import HTTPTypes
import PorterCore
import PorterIPC

/// What the host and a plugin worker say to each other over their socketpair
/// (PorterIPC frames; service "porter-plugin-worker", version 2). Messages are JSON, but
/// for the few sent per body chunk or per flow-control step, which are compact frames
/// (`WorkerCodec`); body bytes travel as data frames tagged with the load's number
/// (`Channel.sendData`, `Channel.receiveIncoming`). Every value here comes from the other
/// process and is checked before use: a message the receiver cannot place ends the
/// connection, never the process.
enum WorkerWire {
    /// Version 2: compact frames for the hot messages (version 1 sent them as JSON). Host
    /// and worker are installed together; a worker of another version is refused at the
    /// handshake.
    static let hello = Hello(service: "porter-plugin-worker", minimumVersion: 2, maximumVersion: 2)
    /// Body bytes per data frame.
    static let chunk = 256 << 10
    /// The socket buffers of a worker's socketpair: about eight chunks in flight.
    static let socketBuffer = 2 << 20

    /// A whole data frame of `load`'s body, in one allocation: `fill` writes up to
    /// `capacity` bytes straight into its payload and returns how many (the host reads a
    /// request body's chunk into the frame it sends, with no copy between).
    static func encodedDataFrame(load: UInt64, capacity: Int,
                                 fill: (UnsafeMutableRawBufferPointer) throws -> Int) throws -> [UInt8] {
        let head = Frame.headerLength + FrameDecoder.tagLength
        var failure: (any Error)?
        let bytes = [UInt8](unsafeUninitializedCapacity: head + capacity) { buffer, initialized in
            let base = UnsafeMutableRawPointer(buffer.baseAddress!)
            var n = 0
            do {
                n = max(0, min(capacity, try fill(UnsafeMutableRawBufferPointer(start: base + head, count: capacity))))
            } catch {
                failure = error
            }
            Frame.writeHeader(kind: .data, payloadLength: FrameDecoder.tagLength + n, to: base)
            base.storeBytes(of: load.bigEndian, toByteOffset: Frame.headerLength, as: UInt64.self)
            initialized = head + n
        }
        if let failure { throw failure }
        return bytes
    }
}

/// How worker messages are put in frames, one policy for both sides. The messages sent
/// per body chunk, per flow-control step or per load have a binary layout in a
/// `.compact` frame: one byte naming the message, the load (8 bytes), then its fields —
/// numbers 8 bytes each, big-endian; a load's request and response head as `WireWriter`
/// lays them out; the rest — rare and varied — are JSON in a `.message` frame. A frame
/// the receiver cannot place (an unknown name byte, a length that is not the message's,
/// a field out of its range, bytes left over) is malformed.
enum WorkerCodec {
    /// The compact messages from the host.
    enum ToWorkerName: UInt8 {
        case stop = 1, pause = 2, resume = 3
        /// A body that ended without failure (a failure carries text: JSON).
        case bodyEnd = 4
        /// Field: the request (`WireRequest.write`).
        case start = 5
    }

    /// The compact messages from a worker.
    enum FromWorkerName: UInt8 {
        case finish = 1, destroyed = 2
        /// Field: the capacity.
        case readBody = 3
        /// Fields: bytes, total, expected.
        case sent = 4
        /// Field: revalidated, 0 or 1.
        case cachedValid = 5
        /// Field: the head (`WireResponse.write`).
        case response = 6
    }

    /// The whole frame (header included) for `m`; nil when it cannot be encoded.
    static func encoded(_ m: ToWorker) -> [UInt8]? {
        switch m {
        case .stop(let load): return compact(ToWorkerName.stop.rawValue, load)
        case .pause(let load): return compact(ToWorkerName.pause.rawValue, load)
        case .resume(let load): return compact(ToWorkerName.resume.rawValue, load)
        case .bodyEnd(let load, nil): return compact(ToWorkerName.bodyEnd.rawValue, load)
        case .start(let load, let request): return compact(ToWorkerName.start.rawValue, load) { request.write(to: &$0) }
        default: return json(m)
        }
    }

    /// The whole frame (header included) for `m`; nil when it cannot be encoded.
    static func encoded(_ m: FromWorker) -> [UInt8]? {
        switch m {
        case .finish(let load): return compact(FromWorkerName.finish.rawValue, load)
        case .destroyed(let load): return compact(FromWorkerName.destroyed.rawValue, load)
        case .readBody(let load, let capacity):
            return compact(FromWorkerName.readBody.rawValue, load, fields: 1, Int64(capacity))
        case .sent(let load, let bytes, let total, let expected):
            return compact(FromWorkerName.sent.rawValue, load, fields: 3, bytes, total, expected)
        case .cachedValid(let load, let revalidated):
            return compact(FromWorkerName.cachedValid.rawValue, load, fields: 1, revalidated ? 1 : 0)
        case .response(let load, let head): return compact(FromWorkerName.response.rawValue, load) { head.write(to: &$0) }
        default: return json(m)
        }
    }

    static func decode(_: ToWorker.Type, from frame: Frame) throws(IPCError) -> ToWorker {
        switch frame.kind {
        case .message: return try Channel.decode(ToWorker.self, from: frame.payload)
        case .compact:
            let c = try Compact(frame.payload)
            switch ToWorkerName(rawValue: c.name) {
            case .stop: try c.expect(0); return .stop(load: c.load)
            case .pause: try c.expect(0); return .pause(load: c.load)
            case .resume: try c.expect(0); return .resume(load: c.load)
            case .bodyEnd: try c.expect(0); return .bodyEnd(load: c.load, failure: nil)
            case .start:
                var r = c.rest
                let request = try WireRequest(reading: &r)
                try r.end()
                return .start(load: c.load, request: request)
            case nil: throw IPCError(.malformed, "an unknown compact message \(c.name)")
            }
        default: throw IPCError(.malformed, "expected a message, got a frame of kind \(frame.kind)")
        }
    }

    static func decode(_: FromWorker.Type, from frame: Frame) throws(IPCError) -> FromWorker {
        switch frame.kind {
        case .message: return try Channel.decode(FromWorker.self, from: frame.payload)
        case .compact:
            let c = try Compact(frame.payload)
            switch FromWorkerName(rawValue: c.name) {
            case .finish: try c.expect(0); return .finish(load: c.load)
            case .destroyed: try c.expect(0); return .destroyed(load: c.load)
            case .readBody:
                try c.expect(1)
                return .readBody(load: c.load, capacity: Int(clamping: c.field(0)))
            case .sent:
                try c.expect(3)
                return .sent(load: c.load, bytes: c.field(0), total: c.field(1), expected: c.field(2))
            case .cachedValid:
                try c.expect(1)
                guard c.field(0) == 0 || c.field(0) == 1 else { throw IPCError(.malformed, "cachedValid with \(c.field(0))") }
                return .cachedValid(load: c.load, revalidated: c.field(0) == 1)
            case .response:
                var r = c.rest
                let head = try WireResponse(reading: &r)
                try r.end()
                return .response(load: c.load, head: head)
            case nil: throw IPCError(.malformed, "an unknown compact message \(c.name)")
            }
        default: throw IPCError(.malformed, "expected a message, got a frame of kind \(frame.kind)")
        }
    }

    /// A compact payload: name, load, then the message's fields.
    private struct Compact {
        let bytes: [UInt8]
        let name: UInt8
        let load: UInt64

        init(_ payload: [UInt8]) throws(IPCError) {
            guard payload.count >= 9 else { throw IPCError(.malformed, "a compact message of \(payload.count) bytes") }
            bytes = payload
            name = payload[0]
            load = payload.withUnsafeBytes { UInt64(bigEndian: $0.loadUnaligned(fromByteOffset: 1, as: UInt64.self)) }
        }

        /// Checks that exactly `n` numbers follow the load.
        func expect(_ n: Int) throws(IPCError) {
            guard bytes.count == 9 + 8 * n else {
                throw IPCError(.malformed, "compact message \(name) of \(bytes.count) bytes, not \(9 + 8 * n)")
            }
        }

        /// What follows the load, to read a structured field from.
        var rest: WireReader { WireReader(bytes, from: 9) }

        /// Field `i` (< the count `expect` checked).
        func field(_ i: Int) -> Int64 {
            bytes.withUnsafeBytes { Int64(bigEndian: $0.loadUnaligned(fromByteOffset: 9 + 8 * i, as: Int64.self)) }
        }
    }

    /// A compact frame with a structured field written by `body`.
    private static func compact(_ name: UInt8, _ load: UInt64, _ body: (inout WireWriter) -> Void) -> [UInt8] {
        var w = WireWriter()
        w.bytes.append(contentsOf: [0, 0, 0, 0, 0, name])
        w.u64(load)
        body(&w)
        let payload = w.bytes.count - Frame.headerLength
        w.bytes.withUnsafeMutableBytes { Frame.writeHeader(kind: .compact, payloadLength: payload, to: $0.baseAddress!) }
        return w.bytes
    }

    /// A compact frame, header included, in one allocation.
    private static func compact(_ name: UInt8, _ load: UInt64, fields: Int = 0,
                                _ a: Int64 = 0, _ b: Int64 = 0, _ c: Int64 = 0) -> [UInt8] {
        let payload = 9 + 8 * fields
        return [UInt8](unsafeUninitializedCapacity: Frame.headerLength + payload) { buffer, initialized in
            let p = UnsafeMutableRawPointer(buffer.baseAddress!)
            Frame.writeHeader(kind: .compact, payloadLength: payload, to: p)
            p.storeBytes(of: name, toByteOffset: 5, as: UInt8.self)
            p.storeBytes(of: load.bigEndian, toByteOffset: 6, as: UInt64.self)
            if fields > 0 { p.storeBytes(of: a.bigEndian, toByteOffset: 14, as: Int64.self) }
            if fields > 1 { p.storeBytes(of: b.bigEndian, toByteOffset: 22, as: Int64.self) }
            if fields > 2 { p.storeBytes(of: c.bigEndian, toByteOffset: 30, as: Int64.self) }
            initialized = Frame.headerLength + payload
        }
    }

    private static func json<M: Encodable>(_ m: M) -> [UInt8]? {
        guard let data = try? JSONEncoder().encode(m) else { return nil }
        return Frame(kind: .message, payload: Array(data)).encoded()
    }
}

/// Writes the structured fields of compact messages: numbers 8 bytes big-endian, a flag
/// one byte (0 or 1), a string its UTF-8 length (4 bytes) then its bytes, a list its
/// count (4 bytes) then its items, an optional a flag then the value.
struct WireWriter {
    var bytes: [UInt8] = []

    init() { bytes.reserveCapacity(512) }

    mutating func u64(_ v: UInt64) { withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func i64(_ v: Int64) { u64(UInt64(bitPattern: v)) }
    mutating func flag(_ v: Bool) { bytes.append(v ? 1 : 0) }
    mutating func count(_ n: Int) { withUnsafeBytes(of: UInt32(truncatingIfNeeded: n).bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func string(_ s: String) {
        var s = s
        s.withUTF8 { count($0.count); bytes.append(contentsOf: $0) }
    }
    mutating func optional<T>(_ v: T?, _ write: (inout WireWriter, T) -> Void) {
        flag(v != nil)
        if let v { write(&self, v) }
    }
    /// Name and value pairs (anything else in the list is not a pair and is left out).
    mutating func pairs(_ list: [[String]]) {
        let pairs = list.filter { $0.count == 2 }
        count(pairs.count)
        for p in pairs { string(p[0]); string(p[1]) }
    }
}

/// Reads what `WireWriter` wrote, every length checked against what is there: a read
/// past the end, a flag that is neither 0 nor 1 or a string that is not UTF-8 is
/// malformed.
struct WireReader {
    private let bytes: [UInt8]
    private var at: Int

    init(_ bytes: [UInt8], from start: Int) {
        self.bytes = bytes
        self.at = start
    }

    private mutating func take(_ n: Int) throws(IPCError) -> Range<Int> {
        guard n >= 0, bytes.count - at >= n else { throw IPCError(.malformed, "a compact message cut short") }
        defer { at += n }
        return at..<(at + n)
    }

    mutating func u64() throws(IPCError) -> UInt64 {
        let r = try take(8)
        return bytes.withUnsafeBytes { UInt64(bigEndian: $0.loadUnaligned(fromByteOffset: r.lowerBound, as: UInt64.self)) }
    }
    mutating func i64() throws(IPCError) -> Int64 { Int64(bitPattern: try u64()) }
    mutating func flag() throws(IPCError) -> Bool {
        let b = bytes[try take(1).lowerBound]
        guard b <= 1 else { throw IPCError(.malformed, "a flag of \(b)") }
        return b == 1
    }
    mutating func count() throws(IPCError) -> Int {
        let r = try take(4)
        return Int(bytes.withUnsafeBytes { UInt32(bigEndian: $0.loadUnaligned(fromByteOffset: r.lowerBound, as: UInt32.self)) })
    }
    mutating func string() throws(IPCError) -> String {
        let r = try take(try count())
        guard let s = String(validating: bytes[r], as: UTF8.self) else { throw IPCError(.malformed, "a string that is not UTF-8") }
        return s
    }
    mutating func optionalString() throws(IPCError) -> String? { try flag() ? try string() : nil }
    mutating func optionalI64() throws(IPCError) -> Int64? { try flag() ? try i64() : nil }
    mutating func pairs() throws(IPCError) -> [[String]] {
        let n = try count()
        // Each pair takes 8 bytes at least: a count past that is a lie, not a reservation.
        guard n <= (bytes.count - at) / 8 else { throw IPCError(.malformed, "\(n) pairs in a compact message too short for them") }
        var out: [[String]] = []
        out.reserveCapacity(n)
        for _ in 0..<n { out.append([try string(), try string()]) }
        return out
    }
    /// Nothing may be left over.
    func end() throws(IPCError) {
        guard at == bytes.count else { throw IPCError(.malformed, "\(bytes.count - at) bytes left over in a compact message") }
    }
}

/// A response head on the wire.
struct WireResponse: Codable, Sendable {
    var url: String
    var mimeType: String?
    var textEncoding: String?
    var expectedLength: Int64
    var statusCode: Int?
    var headers: [[String]]
    var resumeOffset: Int64?
    var validator: String?

    init(_ r: Response) {
        url = r.url.absoluteString
        mimeType = r.mimeType
        textEncoding = r.textEncodingName
        expectedLength = r.expectedContentLength
        statusCode = r.statusCode
        headers = r.headerFields.map { [$0.name.rawName, $0.value] }
        resumeOffset = r.resumeOffset
        validator = r.validator
    }

    /// The head as a `Response`; a URL or field that does not parse is dropped (the URL
    /// falls back to `fallback`).
    func response(fallback: URL) -> Response {
        var fields = HTTPFields()
        for pair in headers.prefix(10_000) where pair.count == 2 {
            guard let name = HTTPField.Name(pair[0]) else { continue }
            fields.append(HTTPField(name: name, value: pair[1]))
        }
        var r = Response(url: URL(string: url) ?? fallback, mimeType: mimeType,
                         expectedContentLength: expectedLength >= 0 ? expectedLength : -1,
                         textEncodingName: textEncoding, statusCode: statusCode, headerFields: fields)
        r.resumeOffset = resumeOffset.flatMap { $0 >= 0 ? $0 : nil }
        r.validator = validator
        return r
    }
}

extension WireResponse {
    func write(to w: inout WireWriter) {
        w.string(url)
        w.optional(mimeType) { $0.string($1) }
        w.optional(textEncoding) { $0.string($1) }
        w.i64(expectedLength)
        w.optional(statusCode) { $0.i64(Int64($1)) }
        w.pairs(headers)
        w.optional(resumeOffset) { $0.i64($1) }
        w.optional(validator) { $0.string($1) }
    }

    init(reading r: inout WireReader) throws(IPCError) {
        url = try r.string()
        mimeType = try r.optionalString()
        textEncoding = try r.optionalString()
        expectedLength = try r.i64()
        statusCode = try r.optionalI64().map { Int($0) }
        headers = try r.pairs()
        resumeOffset = try r.optionalI64()
        validator = try r.optionalString()
    }
}

/// A request on the wire: what the C `porter_request` carries.
struct WireRequest: Codable, Sendable {
    var url: String
    var method: String
    var headers: [[String]]
    var properties: [[String]]
    var resumeOffset: Int64?
    var resumeValidator: String?
    var hasBody: Bool
    var bodyLength: Int64?
    var timeout: Double
    var insecure: Bool
    var cached: WireResponse?

    init(_ r: Request, insecure: Bool, cached: Response?) {
        url = r.url.absoluteString
        method = r.method
        headers = r.headerFields.map { [$0.name.rawName, $0.value] }
        properties = r.properties.compactMap { key, value in (value as? String).map { [key, $0] } }.sorted { $0[0] < $1[0] }
        resumeOffset = r.resumeRange?.offset
        resumeValidator = r.resumeRange?.validator
        hasBody = r.body != nil
        bodyLength = r.body?.knownLength
        timeout = r.timeoutInterval
        self.insecure = insecure
        self.cached = cached.map(WireResponse.init)
    }
}

extension WireRequest {
    func write(to w: inout WireWriter) {
        w.string(url)
        w.string(method)
        w.pairs(headers)
        w.pairs(properties)
        w.optional(resumeOffset) { $0.i64($1) }
        w.optional(resumeValidator) { $0.string($1) }
        w.flag(hasBody)
        w.optional(bodyLength) { $0.i64($1) }
        w.u64(timeout.bitPattern)
        w.flag(insecure)
        w.optional(cached) { $1.write(to: &$0) }
    }

    init(reading r: inout WireReader) throws(IPCError) {
        url = try r.string()
        method = try r.string()
        headers = try r.pairs()
        properties = try r.pairs()
        resumeOffset = try r.optionalI64()
        resumeValidator = try r.optionalString()
        hasBody = try r.flag()
        bodyLength = try r.optionalI64()
        timeout = Double(bitPattern: try r.u64())
        insecure = try r.flag()
        cached = try r.flag() ? try WireResponse(reading: &r) : nil
    }
}

/// A challenge on the wire (the worker raised it; the host asks the application). It
/// carries only what a plugin may choose (realm, method, failures, what a server
/// presented for trust): the host builds the protection space from its own load's URL
/// (`PluginChallengeRequest`), so a worker cannot name another origin. Keys an older or
/// hostile worker adds (host, port, scheme, a proposed credential) are not read.
struct WireChallenge: Codable, Sendable {
    var id: UInt64
    var realm: String?
    /// "default", "password", "client-certificate", "server-trust" or "custom:NAME".
    var method: String
    var previousFailureCount: Int
    var identity: [Data]?
    var failureReason: String?

    init(_ c: AuthenticationChallenge) {
        id = c.identifier
        let s = c.protectionSpace
        realm = s.realm
        method = PluginChallengeRequest.wireName(s.authenticationMethod)
        previousFailureCount = c.previousFailureCount
        identity = s.serverTrust?.certificateChain
        failureReason = s.serverTrust?.evaluationFailure
    }

    /// What the plugin asked, for the host to build the challenge of its own load from.
    var request: PluginChallengeRequest {
        let m = PluginChallengeRequest.method(wireName: method)
        let trust = m == .serverTrust
            ? ServerTrust(certificateChain: Array((identity ?? []).prefix(64)), evaluationFailure: failureReason) : nil
        return PluginChallengeRequest(realm: realm, method: m, previousFailureCount: previousFailureCount, serverTrust: trust)
    }
}

/// The application's answer to a challenge, on the wire.
enum WireDisposition: Codable, Sendable {
    case password(user: String, password: String)
    case trust
    case certificate(certificatePath: String, keyPath: String, passphrase: String?)
    case performDefault
    case cancel
    case reject

    init(_ d: ChallengeDisposition) {
        switch d {
        case .useCredential(let c):
            switch c.kind {
            case .password(let u, let p): self = .password(user: u, password: p)
            case .trust: self = .trust
            case .certificate(let c, let k, let p): self = .certificate(certificatePath: c, keyPath: k, passphrase: p)
            }
        case .performDefaultHandling: self = .performDefault
        case .cancelAuthenticationChallenge: self = .cancel
        case .rejectProtectionSpace: self = .reject
        }
    }

    func disposition(for challenge: AuthenticationChallenge) -> ChallengeDisposition {
        switch self {
        case .password(let u, let p): return .useCredential(Credential(user: u, password: p, persistence: .none))
        case .trust:
            return .useCredential(Credential(trust: challenge.protectionSpace.serverTrust ?? ServerTrust(certificateChain: [])))
        case .certificate(let c, let k, let p):
            return .useCredential(Credential(certificatePath: c, keyPath: k, passphrase: p, persistence: .none))
        case .performDefault: return .performDefaultHandling
        case .cancel: return .cancelAuthenticationChallenge
        case .reject: return .rejectProtectionSpace
        }
    }
}

/// A task event for a plugin that subscribed to it (porter_plugin.h, Events).
struct WireTaskEvent: Codable, Sendable {
    var kind: String
    var taskID: UInt64
    var url: String
    var other: String?
    var number: Int64
    var number2: Int64
    var code: Int

    init?(_ e: TaskEvent) {
        switch e {
        case .created(let id, let url):
            self.init(kind: "task.created", taskID: id, url: url.absoluteString)
        case .response(let id, let url, let status, let length):
            self.init(kind: "task.response", taskID: id, url: url.absoluteString, number: Int64(status ?? -1), number2: length)
        case .redirected(let id, let from, let to):
            self.init(kind: "task.redirected", taskID: id, url: from.absoluteString, other: to.absoluteString)
        case .challenged(let id, let host, let method, let failures):
            self.init(kind: "task.challenged", taskID: id, url: host, other: method, number: Int64(failures))
        case .completed(let id, let url, let received, let sent, let error):
            self.init(kind: "task.completed", taskID: id, url: url.absoluteString, number: received, number2: sent,
                      code: error?.code.rawValue ?? 0)
        }
    }

    init(kind: String, taskID: UInt64, url: String, other: String? = nil, number: Int64 = 0, number2: Int64 = 0,
         code: Int = 0) {
        self.kind = kind
        self.taskID = taskID
        self.url = url
        self.other = other
        self.number = number
        self.number2 = number2
        self.code = code
    }

    var event: TaskEvent? {
        guard let u = URL(string: url) ?? URL(string: "about:blank") else { return nil }
        switch kind {
        case "task.created": return .created(taskID: taskID, url: u)
        case "task.response":
            return .response(taskID: taskID, url: u, statusCode: number >= 0 ? Int(clamping: number) : nil,
                             expectedContentLength: number2)
        case "task.redirected":
            return .redirected(taskID: taskID, from: u, to: URL(string: other ?? "") ?? u)
        case "task.challenged":
            return .challenged(taskID: taskID, host: url, method: other ?? "", previousFailureCount: Int(clamping: number))
        case "task.completed":
            let error = code == 0 ? nil : PorterError(PorterError.Code(rawValue: code) ?? .unknown, "", url: u)
            return .completed(taskID: taskID, url: u, bytesReceived: number, bytesSent: number2, error: error)
        default: return nil
        }
    }
}

/// Host to worker.
enum ToWorker: Codable, Sendable {
    case start(load: UInt64, request: WireRequest)
    case stop(load: UInt64)
    case pause(load: UInt64)
    case resume(load: UInt64)
    case reply(load: UInt64, challenge: UInt64, answer: WireDisposition)
    /// The request body ended (after the data frames answering a `readBody`), or failed.
    case bodyEnd(load: UInt64, failure: String?)
    case event(WireTaskEvent)
    /// The answer to a worker's `connectService`: `code` 0 means a connected descriptor
    /// came with this frame (SCM_RIGHTS); otherwise a PorterError code and why.
    case service(load: UInt64, request: UInt64, code: Int, message: String)
}

/// Worker to host.
enum FromWorker: Codable, Sendable {
    /// Sent once the plugin is loaded: the events it subscribed to, and what the sandbox
    /// enforces.
    case ready(subscriptions: [String], sandbox: String)
    case response(load: UInt64, head: WireResponse)
    case redirect(load: UInt64, url: String, head: WireResponse)
    case finish(load: UInt64)
    case fail(load: UInt64, code: Int, message: String, causeDomain: String?, causeCode: Int)
    case challenge(load: UInt64, challenge: WireChallenge)
    case cancelChallenge(load: UInt64, challenge: UInt64)
    case cachedValid(load: UInt64, revalidated: Bool)
    case sent(load: UInt64, bytes: Int64, total: Int64, expected: Int64)
    /// The plugin wants up to `capacity` bytes of the request body.
    case readBody(load: UInt64, capacity: Int)
    case log(load: UInt64?, level: Int, text: String)
    /// The plugin's `destroy` returned for this load (after an end or a stop).
    case destroyed(load: UInt64)
    /// The plugin called `connect_service` (ABI 1.3): it names a service and nothing
    /// else; the host decides from the plugin's probed description and connects from its
    /// own environment (keys a worker adds, such as a path, are not read).
    case connectService(load: UInt64, request: UInt64, service: Int32)
}
