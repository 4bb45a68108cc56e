import Foundation

/// The one error type Porter reports. `code` is stable across releases (its raw
/// value is part of the API, in the spirit of `URLError`); `url` is the URL that
/// failed; `cause` carries the underlying library's own code and text (errno,
/// libcurl, libssh2, a plugin's message).
public struct PorterError: Error, Sendable, CustomStringConvertible {
    /// Stable error codes. Raw values never change meaning; new codes are only added.
    public enum Code: Int, Sendable, CaseIterable, CustomStringConvertible {
        case unknown = 1
        case cancelled = 2
        case badURL = 3
        case unsupportedURL = 4
        case timedOut = 5
        case cannotFindHost = 6
        case cannotConnectToHost = 7
        case networkConnectionLost = 8
        case badServerResponse = 9
        case tooManyRedirects = 10
        case redirectNotAllowed = 11
        case userAuthenticationRequired = 12
        case userCancelledAuthentication = 13
        case serverCertificateUntrusted = 14
        case secureConnectionFailed = 15
        case clientCertificateRejected = 16
        case fileDoesNotExist = 17
        case fileIsDirectory = 18
        case noPermissionsToReadFile = 19
        case cannotWriteToFile = 20
        case cannotCreateFile = 21
        case cannotDecodeContentData = 22
        case cannotDecodeRawData = 23
        case dataLengthExceedsMaximum = 24
        case requestBodyStreamExhausted = 25
        case resourceUnavailable = 26
        case cannotParseResponse = 27
        case sessionInvalidated = 28
        case unsupportedConfiguration = 29
        case httpError = 30
        case cannotMoveFile = 31
        case cannotOpenFile = 32
        case resumeFailed = 33
        case protocolViolation = 34
        /// Credentials were offered and the server refused them (ssh, ftp logins).
        case authenticationFailed = 35
        /// The server's identity changed since it was last trusted (an SSH host key).
        case serverIdentityChanged = 36
        /// A persistent store (cookies, cache, credentials) is damaged or cannot be opened.
        case storeUnusable = 37
        /// A plugin's worker process died (a crash, an abort, a limit, or a kill after it
        /// did not honour a stop in time) while the load was in flight, or the plugin was
        /// disabled after crashing repeatedly. The message names the plugin and the signal.
        case pluginCrashed = 38

        public var description: String {
            switch self {
            case .unknown: return "unknown"
            case .cancelled: return "cancelled"
            case .badURL: return "badURL"
            case .unsupportedURL: return "unsupportedURL"
            case .timedOut: return "timedOut"
            case .cannotFindHost: return "cannotFindHost"
            case .cannotConnectToHost: return "cannotConnectToHost"
            case .networkConnectionLost: return "networkConnectionLost"
            case .badServerResponse: return "badServerResponse"
            case .tooManyRedirects: return "tooManyRedirects"
            case .redirectNotAllowed: return "redirectNotAllowed"
            case .userAuthenticationRequired: return "userAuthenticationRequired"
            case .userCancelledAuthentication: return "userCancelledAuthentication"
            case .serverCertificateUntrusted: return "serverCertificateUntrusted"
            case .secureConnectionFailed: return "secureConnectionFailed"
            case .clientCertificateRejected: return "clientCertificateRejected"
            case .fileDoesNotExist: return "fileDoesNotExist"
            case .fileIsDirectory: return "fileIsDirectory"
            case .noPermissionsToReadFile: return "noPermissionsToReadFile"
            case .cannotWriteToFile: return "cannotWriteToFile"
            case .cannotCreateFile: return "cannotCreateFile"
            case .cannotDecodeContentData: return "cannotDecodeContentData"
            case .cannotDecodeRawData: return "cannotDecodeRawData"
            case .dataLengthExceedsMaximum: return "dataLengthExceedsMaximum"
            case .requestBodyStreamExhausted: return "requestBodyStreamExhausted"
            case .resourceUnavailable: return "resourceUnavailable"
            case .cannotParseResponse: return "cannotParseResponse"
            case .sessionInvalidated: return "sessionInvalidated"
            case .unsupportedConfiguration: return "unsupportedConfiguration"
            case .httpError: return "httpError"
            case .cannotMoveFile: return "cannotMoveFile"
            case .cannotOpenFile: return "cannotOpenFile"
            case .resumeFailed: return "resumeFailed"
            case .protocolViolation: return "protocolViolation"
            case .authenticationFailed: return "authenticationFailed"
            case .serverIdentityChanged: return "serverIdentityChanged"
            case .storeUnusable: return "storeUnusable"
            case .pluginCrashed: return "pluginCrashed"
            }
        }
    }

    /// The code and text of the library or system call underneath.
    public struct Cause: Sendable, Equatable, CustomStringConvertible {
        /// Where the code comes from: "errno", "curl", "libssh2", "plugin", "data", ...
        public var domain: String
        public var code: Int
        public var message: String
        public init(domain: String, code: Int, message: String) {
            self.domain = domain
            self.code = code
            self.message = message
        }
        /// The cause for a C library call that set `errno`.
        public static func errno(_ value: Int32) -> Cause {
            Cause(domain: "errno", code: Int(value), message: String(cString: strerror(value)))
        }
        public var description: String { "\(domain) \(code): \(message)" }
    }

    public var code: Code
    public var message: String
    public var url: URL?
    public var cause: Cause?
    /// Present on a failed or cancelled download that can be resumed.
    public var resumeData: Data?

    public init(_ code: Code, _ message: String, url: URL? = nil, cause: Cause? = nil, resumeData: Data? = nil) {
        self.code = code
        self.message = message
        self.url = url
        self.cause = cause
        self.resumeData = resumeData
    }

    public var description: String {
        var text = "\(code) (\(code.rawValue)): \(message)"
        if let url { text += " [\(url.absoluteString)]" }
        if let cause { text += " (\(cause))" }
        return text
    }

    /// Maps an errno from a file operation to the closest Porter code.
    public static func fromErrno(_ value: Int32, url: URL?, doing what: String) -> PorterError {
        let code: Code
        switch value {
        case ENOENT, ENOTDIR: code = .fileDoesNotExist
        case EACCES, EPERM: code = .noPermissionsToReadFile
        case EISDIR: code = .fileIsDirectory
        case ENOSPC, EDQUOT, EROFS, EFBIG: code = .cannotWriteToFile
        default: code = .resourceUnavailable
        }
        return PorterError(code, what, url: url, cause: .errno(value))
    }
}
