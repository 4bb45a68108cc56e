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
