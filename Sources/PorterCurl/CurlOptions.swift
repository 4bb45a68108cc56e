import CCurl
import Foundation
import PorterCore

/// The one place a libcurl handle gets the options every Porter transfer shares: the
/// protocols it may speak, proxy, address overrides, connect timeout, and the whole TLS
/// configuration (verification, CA, pin, client certificate, versions). Every handle —
/// http, https, ftp, ftps, the server-trust probe, the listing fallback — is built here
/// first, so no protocol path can miss an option again (an ftps listing once logged in
/// without TLS because its fallback set none of them). After curl's `lib/setopt.c`:
/// options are decided once and every protocol reads the same ones.
public enum CurlOptions {
    /// How a handle uses TLS.
    public enum TLS: Sendable {
        /// As the URL's scheme says (https: TLS; http, ftp: none).
        case byScheme
        /// Explicit TLS on a plain-text protocol, required (ftp:// with AUTH TLS,
        /// CURLUSESSL_ALL: curl's --ssl-reqd).
        case required
        /// Explicit TLS where the server offers it, plain text otherwise (CURLUSESSL_TRY:
        /// curl's --ssl).
        case attempted
    }

    /// Request properties (`Request.setProperty`) every libcurl-based handler honours:
    /// - `debugProperty`: a `@Sendable (Int, Data) -> Void` that gets what libcurl sends
    ///   and receives (CURLOPT_DEBUGFUNCTION; the Int is curl_infotype: 0 text, 1 header
    ///   in, 2 header out, 3 data in, 4 data out) — curl's -v and --trace. The request
    ///   head comes exactly as sent, credentials included: mask before showing it.
    /// - `ipResolveProperty`: 4 or 6, curl's -4 / -6 (CURLOPT_IPRESOLVE).
    /// - `connectToProperty`: `[String]` of "HOST1:PORT1:HOST2:PORT2", curl's --connect-to.
    public static let debugProperty = "porter.curl.debug"
    public static let ipResolveProperty = "porter.curl.ipResolve"
    public static let connectToProperty = "porter.curl.connectTo"

    /// Applies the shared options to `t` for a load of `request` under `config`.
    /// - `protocols`: libcurl's allowed protocols ("http,https", "ftp").
    /// - `pinnedKey`: a key the delegate trusted for this load (replaces verification).
    /// - `verify`: false only for the server-trust probe, which fetches a chain to show.
    public static func apply(to t: CurlTransfer, request: Request, configuration config: SessionConfiguration,
                             protocols: String, tls: TLS = .byScheme, pinnedKey: String? = nil, verify: Bool = true) {
        t.set(CURLOPT_PROTOCOLS_STR, protocols)
        // "" also stops libcurl reading the proxy environment variables itself.
        t.set(CURLOPT_PROXY, config.proxies.proxy(for: request.url)?.absoluteString ?? "")
        if !config.hostOverrides.isEmpty { t.set(CURLOPT_RESOLVE, list: config.hostOverrides.map(\.description)) }
        let idle = request.timeoutInterval > 0 ? request.timeoutInterval : config.timeoutIntervalForRequest
        let connect = config.connectionTimeout ?? idle
        t.set(CURLOPT_CONNECTTIMEOUT_MS, Int(min(max(connect, 0.001), 3600) * 1000))
        if let rate = config.maximumBytesPerSecond, rate > 0 {
            t.set(CURLOPT_MAX_RECV_SPEED_LARGE, offset: rate)
            // libcurl checks the rate between batches of up to a hundred reads: with large
            // reads on a fast link a whole body arrives between two checks (4 MB at
            // "1 MB/s" in 0.1 s). Reads of at most 16 KiB keep the limit.
            t.set(CURLOPT_BUFFERSIZE, Int(min(16 * 1024, max(1024, rate / 16))))
        }

        switch tls {
        case .required: t.set(CURLOPT_USE_SSL, Int(CURLUSESSL_ALL.rawValue))
        case .attempted: t.set(CURLOPT_USE_SSL, Int(CURLUSESSL_TRY.rawValue))
        case .byScheme: break
        }
        switch request.property(forKey: ipResolveProperty) as? Int {
        case 4?: t.set(CURLOPT_IPRESOLVE, Int(CURL_IPRESOLVE_V4))
        case 6?: t.set(CURLOPT_IPRESOLVE, Int(CURL_IPRESOLVE_V6))
        default: break
        }
        if let connectTo = request.property(forKey: connectToProperty) as? [String], !connectTo.isEmpty {
            t.set(CURLOPT_CONNECT_TO, list: connectTo)
        }
        // Priority: the HTTP/2 stream weight; and, for a load that uses a connection
        // alone (not one that may be multiplexed: https with HTTP/2 on), its place in
        // the queue of loads waiting for a connection to its host.
        if request.priority != 0.5 {
            let weight = streamWeight(forPriority: request.priority)
            if t.set(CURLOPT_STREAM_WEIGHT, weight) == CURLE_OK { t.streamWeight = weight }
        }
        t.priority = request.priority
        if !(config.http2Enabled && request.scheme == "https"), let key = hostKey(request.url, scheme: request.scheme) {
            t.queueHost = key
        }
        if let sink = request.property(forKey: debugProperty) as? @Sendable (Int, Data) -> Void {
            t.debug { kind, bytes in sink(Int(kind.rawValue), Data(bytes)) }
        }
        // Verified unless explicitly disabled; a server the delegate trusted by hand is
        // accepted by its exact public key only.
        let verifies = verify && !config.tlsVerificationDisabled && pinnedKey == nil
        t.set(CURLOPT_SSL_VERIFYPEER, verifies ? 1 : 0)
        t.set(CURLOPT_SSL_VERIFYHOST, verifies ? 2 : 0)
        if let ca = config.caCertificateFile { t.set(CURLOPT_CAINFO, ca) }
        if verify, let pin = pinnedKey ?? config.pinnedPublicKey { t.set(CURLOPT_PINNEDPUBLICKEY, pin) }
        if let cert = config.clientCertificate {
            t.set(CURLOPT_SSLCERT, cert.certificatePath)
            t.set(CURLOPT_SSLKEY, cert.keyPath)
        }
        var sslVersion = Int(CURL_SSLVERSION_DEFAULT)
        switch config.tlsMinimumVersion {
        case .tls1_0?: sslVersion = Int(CURL_SSLVERSION_TLSv1_0)
        case .tls1_1?: sslVersion = Int(CURL_SSLVERSION_TLSv1_1)
        case .tls1_2?: sslVersion = Int(CURL_SSLVERSION_TLSv1_2)
        case .tls1_3?: sslVersion = Int(CURL_SSLVERSION_TLSv1_3)
        case nil: break
        }
        switch config.tlsMaximumVersion {
        case .tls1_0?: sslVersion |= Int(CURL_SSLVERSION_MAX_TLSv1_0)
        case .tls1_1?: sslVersion |= Int(CURL_SSLVERSION_MAX_TLSv1_1)
        case .tls1_2?: sslVersion |= Int(CURL_SSLVERSION_MAX_TLSv1_2)
        case .tls1_3?: sslVersion |= Int(CURL_SSLVERSION_MAX_TLSv1_3)
        case nil: break
        }
        t.set(CURLOPT_SSLVERSION, sslVersion)
    }

    /// "scheme://host:port" as the URL writes its authority (without user information),
    /// nil without one: the key of the loop's per-host queue. Read from the URL's text:
    /// `URL.host` and `URL.port` each parse the authority again (~1,600 instructions a
    /// load, with the interpolation ~3,000, in W2's profile).
    static func hostKey(_ url: URL, scheme: String) -> String? {
        let text = url.absoluteString
        let bytes = text.utf8
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        var i = bytes.index(after: colon)
        for _ in 0..<2 {
            guard i != bytes.endIndex, bytes[i] == UInt8(ascii: "/") else { return nil }
            i = bytes.index(after: i)
        }
        var start = i
        var end = i
        while end != bytes.endIndex {
            let b = bytes[end]
            if b == UInt8(ascii: "/") || b == UInt8(ascii: "?") || b == UInt8(ascii: "#") { break }
            if b == UInt8(ascii: "@") { start = bytes.index(after: end) }
            end = bytes.index(after: end)
        }
        guard start != end else { return nil }
        return scheme + "://" + text[start..<end]
    }

    /// A task's priority (0…1) as an HTTP/2 stream weight (RFC 9113 §5.3.2, 1…256): the
    /// default 0.5 is the protocol's default weight 16; 0 is 1 and 1 is 256, linear on
    /// each side of the default.
    public static func streamWeight(forPriority priority: Float) -> Int {
        let p = Double(min(1, max(0, priority.isNaN ? 0.5 : priority)))
        let weight = p <= 0.5 ? 1 + p / 0.5 * 15 : 16 + (p - 0.5) / 0.5 * 240
        return Int(weight.rounded())
    }

    /// The alt-svc cache of an http(s) load (RFC 7838): libcurl reads `config.altSvcCache`'s
    /// file now, uses an alternative it lists for an https origin, and learns from the
    /// Alt-Svc fields of https responses. The file is read-only for this handle until
    /// `altSvcFieldArrived` (most responses carry none: no rewrite of the file per load).
    public static func applyAltSvc(to t: CurlTransfer, configuration config: SessionConfiguration) {
        guard let cache = config.altSvcCache else { return }
        t.set(CURLOPT_ALTSVC_CTRL, altSvcVersions | Int(porter_altsvc_readonlyfile))
        t.set(CURLOPT_ALTSVC, cache.path)
        t.closesHandle = true
    }

    /// A response brought an Alt-Svc field: libcurl writes its cache file back when the
    /// handle closes.
    public static func altSvcFieldArrived(_ t: CurlTransfer, configuration config: SessionConfiguration) {
        guard config.altSvcCache != nil else { return }
        t.set(CURLOPT_ALTSVC_CTRL, altSvcVersions)
    }

    /// Every HTTP version an alternative may offer (h3 is ignored by a libcurl without it).
    private static var altSvcVersions: Int { Int(porter_altsvc_h1 | porter_altsvc_h2 | porter_altsvc_h3) }
}
