import Foundation
import Porter

/// The CLI's exit codes: curl's number for every failure curl has a number for (scripts
/// written for curl test them), Porter's own from 100 up for the rest (curl uses 1-99).
/// The table is in `porter --help` and in CLIReference.md.
struct PorterExit: Equatable, Sendable {
    let rawValue: Int32
    init(rawValue: Int32) { self.rawValue = rawValue }

    static let success = PorterExit(rawValue: 0)
    static let unsupportedProtocol = PorterExit(rawValue: 1)      // CURLE_UNSUPPORTED_PROTOCOL
    static let badCommandLine = PorterExit(rawValue: 2)           // CURLE_FAILED_INIT: curl's exit for a bad option
    static let malformedURL = PorterExit(rawValue: 3)             // CURLE_URL_MALFORMAT
    static let cannotResolveProxy = PorterExit(rawValue: 5)
    static let cannotResolve = PorterExit(rawValue: 6)
    static let cannotConnect = PorterExit(rawValue: 7)
    static let weirdReply = PorterExit(rawValue: 8)               // CURLE_WEIRD_SERVER_REPLY
    static let remoteAccessDenied = PorterExit(rawValue: 9)
    static let partialFile = PorterExit(rawValue: 18)
    static let httpError = PorterExit(rawValue: 22)
    static let writeError = PorterExit(rawValue: 23)
    static let uploadFailed = PorterExit(rawValue: 25)
    static let readError = PorterExit(rawValue: 26)
    static let timedOut = PorterExit(rawValue: 28)
    static let rangeError = PorterExit(rawValue: 33)
    static let tlsConnect = PorterExit(rawValue: 35)
    static let fileCouldNotRead = PorterExit(rawValue: 37)        // file:// that cannot be read
    static let aborted = PorterExit(rawValue: 42)                 // CURLE_ABORTED_BY_CALLBACK
    static let tooManyRedirects = PorterExit(rawValue: 47)
    static let emptyReply = PorterExit(rawValue: 52)
    static let recvError = PorterExit(rawValue: 56)
    static let clientCertificate = PorterExit(rawValue: 58)
    static let peerCertificate = PorterExit(rawValue: 60)
    static let badContentEncoding = PorterExit(rawValue: 61)
    static let fileSizeExceeded = PorterExit(rawValue: 63)
    static let loginDenied = PorterExit(rawValue: 67)
    static let remoteFileNotFound = PorterExit(rawValue: 78)
    // Porter's own, for what curl has no number for.
    static let other = PorterExit(rawValue: 100)
    static let store = PorterExit(rawValue: 101)
    static let pluginCrashed = PorterExit(rawValue: 102)

    /// The exit code for a failed load: libcurl's own code when libcurl failed (the
    /// error's `cause`), otherwise curl's code for the same failure class.
    init(_ error: PorterError) {
        if let cause = error.cause, cause.domain == "curl", cause.code > 0, cause.code < 100,
           error.code != .cancelled, error.code != .cannotDecodeContentData {
            self.init(rawValue: Int32(cause.code))
            return
        }
        let local = error.url?.isFileURL ?? false
        self.init(error.code, local: local)
    }

    /// curl's code for a failure class. `local`: the URL is a file: URL (curl's 37 for a
    /// file that cannot be read, where a remote one is 78 or 9).
    init(_ code: PorterError.Code, local: Bool = false) {
        switch code {
        case .unsupportedURL, .redirectNotAllowed: self = .unsupportedProtocol
        case .badURL: self = .malformedURL
        case .unsupportedConfiguration: self = .badCommandLine
        case .cannotFindHost: self = .cannotResolve
        case .cannotConnectToHost: self = .cannotConnect
        case .networkConnectionLost: self = .recvError
        case .timedOut: self = .timedOut
        case .serverCertificateUntrusted, .serverIdentityChanged: self = .peerCertificate
        case .secureConnectionFailed: self = .tlsConnect
        case .clientCertificateRejected: self = .clientCertificate
        case .userAuthenticationRequired, .userCancelledAuthentication, .authenticationFailed: self = .loginDenied
        case .tooManyRedirects: self = .tooManyRedirects
        case .cancelled: self = .aborted
        case .badServerResponse, .cannotParseResponse, .protocolViolation: self = .weirdReply
        case .cannotDecodeContentData, .cannotDecodeRawData: self = .badContentEncoding
        case .dataLengthExceedsMaximum: self = .fileSizeExceeded
        case .fileDoesNotExist, .fileIsDirectory, .resourceUnavailable: self = local ? .fileCouldNotRead : .remoteFileNotFound
        case .noPermissionsToReadFile: self = local ? .fileCouldNotRead : .remoteAccessDenied
        case .cannotWriteToFile, .cannotCreateFile, .cannotMoveFile, .cannotOpenFile: self = .writeError
        case .requestBodyStreamExhausted: self = .readError
        case .resumeFailed: self = .rangeError
        case .httpError: self = .httpError
        case .storeUnusable: self = .store
        case .pluginCrashed: self = .pluginCrashed
        case .unknown, .sessionInvalidated: self = .other
        }
    }

    /// The table `porter --help` and CLIReference.md show.
    static let table = """
        Exit codes (curl's numbers): 0 success, 1 unsupported protocol (or a refused \
        redirect), 2 bad command line, 3 malformed URL, 5 cannot resolve the proxy, 6 cannot \
        resolve the host, 7 cannot connect, 8 weird server reply, 9 access denied (ftp, sftp), \
        18 partial file, 22 HTTP error with -f, 23 cannot write output, 25 upload refused, \
        26 cannot read input (-T FILE, -K FILE, -d @FILE), 28 timed out, 33 range/resume \
        refused, 35 TLS handshake, 37 cannot read a file: URL, 42 cancelled, 47 too many \
        redirects, 52 empty reply, 56 connection lost while receiving, 58 client certificate, \
        60 peer certificate or host key not trusted, 61 bad content encoding, 63 maximum size \
        exceeded, 67 login denied, 78 remote file not found; any other libcurl failure exits \
        with libcurl's own code. Porter's own: 100 other failure, 101 a persistent store \
        (cookies, cache, credentials) is damaged or cannot be opened, 102 a plugin's worker \
        crashed (or the plugin was disabled).
        """
}
