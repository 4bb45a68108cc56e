import CCurl
import Foundation
import PorterCore
import PorterCurl
import PorterStorage

/// The handler for `ftp:` and `ftps:` on libcurl, through the public contract only.
///
/// - `ftps://` is FTP over *implicit* TLS (port 990 by default), as in curl; explicit
///   TLS (AUTH TLS on an `ftp://` connection, then TLS for the data connections too) is
///   the request property `tlsProperty`: "required" (curl's --ssl-reqd) or "try"
///   (curl's --ssl). Both are verified like https.
/// - Downloads know their size up front (SIZE) and resume with REST. A URL ending in `/`
///   lists the folder in Porter's `DirectoryListing` format (from MLSD; servers without
///   MLSD give their LIST text as `text/plain`).
/// - A request with a body uploads (STOR), creating missing folders.
/// - Login: the URL's user and password, anonymous otherwise; a refused login becomes a
///   challenge (realm "ftp"), and a credential retries with it.
/// - Passive mode (EPSV, then PASV).
public final class FTPHandler: ProtocolHandler, @unchecked Sendable {
    public static var schemes: Set<String> { ["ftp", "ftps"] }
    /// What the registry answers for ftp and ftps: 990 is implicit TLS (explicit TLS is
    /// an ftp:// URL on 21).
    public static func defaultPort(for scheme: String) -> Int? {
        switch scheme { case "ftp": 21; case "ftps": 990; default: nil }
    }
    /// A request property: "required" (AUTH TLS or fail, CURLUSESSL_ALL) or "try"
    /// (CURLUSESSL_TRY) for an `ftp://` URL.
    public static let tlsProperty = "porter.ftp.tls"
    /// The task's life cycle runs on the libcurl loop that carries the transfer.
    public static func executor(for request: Request, context: SessionContext) -> (any TaskExecutor)? {
        CurlLoop.loop(for: context.configuration)
    }

    private var request: Request  // loop thread after init
    private let client: any ProtocolClient
    private let loop: CurlLoop
    private let stager: BodyStager
    private let state = CurlLoadState()

    // Loop thread only:
    private var transfer: CurlTransfer? {  // loop thread; kept in `state` so stopLoading can end it
        get { state.transfer }
        set { state.transfer = newValue }
    }
    private var responded = false
    private var listing = false
    private var listingText = Data()
    private var credential: Credential?
    private var failures = 0

    public init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
        // The task runs on the loop executor(for:context:) named; the same one by its settings.
        self.loop = (client.context.executor as? CurlLoop) ?? CurlLoop.loop(for: client.context.configuration)
        self.stager = BodyStager(client: client, loop: loop)
    }

    private var isStopped: Bool { state.isStopped }

    public func startLoading() { loop.enqueue { [self] in begin() } }

    public func stopLoading() { state.stopLoading(on: loop, stager: stager) }
    public func pauseDelivery() { state.setPaused(true) }
    public func resumeDelivery() { state.resumeDelivery(on: loop) }

    /// The URL libcurl gets: as it is (libcurl's ftps:// is implicit TLS, curl's meaning).
    private var curlURL: String { request.url.absoluteString }

    /// How the control connection uses TLS: ftps:// by its scheme (implicit); ftp:// as
    /// `tlsProperty` asks (explicit), plain otherwise.
    private var tls: CurlOptions.TLS {
        guard request.scheme == "ftp" else { return .byScheme }
        switch request.property(forKey: FTPHandler.tlsProperty) as? String {
        case "required"?: return .required
        case "try"?: return .attempted
        default: return .byScheme
        }
    }

    /// What every handle of this load gets, the listing fallback's too: the shared
    /// options (TLS for ftps and explicit TLS, proxy, overrides, timeouts), the URL and the login.
    private func configure(_ t: CurlTransfer) {
        let config = client.context.configuration
        t.set(CURLOPT_URL, curlURL)
        CurlOptions.apply(to: t, request: request, configuration: config, protocols: request.scheme == "ftps" ? "ftps" : "ftp",
                          tls: tls)
        t.set(CURLOPT_FTP_USE_EPSV, 1)
        if let credential, let user = credential.user, let password = credential.password {
            t.set(CURLOPT_USERNAME, user)
            t.set(CURLOPT_PASSWORD, password)
        }
    }

    private func begin() {
        guard !isStopped else { return }
        guard let t = CurlTransfer.make(on: loop, reportingTo: client, url: request.url) else { return }
        transfer = t
        responded = false
        listingText = Data()
        listing = request.url.absoluteString.hasSuffix("/") && request.body == nil

        t.set(CURLOPT_BUFFERSIZE, 256 * 1024)
        configure(t)
        if listing { t.set(CURLOPT_CUSTOMREQUEST, "MLSD") }
        if let range = request.resumeRange, range.offset > 0, request.body == nil, !listing {
            t.set(CURLOPT_RESUME_FROM_LARGE, offset: range.offset)
        }
        state.startUpload(request.body, on: loop)
        state.limitRate(client.context.configuration.maximumBytesPerSecond)
        if let body = state.body {
            t.set(CURLOPT_UPLOAD, 1)
            t.set(CURLOPT_INFILESIZE_LARGE, offset: body.length ?? -1)
            t.set(CURLOPT_FTP_CREATE_MISSING_DIRS, Int(CURLFTP_CREATE_DIR.rawValue))
        }

        // Strong, as onComplete: the transfer drops its closures when it ends (see HTTPHandler.begin).
        t.onData = { [self] bytes in data(bytes) }
        // Only an upload reads a body and reports its progress.
        if state.body != nil {
            t.onRead = { [state] buffer in state.read(buffer) }
            t.onProgress = { [state, client] _, _, ulTotal, ulNow in state.progress(uploadTotal: ulTotal, uploaded: ulNow, client: client) }
        }
        t.onFlush = { [self] in stager.handOver() }
        t.onComplete = { [self] code in complete(code) }
        t.start()
    }

    /// `atEnd`: the transfer ended before any byte came (an empty file, or nothing left).
    private func respond(length: Int64, atEnd: Bool = false) {
        guard !responded, let t = transfer else { return }
        responded = true
        var response = Response(url: request.url, mimeType: MediaTypes.mimeType(forPath: request.url.path),
                                expectedContentLength: length)
        // FTP has no ETag: the size (SIZE) stands in as the validator for resuming.
        // libcurl reports the length left after REST — except when nothing is left: a file
        // already whole at the offset gets no RETR, and the length reported is its size.
        let reported = t.info(offset: CURLINFO_CONTENT_LENGTH_DOWNLOAD_T)
        var total = reported
        if let offset = request.resumeRange?.offset, offset > 0, reported >= 0 {
            response.resumeOffset = offset
            total = atEnd && reported == offset ? offset : Response.total(reported, plus: offset)
        }
        if total >= 0 { response.validator = "size:\(total)" }
        // The caller's BodyDestination takes the file straight from libcurl's buffer.
        stager.reset(expectedLength: length,
                     destination: request.property(forKey: BodyDestination.property) as? BodyDestination)
        client.didReceive(response, cacheStoragePolicy: .notAllowed)
    }

    private func data(_ bytes: UnsafeRawBufferPointer) -> CurlTransfer.WriteResult {
        guard !isStopped, let t = transfer else { return .abort }
        if listing {
            listingText.append(contentsOf: bytes)
            return .consumed
        }
        if !responded {
            // SIZE has been answered by now: the length is known before the first byte.
            respond(length: t.info(offset: CURLINFO_CONTENT_LENGTH_DOWNLOAD_T))
        }
        if state.wantsPause || !state.admit(bytes.count, on: loop) {
            stager.handOver()
            return .pause
        }
        return stager.stage(bytes, transfer: t) ? .consumed : .abort
    }

    private func complete(_ code: CURLcode) {
        guard !isStopped, let t = transfer else { stager.drop(); return }
        state.closeUpload()
        stager.handOver()
        if code == CURLE_LOGIN_DENIED, failures < 5 {
            challenge(failure: .curl(code, url: request.url, detail: t.errorText))
            return
        }
        if listing, code != CURLE_OK, code != CURLE_COULDNT_CONNECT, t.info(CURLINFO_RESPONSE_CODE) >= 500 {
            // No MLSD: fall back to the server's LIST text.
            fallbackToList()
            return
        }
        if code == CURLE_WRITE_ERROR, var failure = stager.writeError {
            failure.url = request.url
            client.didFail(with: failure)
            return
        }
        guard code == CURLE_OK else {
            client.didFail(with: .curl(code, url: request.url, detail: t.errorText))
            return
        }
        if listing {
            let body = FTPHandler.listing(fromMLSD: listingText).serialized()
            var r = Response(url: request.url, mimeType: DirectoryListing.mimeType, expectedContentLength: Int64(body.count),
                             textEncodingName: "utf-8")
            r.headerFields[.contentType] = DirectoryListing.contentType
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            if !body.isEmpty { client.didLoad(body) }
        } else if !responded {
            respond(length: 0, atEnd: true)  // an empty file, nothing left after REST, or an upload
        }
        client.didFinishLoading()
    }

    private var triedList = false

    private func fallbackToList() {
        guard !triedList else { return }
        triedList = true
        guard let t = CurlTransfer.make(on: loop, reportingTo: client, url: request.url) else { return }
        transfer = t
        listingText = Data()
        configure(t)
        t.onData = { [unowned self] bytes in listingText.append(contentsOf: bytes); return .consumed }
        t.onComplete = { [self] code in
            guard !isStopped else { return }
            guard code == CURLE_OK else { client.didFail(with: .curl(code, url: request.url, detail: t.errorText)); return }
            let r = Response(url: request.url, mimeType: "text/plain", expectedContentLength: Int64(listingText.count),
                             textEncodingName: "utf-8")
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            if !listingText.isEmpty { client.didLoad(listingText) }
            client.didFinishLoading()
        }
        t.start()
    }

    private func challenge(failure: PorterError) {
        let url = request.url
        let space = ProtectionSpace(host: url.host ?? "", port: client.context.configuration.port(of: url) ?? 0, protocol: request.scheme, realm: "ftp",
                                    authenticationMethod: .default)
        var proposed: Credential?
        if credential == nil, let user = url.user, let password = url.password {
            proposed = Credential(user: user, password: password)
        }
        let challenge = AuthenticationChallenge(protectionSpace: space, proposedCredential: proposed,
                                                previousFailureCount: failures, error: failure) { [self] disposition in
            loop.enqueue { [self] in
                guard !isStopped else { return }
                switch disposition {
                case .useCredential(let c) where c.user != nil:
                    credential = c
                    failures += 1
                    begin()
                case .cancelAuthenticationChallenge:
                    break
                default:
                    client.didFail(with: PorterError(.userAuthenticationRequired, "the FTP server refused the login",
                                                     url: url, cause: failure.cause))
                }
            }
        }
        client.didReceive(challenge)
    }

    /// MLSD lines ("type=file;size=5;modify=20261123080000; name") as a DirectoryListing.
    static func listing(fromMLSD data: Data) -> DirectoryListing {
        var entries: [DirectoryListing.Entry] = []
        for raw in String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline) {
            guard let space = raw.firstIndex(of: " ") else { continue }
            let name = String(raw[raw.index(after: space)...])
            var facts: [String: String] = [:]
            for fact in raw[..<space].split(separator: ";") {
                let kv = fact.split(separator: "=", maxSplits: 1)
                if kv.count == 2 { facts[kv[0].lowercased()] = String(kv[1]) }
            }
            let kind: DirectoryListing.Entry.Kind
            switch facts["type"]?.lowercased() {
            case "file": kind = .file
            case "dir": kind = .directory
            case "cdir", "pdir": continue
            case let t? where t.hasPrefix("os.unix=symlink") || t.hasPrefix("os.unix=slink"): kind = .symlink
            default: kind = .other
            }
            var modified: Date?
            if let m = facts["modify"], m.count >= 14 {
                var tmv = tm()
                let digits = Array(m.utf8.prefix(14)).map { Int32($0) - 48 }
                func n(_ a: Int, _ b: Int) -> Int32 { digits[a..<b].reduce(0) { $0 * 10 + $1 } }
                tmv.tm_year = n(0, 4) - 1900; tmv.tm_mon = n(4, 6) - 1; tmv.tm_mday = n(6, 8)
                tmv.tm_hour = n(8, 10); tmv.tm_min = n(10, 12); tmv.tm_sec = n(12, 14)
                modified = Date(timeIntervalSince1970: TimeInterval(timegm(&tmv)))
            }
            entries.append(DirectoryListing.Entry(name: name, kind: kind, size: facts["size"].flatMap { Int64($0) }, modified: modified))
        }
        return DirectoryListing(entries: entries)
    }
}
