import Porter

/// The CLI's exit codes: one per failure class, documented in the README.
enum PorterExit: Int32 {
    case success = 0
    case other = 1
    case unsupportedURL = 2
    case notFound = 3
    case permission = 4
    case cannotConnect = 5
    case timedOut = 6
    case tls = 7
    case authentication = 8
    case redirects = 9
    case cancelled = 10
    case badResponse = 11
    case writeError = 12
    case store = 13
    case pluginCrashed = 14
    case httpError = 22

    init(_ code: PorterError.Code) {
        switch code {
        case .unsupportedURL, .badURL, .unsupportedConfiguration: self = .unsupportedURL
        case .fileDoesNotExist, .fileIsDirectory, .resourceUnavailable: self = .notFound
        case .noPermissionsToReadFile: self = .permission
        case .cannotFindHost, .cannotConnectToHost, .networkConnectionLost: self = .cannotConnect
        case .timedOut: self = .timedOut
        case .serverCertificateUntrusted, .secureConnectionFailed, .clientCertificateRejected, .serverIdentityChanged:
            self = .tls
        case .userAuthenticationRequired, .userCancelledAuthentication, .authenticationFailed: self = .authentication
        case .tooManyRedirects, .redirectNotAllowed: self = .redirects
        case .cancelled: self = .cancelled
        case .badServerResponse, .cannotParseResponse, .cannotDecodeContentData, .cannotDecodeRawData,
             .protocolViolation, .dataLengthExceedsMaximum:
            self = .badResponse
        case .cannotWriteToFile, .cannotCreateFile, .cannotMoveFile, .cannotOpenFile: self = .writeError
        case .httpError: self = .httpError
        case .storeUnusable: self = .store
        case .pluginCrashed: self = .pluginCrashed
        case .unknown, .requestBodyStreamExhausted, .sessionInvalidated, .resumeFailed: self = .other
        }
    }
}
