import Foundation
import HTTPTypes

/// A source of request body bytes read in order, once. Porter reads it from one
/// thread at a time. Return 0 at the end; throw to fail the task.
public protocol BodyStream: AnyObject, Sendable {
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int
    /// How many bytes the stream will give, when that is known before it is read: HTTP
    /// then sends a `Content-Length` instead of a chunked body. Nil (the default): unknown.
    var knownLength: Int64? { get }
}

extension BodyStream {
    public var knownLength: Int64? { nil }
}

/// A `BodyStream` over bytes in memory; handy for tests and small bodies.
public final class DataBodyStream: BodyStream, @unchecked Sendable {
    private let lock = NSLock()
    private let data: Data
    private var offset = 0
    public init(_ data: Data) { self.data = data }
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        lock.lock(); defer { lock.unlock() }
        let n = min(buffer.count, data.count - offset)
        guard n > 0 else { return 0 }
        data.withUnsafeBytes { src in
            buffer.baseAddress!.copyMemory(from: src.baseAddress! + offset, byteCount: n)
        }
        offset += n
        return n
    }
}

/// The body a request sends.
public enum RequestBody: Sendable {
    case data(Data)
    case file(URL)
    case stream(any BodyStream)

    /// The length when known up front.
    public var knownLength: Int64? {
        switch self {
        case .data(let d): return Int64(d.count)
        case .file(let url):
            let attrs = try? FileManager.default.attributesOfItem(atPath: url.path)
            return (attrs?[.size] as? NSNumber)?.int64Value
        case .stream(let s): return s.knownLength
        }
    }
}

/// How a request uses the session's cache (the URL Loading System's policies).
public enum CachePolicy: Int, Sendable {
    case useProtocolCachePolicy = 0
    case reloadIgnoringLocalCacheData = 1
    case returnCacheDataElseLoad = 2
    case returnCacheDataDontLoad = 3
    case reloadRevalidatingCacheData = 4
}

/// Where a download resumes: the handler that honours it answers with
/// `Response.resumeOffset == offset` and sends only the bytes after it.
public struct ResumeRange: Sendable, Equatable {
    public var offset: Int64
    /// An opaque validator from the first response (an ETag, a Last-Modified date,
    /// a size and modification time): a handler starts over if the resource changed.
    public var validator: String?
    public init(offset: Int64, validator: String?) {
        self.offset = offset
        self.validator = validator
    }
}

/// A load request: a value type, copied freely. Copy-on-write: a copy shares one
/// storage box (one retain) until either side changes a field, so handing a request
/// from the session to its engine, driver and handler costs no field-by-field copy.
public struct Request: Sendable, CustomStringConvertible {
    /// The fields. Mutated only through `writable()`, which first makes the box unique to
    /// this value: no two values ever share a box that changes.
    /// The fields skip the run-time exclusivity check of class properties (runtime calls
    /// on every read: ~8 k instructions per load in W2's profile): every access comes through a `Request` or
    /// `SessionConfiguration` value, whose own accesses the compiler already checks, and a
    /// box is written only while one value alone holds it.
    private struct Fields {
        var url: URL
        /// `url`'s scheme, lower-cased: kept with the URL (set with it) because every
        /// step of a load asks for it (registry, cookies, options, TLS checks).
        var scheme: String
        var method: String
        var headerFields: HTTPFields
        var body: RequestBody?
        var cachePolicy: CachePolicy
        var timeoutInterval: TimeInterval
        var mainDocumentURL: URL?
        var resumeRange: ResumeRange?
        var properties: [String: any Sendable]
        var cachePartition: String
        var suppressedHeaders: Set<String>
        var priority: Float
    }

    /// The box the fields live in; copying a box copies the fields whole (no list of
    /// fields to keep in step when one is added).
    private final class Storage: @unchecked Sendable {
        @exclusivity(unchecked) var f: Fields
        init(_ f: Fields) { self.f = f }
        func copy() -> Storage { Storage(f) }
    }

    private var storage: Storage

    /// The box, made unique to this value first (copied when another value shares it).
    private mutating func writable() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        return storage
    }

    public var url: URL {
        get { storage.f.url }
        set {
            let box = writable()
            box.f.url = newValue
            box.f.scheme = Request.scheme(of: newValue)
        }
    }
    /// "GET" unless set; uploads default to "PUT" when the method was not set.
    public var method: String {
        get { storage.f.method }
        _modify { yield &writable().f.method }
    }
    public var headerFields: HTTPFields {
        get { storage.f.headerFields }
        _modify { yield &writable().f.headerFields }
    }
    public var body: RequestBody? {
        get { storage.f.body }
        _modify { yield &writable().f.body }
    }
    public var cachePolicy: CachePolicy {
        get { storage.f.cachePolicy }
        _modify { yield &writable().f.cachePolicy }
    }
    /// Idle timeout in seconds (0 means the session's).
    public var timeoutInterval: TimeInterval {
        get { storage.f.timeoutInterval }
        _modify { yield &writable().f.timeoutInterval }
    }
    /// The URL of the top-level document, for cookie policies.
    public var mainDocumentURL: URL? {
        get { storage.f.mainDocumentURL }
        _modify { yield &writable().f.mainDocumentURL }
    }
    /// Set by a download task that resumes; handlers that can resume honour it.
    public var resumeRange: ResumeRange? {
        get { storage.f.resumeRange }
        _modify { yield &writable().f.resumeRange }
    }
    /// A handler's own keyed values on a request: how an intercepting handler marks
    /// a request it has already seen.
    public private(set) var properties: [String: any Sendable] {
        get { storage.f.properties }
        _modify { yield &writable().f.properties }
    }
    /// The trust settings and address overrides the session loads this request under
    /// (set by the session): a cached response is served only to a request of the same
    /// partition, so a response fetched with `-k`, `--resolve` or another CA or pin never
    /// answers a load that verifies differently.
    public package(set) var cachePartition: String {
        get { storage.f.cachePartition }
        _modify { yield &writable().f.cachePartition }
    }
    /// Header fields a handler or its library would add on its own (`Accept`,
    /// `User-Agent`, `Accept-Encoding`, `Expect`, ...) that this request must not send:
    /// curl's `-H 'Name:'`. Names compare without regard to case. (A field in
    /// `headerFields` with an empty value is sent empty: curl's `-H 'Name;'`.)
    public var suppressedHeaders: Set<String> {
        get { storage.f.suppressedHeaders }
        _modify { yield &writable().f.suppressedHeaders }
    }
    /// The priority of the task that loads this request (`SessionTask.priority`: 0 low …
    /// 1 high, 0.5 by default), set by the session for its handler: the libcurl handlers
    /// make it the HTTP/2 stream weight and the order in which loads waiting for a
    /// connection to their host start (`CurlOptions`).
    public package(set) var priority: Float {
        get { storage.f.priority }
        _modify { yield &writable().f.priority }
    }

    public init(url: URL, method: String = "GET", headerFields: HTTPFields = [:], body: RequestBody? = nil,
                cachePolicy: CachePolicy = .useProtocolCachePolicy, timeoutInterval: TimeInterval = 0) {
        storage = Storage(Fields(url: url, scheme: Request.scheme(of: url), method: method, headerFields: headerFields, body: body, cachePolicy: cachePolicy,
                          timeoutInterval: timeoutInterval, mainDocumentURL: nil, resumeRange: nil, properties: [:],
                          cachePartition: "", suppressedHeaders: [], priority: 0.5))
    }

    public func property(forKey key: String) -> (any Sendable)? {
        let all = storage.f.properties
        if all.isEmpty { return nil }
        // A request carries a handful at most, and handlers ask for several on every
        // load: comparing a few keys (mostly the same static strings) costs less than
        // hashing the one asked for.
        if all.count <= 4 {
            for (name, value) in all where name == key { return value }
            return nil
        }
        return all[key]
    }
    public mutating func setProperty(_ value: any Sendable, forKey key: String) { properties[key] = value }
    public mutating func removeProperty(forKey key: String) { properties.removeValue(forKey: key) }

    /// The URL's scheme, lower-cased ("" when it has none).
    public var scheme: String { storage.f.scheme }

    private static func scheme(of url: URL) -> String { url.scheme?.lowercased() ?? "" }

    /// Reads a header by its name (case-insensitive). Invalid names return nil.
    public func value(forHeader name: String) -> String? {
        guard let n = HTTPField.Name(name) else { return nil }
        return headerFields.combined(n)
    }

    /// Sets or removes a header. Invalid names are ignored and return false.
    @discardableResult
    public mutating func setValue(_ value: String?, forHeader name: String) -> Bool {
        guard let n = HTTPField.Name(name) else { return false }
        headerFields[n] = value
        return true
    }

    /// Adds a header field, keeping any of the same name (URLRequest's `addValue`): two
    /// `X-A` fields are both sent. Invalid names are ignored and return false.
    @discardableResult
    public mutating func addValue(_ value: String, forHeader name: String) -> Bool {
        guard let n = HTTPField.Name(name) else { return false }
        headerFields.append(HTTPField(name: n, value: value))
        return true
    }

    /// Sets `Authorization: Basic …` for `user` and `password` (sent with the first request,
    /// before any challenge, as curl's `-u` does). Porter drops it when a redirect leaves
    /// the origin; the session's challenge-driven authentication is unchanged otherwise.
    public mutating func setBasicAuthorization(user: String, password: String) {
        setValue("Basic " + Data("\(user):\(password)".utf8).base64EncodedString(), forHeader: "Authorization")
    }

    public var description: String { "\(method) \(url.maskingPassword)" }

    /// RFC 9110 §9.1: a method is a token (§5.6.2: letters, digits and !#$%&'*+-.^_`|~).
    /// A method with a space, CR or LF would be written into the request line as it is,
    /// and a server would read the rest as a second, smuggled request.
    public static func isValidMethod(_ method: String) -> Bool {
        HTTPSyntax.isToken(method)
    }

    /// Why this request cannot be sent (`badURL`), or nil. The one check every request
    /// passes before any handler sees it: the session runs it for each load and each
    /// redirect, for tasks it hands to porterd (and porterd's own engine again), and the
    /// CLI for `-X`.
    public var validationError: PorterError? {
        guard Request.isValidMethod(method) else {
            return PorterError(.badURL, "the method \(method.debugDescription) is not a token (RFC 9110: letters, digits and !#$%&'*+-.^_`|~)", url: url)
        }
        return nil
    }
}

/// RFC 9110's syntax rules that more than one place needs.
public enum HTTPSyntax {
    /// §5.6.2 token: one or more of letters, digits and !#$%&'*+-.^_`|~.
    public static func isToken(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.allSatisfy(MIMEType.isTokenByte)
    }
}

extension URL {
    /// The URL as descriptions, logs and -v show it: a password in it replaced by "***".
    public var maskingPassword: String {
        guard password != nil, var parts = URLComponents(url: self, resolvingAgainstBaseURL: false) else { return absoluteString }
        parts.password = "***"
        return parts.url?.absoluteString ?? absoluteString
    }
}
