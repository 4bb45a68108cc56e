import CCurl
import Foundation
import PorterCore

extension PorterError {
    /// The Porter error for a libcurl result, with curl's code, its text and the
    /// transfer's detail message (CURLOPT_ERRORBUFFER) as the cause.
    public static func curl(_ code: CURLcode, url: URL?, detail: String? = nil) -> PorterError {
        let text = String(cString: curl_easy_strerror(code))
        var mapped: Code
        switch code {
        case CURLE_UNSUPPORTED_PROTOCOL: mapped = .unsupportedURL
        case CURLE_URL_MALFORMAT: mapped = .badURL
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY: mapped = .cannotFindHost
        case CURLE_COULDNT_CONNECT: mapped = .cannotConnectToHost
        case CURLE_OPERATION_TIMEDOUT: mapped = .timedOut
        case CURLE_PEER_FAILED_VERIFICATION: mapped = .serverCertificateUntrusted
        case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_CIPHER,
             CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_SHUTDOWN_FAILED:
            mapped = .secureConnectionFailed
        case CURLE_SSL_CERTPROBLEM, CURLE_SSL_CLIENTCERT: mapped = .clientCertificateRejected
        case CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_PARTIAL_FILE, CURLE_GOT_NOTHING, CURLE_HTTP2,
             CURLE_HTTP2_STREAM:
            mapped = .networkConnectionLost
        case CURLE_WEIRD_SERVER_REPLY, CURLE_HTTP_RETURNED_ERROR: mapped = .badServerResponse
        case CURLE_BAD_CONTENT_ENCODING: mapped = .cannotDecodeContentData
        case CURLE_TOO_MANY_REDIRECTS: mapped = .tooManyRedirects
        case CURLE_LOGIN_DENIED, CURLE_AUTH_ERROR: mapped = .userAuthenticationRequired
        case CURLE_REMOTE_FILE_NOT_FOUND: mapped = .fileDoesNotExist
        case CURLE_REMOTE_ACCESS_DENIED: mapped = .noPermissionsToReadFile
        case CURLE_FILESIZE_EXCEEDED: mapped = .dataLengthExceedsMaximum
        case CURLE_ABORTED_BY_CALLBACK: mapped = .cancelled
        case CURLE_READ_ERROR, CURLE_SEND_FAIL_REWIND: mapped = .requestBodyStreamExhausted
        case CURLE_WRITE_ERROR: mapped = .cannotWriteToFile
        case CURLE_RANGE_ERROR, CURLE_BAD_DOWNLOAD_RESUME: mapped = .resumeFailed
        case CURLE_UPLOAD_FAILED: mapped = .networkConnectionLost
        case CURLE_OUT_OF_MEMORY: mapped = .unknown   // "Out of memory": not "not found"
        default: mapped = .unknown
        }
        // libcurl says "unsupported protocol" for a reply that is not HTTP at all (HTTP/0.9):
        // that is the server's fault, not the URL's.
        // So is "Unsupported HTTP version in response" (a bad status line).
        if code == CURLE_UNSUPPORTED_PROTOCOL, let detail, detail.contains("HTTP/0.9") || detail.contains("HTTP version") {
            mapped = .badServerResponse
        }
        // A response head over libcurl's 300 KiB in all (CVE-2023-38039's fix, in Debian's
        // 7.88.1 too) comes back as CURLE_RECV_ERROR "Too large response headers: N > 307200":
        // the server's fault, not a lost connection to retry. (One field over 100 KiB is
        // CURLE_OUT_OF_MEMORY, which the HTTP handler maps while it waits for the head.)
        if code == CURLE_RECV_ERROR, let detail, detail.contains("Too large response headers") {
            mapped = .badServerResponse
        }

        var message = text
        if let detail, !detail.isEmpty, detail != text { message += ": " + detail }
        return PorterError(mapped, message, url: url,
                           cause: Cause(domain: "curl", code: Int(code.rawValue), message: detail?.isEmpty == false ? detail! : text))
    }
}
