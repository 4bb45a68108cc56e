import ArgumentParser
import Foundation
import Logging
import Porter

/// One URL's transfer as the CLI sees it.
final class Transfer: @unchecked Sendable {
    let urlText: String
    let output: String?
    let start = DispatchTime.now()
    var response: Response?
    var bytes: Int64 = 0
    var expected: Int64 = -1
    var error: PorterError?
    var httpFailed = false
    var writeFailed = false
    var body = Data()
    var bar: ProgressBar?
    /// Called once when the transfer has ended (frees its slot).
    var onDone: @Sendable () -> Void = {}
    init(urlText: String, output: String?) {
        self.urlText = urlText
        self.output = output
    }
}

/// Runs the transfers of one `porter` invocation. Delegate calls arrive on the
/// session's serial queue, so the per-task state needs no further locking.
final class Runner: DataDelegate, DownloadDelegate, @unchecked Sendable {
    let options: Fetch
    private let lock = NSLock()
    private var transfers: [ObjectIdentifier: Transfer] = [:]
    private var sessions: [String: Session] = [:]
    private let credential: Credential?
    /// `-n` / `--netrc-file`: logins by host name.
    private var netrc: Netrc?
    private let stderrIsTTY = isatty(2) == 1
    private let buffered: Bool
    private var logger: Logger

    init(options: Fetch) throws {
        self.options = options
        if let u = options.user, let colon = u.firstIndex(of: ":") {
            credential = Credential(user: String(u[..<colon]), password: String(u[u.index(after: colon)...]))
        } else {
            credential = nil
        }
        buffered = options.concurrency > 1
        if options.verbose {
            var l = Logger(label: "porter") { StreamLogHandler.standardError(label: $0) }
            l.logLevel = .debug
            logger = l
        } else {
            logger = Logger(label: "porter") { _ in SwiftLogNoOpLogHandler() }
        }
        signal(SIGPIPE, SIG_IGN)
        if options.netrc || options.netrcFile != nil {
            let path = options.netrcFile ?? ((ProcessInfo.processInfo.environment["HOME"] ?? NSHomeDirectory()) + "/.netrc")
            do {
                netrc = try Netrc(contentsOf: path)
            } catch let e as PorterError {
                note("porter: \(e.message)")
                throw ExitCode(PorterExit(e.code).rawValue)
            }
        }
        if options.cookieStore {
            do {
                cookieStore = try PersistentCookieStore(path: PersistentCookieStore.defaultPath())
            } catch let e as PorterError {
                note("porter: \(e.message)")
                throw ExitCode(PorterExit(e.code).rawValue)
            }
        } else {
            cookieStore = MemoryCookieStore()
        }
        if let c = options.cookie {
            if c.contains("=") {
                literalCookie = c
            } else {
                guard let text = try? String(contentsOfFile: c, encoding: .utf8) else {
                    note("porter: cannot read the cookie file \(c)")
                    throw ExitCode(PorterExit.notFound.rawValue)
                }
                let (cookies, skipped) = NetscapeCookieFile.parse(text)
                for cookie in cookies { cookieStore.setCookie(cookie) }
                if skipped > 0, options.verbose { note("* \(c): \(skipped) malformed line(s) skipped") }
            }
        }
    }

    /// One store for every session of this run: -b fills it, -c writes it out;
    /// `--cookie-store` makes it the persistent default store.
    let cookieStore: any CookieStore
    private var literalCookie: String?

    /// `-c FILE`: every cookie of the run, written atomically, readable by the owner only.
    func writeCookieJar() -> Bool {
        guard let path = options.cookieJar else { return true }
        let text = NetscapeCookieFile.serialize(cookieStore.allCookies)
        let dir = (path as NSString).deletingLastPathComponent
        let temp = (dir.isEmpty ? "." : dir) + "/.porter-cookies-\(UUID().uuidString)"
        guard FileManager.default.createFile(atPath: temp, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]),
              rename(temp, path) == 0 else {
            unlink(temp)
            note("porter: cannot write the cookie jar \(path)")
            return false
        }
        return true
    }

    private func session(downloadDirectory: String?) -> Session {
        lock.withLock {
            let key = downloadDirectory ?? ""
            if let s = sessions[key] { return s }
            var config = SessionConfiguration.ephemeral
            config.logger = logger
            config.downloadDirectory = downloadDirectory
            if let t = options.maxTime { config.timeoutIntervalForResource = t; config.timeoutIntervalForRequest = t }
            if let r = options.maxRedirs { config.maximumRedirects = r }
            // The CLI hands each chunk straight to stdout or a file: 1 MiB in flight keeps
            // the pipe full and memory low.
            config.receiveBufferLimit = 1 << 20
            config.caCertificateFile = options.cacert
            config.tlsVerificationDisabled = options.insecure
            config.pinnedPublicKey = options.pinnedpubkey
            if options.http11 { config.http2Enabled = false }
            config.cookieStore = cookieStore
            config.responseCache = options.cache ? HTTPCache.shared : nil
            config.hostOverrides = options.resolve.compactMap(HostOverride.init(parsing:))
            // --concurrency N means N transfers at once, to one host too (as curl --parallel).
            config.maxConnectionsPerHost = max(config.maxConnectionsPerHost, options.concurrency)
            if let cert = options.cert, let key = options.key { config.clientCertificate = (cert, key) }
            if let p = options.proxy, let url = URL(string: p.contains("://") ? p : "http://" + p) {
                config.proxies = ProxyConfiguration(httpProxy: url, httpsProxy: url, allProxy: url)
            }
            let s = Session(configuration: config, delegate: self)
            sessions[key] = s
            return s
        }
    }

    private func transfer(for task: SessionTask) -> Transfer? {
        lock.withLock { transfers[ObjectIdentifier(task)] }
    }

    /// Runs every URL; returns the exit code of the last failure (or success).
    func run(_ urls: [String]) -> PorterExit {
        var result = PorterExit.success
        let interrupt = installInterruptHandler()
        defer { interrupt.cancel() }
        // The first `concurrency` transfers start here; after that each completion starts
        // the next one from the delivery queue it completes on, so no thread wakes up
        // just to hand over a URL (a context switch per request otherwise).
        let started = Locked([Transfer]())
        let progress = Locked((next: 0, active: 0))
        let allDone = DispatchSemaphore(value: 0)
        let count = urls.count
        /// One transfer fewer in flight; true when that was the last of all.
        @Sendable func retire() -> Bool {
            progress.withLock { p in
                p.active -= 1
                return p.active == 0 && p.next >= count
            }
        }
        @Sendable func launchNext() {
            while true {
                let index: Int? = progress.withLock { p in
                    guard p.next < count else { return nil }
                    p.next += 1
                    p.active += 1
                    return p.next - 1
                }
                guard let i = index else { return }
                let output = i < options.output.count ? options.output[i] : nil
                let transfer = Transfer(urlText: urls[i], output: output)
                transfer.onDone = { if retire() { allDone.signal() } else { launchNext() } }
                started.withLock { $0.append(transfer) }
                guard let failure = start(transfer) else { return }
                // It failed before it started: record it and try the next URL here
                // (a loop, not a call back into launchNext, however many fail in a row).
                transfer.error = failure
                transfer.onDone = {}
                finishTransfer(transfer)
                if retire() { allDone.signal(); return }
            }
        }
        if count == 0 { return result }
        for _ in 0..<max(1, options.concurrency) { launchNext() }
        allDone.wait()
        for t in started.current {
            if t.writeFailed { result = .writeError } else if let e = t.error {
                result = t.httpFailed ? .httpError : PorterExit(e.code)
            } else if t.httpFailed {
                result = .httpError
            }
        }
        return result
    }

    private func installInterruptHandler() -> DispatchSourceSignal {
        signal(SIGINT, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler { [weak self] in
            guard let self else { return }
            let all = self.lock.withLock { Array(self.sessions.values) }
            for s in all { for t in s.allTasks { t.cancel() } }
        }
        source.resume()
        return source
    }

    /// Makes and starts the task; returns an error when it cannot even be made.
    private func start(_ t: Transfer) -> PorterError? {
        guard let url = URL(string: t.urlText) else {
            return PorterError(.badURL, "not a valid URL: \(t.urlText)")
        }
        var request = Request(url: url)
        if options.head { request.method = "HEAD" }
        if let literalCookie { _ = request.setValue(literalCookie, forHeader: "Cookie") }
        for h in options.header {
            let colon = h.firstIndex(of: ":")!
            let name = String(h[..<colon]).trimmingCharacters(in: .whitespaces)
            let value = String(h[h.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
            if !request.setValue(value.isEmpty ? nil : value, forHeader: name) {
                return PorterError(.badURL, "not a valid header name: \(name)")
            }
        }
        do {
            if let body = try requestBody() {
                request.body = .data(body)
                request.method = "POST"
                if request.value(forHeader: "Content-Type") == nil, !options.data.isEmpty {
                    request.setValue("application/x-www-form-urlencoded", forHeader: "Content-Type")
                }
            }
        } catch let e as PorterError {
            return e
        } catch {
            return PorterError(.unknown, "\(error)")
        }
        if let m = options.request { request.method = m }

        let dir = t.output.map { (($0 as NSString).deletingLastPathComponent as NSString).isEqual(to: "") ? "." : ($0 as NSString).deletingLastPathComponent }
        let session = session(downloadDirectory: dir)
        let task: SessionTask
        if let file = options.uploadFile {
            if url.absoluteString.hasSuffix("/") {
                request.url = url.appendingPathComponent((file as NSString).lastPathComponent)
            }
            task = session.uploadTask(with: request, fromFile: URL(fileURLWithPath: file))
        } else if let output = t.output {
            task = continuedDownload(session, request, into: output, directory: dir ?? ".") ?? session.downloadTask(with: request)
            if stderrIsTTY && !options.silent { t.bar = ProgressBar() }
        } else {
            task = session.dataTask(with: request)
        }
        lock.withLock { transfers[ObjectIdentifier(task)] = t }
        if options.verbose { note("> \(request.method) \(request.url.absoluteString)") }
        task.resume()
        return nil
    }

    /// `-C -`: continue into a copy of the existing output (the output itself is only ever
    /// replaced whole, by rename); a server that cannot resume sends it all again.
    private func continuedDownload(_ session: Session, _ request: Request, into output: String, directory: String) -> DownloadTask? {
        guard options.continueAt == "-", let attrs = try? FileManager.default.attributesOfItem(atPath: output),
              let size = (attrs[.size] as? NSNumber)?.int64Value, size > 0 else { return nil }
        let partial = directory + "/.porter-continue-\(UUID().uuidString)"
        guard (try? FileManager.default.copyItem(atPath: output, toPath: partial)) != nil else { return nil }
        let resume = ResumeData(url: request.url, method: request.method,
                                headers: request.headerFields.map { [$0.name.rawName, $0.value] },
                                validator: nil, bytesReceived: size, expectedTotalBytes: -1, partialFilePath: partial)
        if options.verbose { note("* continuing \(output) from byte \(size)") }
        return session.downloadTask(withResumeData: resume.encoded())
    }

    private func requestBody() throws -> Data? {
        func load(_ spec: String) throws -> Data {
            guard spec.hasPrefix("@") else { return Data(spec.utf8) }
            let path = String(spec.dropFirst())
            if path == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
            guard let d = FileManager.default.contents(atPath: path) else {
                throw PorterError(.fileDoesNotExist, "cannot read \(path)")
            }
            return d
        }
        if let raw = options.dataBinary { return try load(raw) }
        guard !options.data.isEmpty else { return nil }
        var out = Data()
        for (i, d) in options.data.enumerated() {
            if i > 0 { out.append(UInt8(ascii: "&")) }
            var chunk = try load(d)
            if d.hasPrefix("@") { chunk.removeAll { $0 == 0x0A || $0 == 0x0D } }
            out.append(chunk)
        }
        return out
    }

    private func finishTransfer(_ t: Transfer) {
        if let bar = t.bar {
            if t.error == nil { bar.update(t.bytes, of: t.expected, force: true) }
            bar.finish()
        }
        if let e = t.error, !options.silent, !t.httpFailed {
            note("porter: \(e.message) (\(e.code))")
            let refused = Porter.pluginVerdicts.filter { $0.diagnostic != nil }.count
            if e.code == .unsupportedURL, refused > 0 {
                note("porter: \(refused) plugin(s) were refused at start-up; 'porter plugins' says why")
            }
        }
        if t.httpFailed, !options.silent, let s = t.response?.statusCode { note("porter: the server answered \(s)") }
        if buffered, !t.body.isEmpty, t.error == nil { if !writeAll(1, t.body) { t.writeFailed = true } }
        if options.writeOut == "json" {
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - t.start.uptimeNanoseconds) / 1e9
            _ = writeAll(1, writeOutJSON(url: t.urlText, response: t.response, bytes: t.bytes, elapsed: elapsed, error: t.error))
        }
    }

    // MARK: - delegate

    private func noteResponse(_ t: Transfer, _ response: Response) -> Bool {
        t.response = response
        if options.verbose { note("< \(response)") }
        if options.include || options.head {
            if !writeAll(1, responseHead(response)) { t.writeFailed = true; return false }
        }
        if options.fail, let s = response.statusCode, s >= 400 {
            t.httpFailed = true
            return false
        }
        return true
    }

    func dataTask(_ task: DataTask, didReceive response: Response,
                  completion: @escaping @Sendable (ResponseDisposition) -> Void) {
        guard let t = transfer(for: task) else { completion(.allow); return }
        completion(noteResponse(t, response) ? .allow : .cancel)
    }

    func dataTask(_ task: DataTask, didReceive data: Data) {
        guard let t = transfer(for: task) else { return }
        t.bytes += Int64(data.count)
        if options.head { return }
        if buffered { t.body.append(data); return }
        if !writeAll(1, data) {
            t.writeFailed = true
            task.cancel()
        }
    }

    func downloadTask(_ task: DownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64,
                      totalBytesExpectedToWrite: Int64) {
        guard let t = transfer(for: task) else { return }
        if t.response == nil, let r = task.response, !noteResponse(t, r) { task.cancel(); return }
        t.bytes = totalBytesWritten
        t.expected = totalBytesExpectedToWrite
        t.bar?.update(totalBytesWritten, of: totalBytesExpectedToWrite)
    }

    func downloadTask(_ task: DownloadTask, didFinishDownloadingTo location: URL) {
        guard let t = transfer(for: task), let dest = t.output else { return }
        if t.response == nil, let r = task.response, !noteResponse(t, r) { return }
        if t.httpFailed { return }
        t.bytes = task.countOfBytesReceived
        if rename(location.path, dest) != 0 {
            let e = errno
            t.error = PorterError(.cannotMoveFile, "cannot move the download to \(dest)", url: task.originalRequest.url,
                                  cause: .errno(e))
        }
    }

    func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
              completion: @escaping @Sendable (Request?) -> Void) {
        if options.noLocation {
            completion(nil)  // the 3xx is the answer
            return
        }
        if options.verbose { note("* redirected to \(newRequest.url.absoluteString)") }
        completion(newRequest)
    }

    func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
              completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        if options.verbose { note("* \(challenge)") }
        switch challenge.protectionSpace.authenticationMethod {
        case .serverTrust, .clientCertificate:
            completion(.performDefaultHandling)
        default:
            if let credential, challenge.previousFailureCount == 0 {
                completion(.useCredential(credential))
            } else if challenge.proposedCredential != nil, challenge.previousFailureCount == 0 {
                completion(.performDefaultHandling)
            } else if let netrc, challenge.previousFailureCount == 0,
                      let found = netrc.credential(for: challenge.protectionSpace.host) {
                completion(.useCredential(found))
            } else {
                completion(.cancelAuthenticationChallenge)
            }
        }
    }

    func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
        guard options.verbose, let last = metrics.transactionMetrics.last else { return }
        let what: String
        switch last.fetchType {
        case "localCache": what = "served from the cache"
        case "revalidated": what = "revalidated with the server (304), served from the cache"
        case "networkLoad": what = "loaded from the network"
        default: what = last.fetchType
        }
        note("* \(what)")
    }

    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        guard let t = transfer(for: task) else { return }
        // The CLI never resumes later: a kept partial file would be litter beside the output.
        if let data = error?.resumeData, let resume = try? ResumeData(data: data) { unlink(resume.partialFilePath) }
        if t.response == nil { t.response = task.response }
        if t.bytes == 0 { t.bytes = task.countOfBytesReceived }
        if let error, t.error == nil, !(t.httpFailed && error.code == .cancelled) {
            t.error = error
        }
        if options.verbose {
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - t.start.uptimeNanoseconds) / 1e9
            note(String(format: "* %@ after %lld bytes in %.3f s", t.error == nil ? "done" : "failed", t.bytes, elapsed))
        }
        finishTransfer(t)
        lock.withLock { _ = transfers.removeValue(forKey: ObjectIdentifier(task)) }
        t.onDone()
    }
}
