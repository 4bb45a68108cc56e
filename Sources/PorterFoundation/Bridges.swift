// Bridges between Porter's values and Foundation's URL Loading System types, so a program
// written for URLSession can move over type by type: `Request(URLRequest)`,
// `URLRequest(Request)`, `HTTPURLResponse(Response)`, `URLResponse(Response)`,
// `Response(URLResponse)`, `URLError(PorterError)`. A module of its own because on Linux
// these types live in FoundationNetworking, which the core does not link.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import HTTPTypes
import PorterCore

extension CachePolicy {
    /// URLRequest's policy as Porter's (`reloadIgnoringLocalAndRemoteCacheData`, which
    /// URLSession itself treats as `reloadIgnoringLocalCacheData`, maps there too).
    public init(_ policy: URLRequest.CachePolicy) {
        switch policy {
        case .useProtocolCachePolicy: self = .useProtocolCachePolicy
        case .reloadIgnoringLocalCacheData, .reloadIgnoringLocalAndRemoteCacheData: self = .reloadIgnoringLocalCacheData
        case .returnCacheDataElseLoad: self = .returnCacheDataElseLoad
        case .returnCacheDataDontLoad: self = .returnCacheDataDontLoad
        case .reloadRevalidatingCacheData: self = .reloadRevalidatingCacheData
        @unknown default: self = .useProtocolCachePolicy
        }
    }
}

extension URLRequest.CachePolicy {
    public init(_ policy: CachePolicy) {
        switch policy {
        case .useProtocolCachePolicy: self = .useProtocolCachePolicy
        case .reloadIgnoringLocalCacheData: self = .reloadIgnoringLocalCacheData
        case .returnCacheDataElseLoad: self = .returnCacheDataElseLoad
        case .returnCacheDataDontLoad: self = .returnCacheDataDontLoad
        case .reloadRevalidatingCacheData: self = .reloadRevalidatingCacheData
        }
    }
}

extension Request {
    /// The same request as Porter's value: URL, method, header fields (a field whose name
    /// is not a valid HTTP field name is dropped), body (`httpBody`, or `httpBodyStream`
    /// read as a stream), cache policy, timeout and main document URL. A URLRequest
    /// without a URL gets `about:blank`, which no handler loads (`unsupportedURL`).
    public init(_ r: URLRequest) {
        self.init(url: r.url ?? URL(string: "about:blank")!, method: r.httpMethod ?? "GET")
        for (name, value) in r.allHTTPHeaderFields ?? [:] {
            if let n = HTTPField.Name(name) { headerFields.append(HTTPField(name: n, value: value)) }
        }
        if let data = r.httpBody {
            body = .data(data)
        } else if let stream = r.httpBodyStream {
            body = .stream(InputStreamBody(stream))
        }
        cachePolicy = CachePolicy(r.cachePolicy)
        timeoutInterval = r.timeoutInterval
        mainDocumentURL = r.mainDocumentURL
    }
}

extension URLRequest {
    /// Porter's request as a URLRequest. A body given as a file or a stream becomes
    /// `httpBodyStream`; a timeout of 0 (the session's) becomes URLRequest's 60 s.
    public init(_ r: Request) {
        self.init(url: r.url, cachePolicy: URLRequest.CachePolicy(r.cachePolicy),
                  timeoutInterval: r.timeoutInterval > 0 ? r.timeoutInterval : 60)
        httpMethod = r.method
        for field in r.headerFields { addValue(field.value, forHTTPHeaderField: field.name.rawName) }
        switch r.body {
        case .data(let d)?: httpBody = d
        case .file(let url)?: httpBodyStream = InputStream(url: url)
        case .stream?: httpBodyStream = nil   // a BodyStream cannot be read twice; not carried over
        case nil: break
        }
        mainDocumentURL = r.mainDocumentURL
    }
}

/// An `InputStream` read as a request body.
public final class InputStreamBody: BodyStream, @unchecked Sendable {
    private let stream: InputStream
    private let lock = NSLock()
    private var opened = false
    public init(_ stream: InputStream) { self.stream = stream }
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        lock.lock()
        defer { lock.unlock() }
        if !opened {
            stream.open()
            opened = true
        }
        guard let base = buffer.baseAddress?.assumingMemoryBound(to: UInt8.self), buffer.count > 0 else { return 0 }
        let n = stream.read(base, maxLength: buffer.count)
        if n < 0 {
            throw PorterError(.requestBodyStreamExhausted, "the body stream failed: \(stream.streamError.map { "\($0)" } ?? "unknown error")")
        }
        return n
    }
}

extension URLResponse {
    /// A response without HTTP semantics (file:, data:, a plugin's scheme) as URLResponse;
    /// use `HTTPURLResponse(_:)` for one with a status code.
    public static func from(_ r: Response) -> URLResponse {
        if let http = HTTPURLResponse(r) { return http }
        return URLResponse(url: r.url, mimeType: r.mimeType, expectedContentLength: Int(clamping: r.expectedContentLength),
                           textEncodingName: r.textEncodingName)
    }
}

extension HTTPURLResponse {
    /// Porter's response as HTTPURLResponse; nil when it has no status code (a scheme
    /// without one). Repeated header fields are joined with ", " as URLSession does.
    public convenience init?(_ r: Response) {
        guard let status = r.statusCode else { return nil }
        var fields: [String: String] = [:]
        for f in r.headerFields {
            let name = f.name.rawName
            if let existing = fields.first(where: { $0.key.caseInsensitiveCompare(name) == .orderedSame }) {
                fields[existing.key] = existing.value + ", " + f.value
            } else {
                fields[name] = f.value
            }
        }
        let version = r.statusLine.flatMap { $0.split(separator: " ").first.map(String.init) } ?? "HTTP/1.1"
        self.init(url: r.url, statusCode: status, httpVersion: version, headerFields: fields)
    }
}

extension Response {
    /// A Foundation response as Porter's (status code and header fields for an
    /// HTTPURLResponse).
    public init(_ r: URLResponse) {
        var fields = HTTPFields()
        var status: Int?
        if let http = r as? HTTPURLResponse {
            status = http.statusCode
            for (key, value) in http.allHeaderFields {
                guard let k = key as? String, let v = value as? String, let n = HTTPField.Name(k) else { continue }
                fields.append(HTTPField(name: n, value: v))
            }
        }
        self.init(url: r.url ?? URL(string: "about:blank")!, mimeType: r.mimeType,
                  expectedContentLength: r.expectedContentLength, textEncodingName: r.textEncodingName,
                  statusCode: status, headerFields: fields)
    }
}

extension URLError.Code {
    /// URLError's code for a Porter code. Porter codes without a URLError counterpart map
    /// to the nearest one, and `.unknown` where there is none (README, "Foundation"):
    /// tooManyRedirects → httpTooManyRedirects; redirectNotAllowed → unsupportedURL;
    /// authenticationFailed → userAuthenticationRequired; serverIdentityChanged →
    /// serverCertificateUntrusted; protocolViolation → badServerResponse;
    /// sessionInvalidated, unsupportedConfiguration, httpError, resumeFailed,
    /// storeUnusable, pluginCrashed → unknown. The Porter code travels in the error's
    /// userInfo under `PorterErrorCodeKey`.
    public init(_ code: PorterError.Code) {
        switch code {
        case .unknown: self = .unknown
        case .cancelled: self = .cancelled
        case .badURL: self = .badURL
        case .unsupportedURL, .redirectNotAllowed: self = .unsupportedURL
        case .timedOut: self = .timedOut
        case .cannotFindHost: self = .cannotFindHost
        case .cannotConnectToHost: self = .cannotConnectToHost
        case .networkConnectionLost: self = .networkConnectionLost
        case .badServerResponse, .protocolViolation: self = .badServerResponse
        case .tooManyRedirects: self = .httpTooManyRedirects
        case .userAuthenticationRequired, .authenticationFailed: self = .userAuthenticationRequired
        case .userCancelledAuthentication: self = .userCancelledAuthentication
        case .serverCertificateUntrusted, .serverIdentityChanged: self = .serverCertificateUntrusted
        case .secureConnectionFailed: self = .secureConnectionFailed
        case .clientCertificateRejected: self = .clientCertificateRejected
        case .fileDoesNotExist: self = .fileDoesNotExist
        case .fileIsDirectory: self = .fileIsDirectory
        case .noPermissionsToReadFile: self = .noPermissionsToReadFile
        case .cannotWriteToFile: self = .cannotWriteToFile
        case .cannotCreateFile: self = .cannotCreateFile
        case .cannotDecodeContentData: self = .cannotDecodeContentData
        case .cannotDecodeRawData: self = .cannotDecodeRawData
        case .dataLengthExceedsMaximum: self = .dataLengthExceedsMaximum
        case .requestBodyStreamExhausted: self = .requestBodyStreamExhausted
        case .resourceUnavailable: self = .resourceUnavailable
        case .cannotParseResponse: self = .cannotParseResponse
        case .cannotMoveFile: self = .cannotMoveFile
        case .cannotOpenFile: self = .cannotOpenFile
        case .sessionInvalidated, .unsupportedConfiguration, .httpError, .resumeFailed, .storeUnusable, .pluginCrashed:
            self = .unknown
        }
    }
}

/// The userInfo key under which a bridged URLError carries Porter's own code (an Int).
public let PorterErrorCodeKey = "PorterErrorCode"

extension URLError {
    /// Porter's error as URLError: the mapped code, the failing URL, the message as the
    /// localized description, Porter's code under `PorterErrorCodeKey`.
    public init(_ e: PorterError) {
        var info: [String: Any] = [NSLocalizedDescriptionKey: e.message, PorterErrorCodeKey: e.code.rawValue]
        if let url = e.url {
            info[NSURLErrorFailingURLErrorKey] = url
        }
        self.init(URLError.Code(e.code), userInfo: info)
    }
}
