import ArgumentParser
import Foundation
import Logging
import Porter
import PorterStorage

/// Runs the transfers of one `porter` invocation. Delegate calls arrive on the
/// session's serial queue, so the per-task state needs no further locking.
final class Runner: DataDelegate, DownloadDelegate, @unchecked Sendable {
    let options: FetchOptions
    let hot: HotOptions
    let lock = NSLock()
    /// Held while a finished body is copied to the output, and for -w lines.
    let outputLock = NSLock()
    var transfers: [ObjectIdentifier: Transfer] = [:]
    var sessions: [String: Session] = [:]
    let credential: Credential?
    /// `-n` / `--netrc-file`: logins by host name.
    var netrc: Netrc?
    let stderrIsTTY = isatty(2) == 1
    let buffered: Bool
    var logger: Logger
    let umaskValue = FileCreationMask.current

    /// --trace / --trace-ascii FILE.
    var trace: TraceWriter?

    /// -D FILE: where response heads go (1 for "-").
    var dumpFD: Int32?

    /// -J's name: the server's Content-Disposition file name through the one name rule
    /// (`Response.filename(fromContentDisposition:)`, `PathText.fileName(from:)`), as -O's.
    static func dispositionFilename(_ response: Response) -> String? {
        response.value(forHeader: "Content-Disposition").flatMap(Response.filename(fromContentDisposition:))
    }

    init(options: FetchOptions) throws {
        self.options = options
        self.hot = HotOptions(options)
        if let d = options.dumpHeader {
            if d == "-" { dumpFD = 1 } else {
                let fd = open(d, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o666)
                guard fd >= 0 else {
                    note("porter: cannot write the header dump \(d)")
                    throw ExitCode(PorterExit.writeError.rawValue)
                }
                dumpFD = fd
            }
        }
        if let u = options.user, let colon = u.firstIndex(of: ":") {
            credential = Credential(user: String(u[..<colon]), password: String(u[u.index(after: colon)...]))
        } else {
            credential = nil
        }
        buffered = options.concurrency > 1
        if hot.verbose {
            // The curl-style lines are -v's output; the library's log adds only its
            // warnings (each event is printed once, not also as a debug log line).
            var l = Logger(label: "porter") { StreamLogHandler.standardError(label: $0) }
            l.logLevel = .warning
            logger = l
        } else {
            logger = Logger(label: "porter") { _ in SwiftLogNoOpLogHandler() }
        }
        signal(SIGPIPE, SIG_IGN)
        if let path = options.curl.traceASCII ?? options.curl.trace {
            guard let trace = TraceWriter(path: path, hex: options.curl.traceASCII == nil) else {
                note("porter: cannot write the trace file \(path)")
                throw ExitCode(PorterExit.writeError.rawValue)
            }
            self.trace = trace
        }
        if options.netrc || options.netrcFile != nil {
            let path = options.netrcFile ?? ((ProcessInfo.processInfo.environment["HOME"] ?? NSHomeDirectory()) + "/.netrc")
            do {
                netrc = try Netrc(contentsOf: path)
            } catch let e as PorterError {
                note("porter: \(e.message)")
                throw ExitCode(PorterExit.readError.rawValue)  // a netrc it will not read: curl's 26
            }
        }
        do {
            hstsStore = try options.openHSTSStore()
        } catch let e as PorterError {
            note("porter: \(e.message)")
            throw ExitCode(PorterExit(e.code).rawValue)
        }
        if options.cookieStore {
            do {
                cookieStore = try PersistentCookieStore(path: PersistentCookieStore.defaultPath())
            } catch let e as PorterError {
                note("porter: \(e.message)")
                throw ExitCode(PorterExit(e).rawValue)
            }
        } else {
            cookieStore = MemoryCookieStore()
        }
        if let c = options.cookie {
            if c.contains("=") {
                literalCookie = c
            } else {
                // curl loads no cookies from a file it cannot read, and goes on.
                let text = (try? String(contentsOfFile: c, encoding: .utf8)) ?? ""
                if text.isEmpty, hot.verbose { note("* cannot read the cookie file \(c): no cookies from it") }
                let (cookies, skipped) = NetscapeCookieFile.parse(text)
                for cookie in cookies { cookieStore.setCookie(cookie) }
                if skipped > 0, hot.verbose { note("* \(c): \(skipped) malformed line(s) skipped") }
            }
        }
    }

    /// One store for every session of this run: -b fills it, -c writes it out;
    /// `--cookie-store` makes it the persistent default store.
    let cookieStore: any CookieStore
    /// --hsts: one store for every session of this run.
    let hstsStore: HSTSStore?
    var literalCookie: String?

    /// `-c FILE`: every cookie of the run, written atomically, readable by the owner only.
    func writeCookieJar() -> Bool {
        guard let path = options.cookieJar else { return true }
        let text = NetscapeCookieFile.serialize(cookieStore.allCookies)
        // The temporary file is 0600 from its first byte (open(..., 0600)), then renamed.
        guard PrivateFiles.writeAtomically(Data(text.utf8), to: path) else {
            note("porter: cannot write the cookie jar \(path)")
            return false
        }
        return true
    }

    func session(downloadDirectory: String?) -> Session {
        lock.withLock {
            let key = downloadDirectory ?? ""
            if let s = sessions[key] { return s }
            var config = SessionConfiguration.ephemeral
            config.logger = logger
            config.downloadDirectory = downloadDirectory
            if let t = options.maxTime ?? options.maxTimeShort { config.timeoutIntervalForResource = t; config.timeoutIntervalForRequest = t }
            if let c = options.connectTimeout { config.connectionTimeout = c }
            config.waitsForConnectivity = options.waitForConnectivity
            if let r = options.limitRate { config.maximumBytesPerSecond = FetchOptions.rate(r) }
            // Without -L no redirect is followed (each 3xx is the answer); with it, curl's
            // default limit is 50.
            if hot.follows { config.maximumRedirects = options.maxRedirs.map { $0 < 0 ? 100_000 : $0 } ?? 50 }
            if hot.follows, let allowed = hot.redirectProtocols { config.allowedRedirectSchemes = allowed }
            let curl = options.curl
            if curl.tlsv12 { config.tlsMinimumVersion = .tls1_2 }
            if curl.tlsv13 { config.tlsMinimumVersion = .tls1_3 }
            if let m = curl.tlsMax { config.tlsMaximumVersion = CurlFlags.tlsVersion(m) }
            // The CLI hands each chunk straight to stdout or a file: 1 MiB in flight keeps
            // the pipe full and memory low.
            config.receiveBufferLimit = 1 << 20
            config.caCertificateFile = options.cacert
            config.tlsVerificationDisabled = options.insecure
            config.pinnedPublicKey = options.pinnedpubkey
            if options.http11 { config.http2Enabled = false }
            config.cookieStore = cookieStore
            try? options.applyHTTPState(to: &config, hsts: hstsStore)
            config.responseCache = options.cache ? HTTPCache.shared : nil
            config.hostOverrides = options.resolve.compactMap(HostOverride.init(parsing:))
            // --concurrency N means N transfers at once, to one host too (as curl --parallel).
            config.httpMaximumConnectionsPerHost = max(config.httpMaximumConnectionsPerHost, options.concurrency)
            if let cert = options.cert, let key = options.key { config.clientCertificate = (cert, key) }
            if let p = options.proxy, let url = URL(string: p.contains("://") ? p : "http://" + p) {
                config.proxies = ProxyConfiguration(httpProxy: url, httpsProxy: url, allProxy: url)
            }
            // -U: the proxy's login, in the proxy URL (libcurl sends it with Basic, as curl -U).
            if let u = curl.proxyUser, let colon = u.firstIndex(of: ":") {
                func withUser(_ url: URL?) -> URL? {
                    guard let url, var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url }
                    parts.user = String(u[..<colon])
                    parts.password = String(u[u.index(after: colon)...])
                    return parts.url ?? url
                }
                config.proxies.httpProxy = withUser(config.proxies.httpProxy)
                config.proxies.httpsProxy = withUser(config.proxies.httpsProxy)
                config.proxies.allProxy = withUser(config.proxies.allProxy)
            }
            // --noproxy: curl's list replaces NO_PROXY ("*": no proxy at all).
            if let list = curl.noproxy {
                config.proxies.noProxy = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            }
            // The runner's callbacks are quick and keep their state per transfer: they run
            // where each transfer runs, with no hop to a delegate queue.
            let s = Session(configuration: config, delegateOnLoadingThread: self)
            sessions[key] = s
            madeSessions.withLock { $0.append(s) }
            return s
        }
    }

    func transfer(for task: SessionTask) -> Transfer? {
        lock.withLock { transfers[ObjectIdentifier(task)] }
    }

    /// Runs every URL of `source`; returns the exit code of the last failure (or success).
    /// URLs are read from the source only as slots free up, and a finished transfer is
    /// forgotten once its exit code is counted: a list of 100,000 URLs costs no more
    /// memory than a list of ten.
    func run(_ source: URLSource) -> PorterExit {
        let interrupt = installInterruptHandlers()
        defer { for s in interrupt { s.cancel() } }
        // The first `concurrency` transfers start here; after that each completion starts
        // the next one from the delivery queue it completes on, so no thread wakes up
        // just to hand over a URL (a context switch per request otherwise).
        let progress = Locked((next: 0, active: 0, exhausted: false, result: PorterExit.success))
        let allDone = DispatchSemaphore(value: 0)
        let stopping = self.stopping
        @Sendable func record(_ t: Transfer) {
            let code = t.exitCode
            if code != .success { progress.withLock { $0.result = code } }
        }
        /// One transfer fewer in flight; true when that was the last of all.
        @Sendable func retire() -> Bool {
            progress.withLock { p in
                p.active -= 1
                return p.active == 0 && p.exhausted
            }
        }
        @Sendable func launchNext() {
            while true {
                let item: (Int, String)? = progress.withLock { p in
                    if !p.exhausted, stopping.current { p.exhausted = true }
                    guard !p.exhausted, let url = source.next() else {
                        p.exhausted = true
                        return nil
                    }
                    p.next += 1
                    p.active += 1
                    return (p.next - 1, url)
                }
                guard let (i, url) = item else {
                    if progress.withLock({ $0.active == 0 }) { allDone.signal() }
                    return
                }
                let output = i < options.output.count ? options.output[i] : nil
                let transfer = Transfer(urlText: url, output: output)
                transfer.retriesLeft = hot.retry
                transfer.onDone = {
                    record(transfer)
                    if retire() { allDone.signal() } else { launchNext() }
                }
                guard let failure = start(transfer) else { return }
                // It failed before it started: record it and try the next URL here
                // (a loop, not a call back into launchNext, however many fail in a row).
                transfer.error = failure
                transfer.onDone = {}
                finishTransfer(transfer)
                record(transfer)
                if retire() { allDone.signal(); return }
            }
        }
        for _ in 0..<max(1, options.concurrency) {
            launchNext()
            if progress.withLock({ $0.exhausted }) { break }
        }
        allDone.wait()
        // The shared cache lives as long as the process: what its memory tier served
        // goes to the disk index's recency now.
        if options.cache { HTTPCache.shared.flushRecency() }
        return progress.withLock { $0.result }
    }

    /// Set by SIGINT, SIGTERM or SIGHUP: no new transfer starts.
    let stopping = Locked(false)
    /// Every session made, for the signal handlers: they hold this, `stopping` and
    /// `fatalSignal`, not the runner. A weak reference to the runner gave it a side table,
    /// and every retain of it (each delegate call of each transfer) took the runtime's slow
    /// path.
    let madeSessions = Locked<[Session]>([])
    /// The terminating signal received (SIGTERM / SIGHUP), re-raised after clean-up.
    let fatalSignal = Locked<Int32?>(nil)

    /// Ctrl-C, SIGTERM and SIGHUP cancel every transfer, so each download removes its
    /// temporary file before the process ends.
    func installInterruptHandlers() -> [DispatchSourceSignal] {
        [SIGINT, SIGTERM, SIGHUP].map { sig in
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            let stopping = self.stopping, fatalSignal = self.fatalSignal, made = self.madeSessions
            source.setEventHandler {
                stopping.withLock { $0 = true }
                // Clean up, then end by the signal, as curl (killed by it) does: a script's
                // shell sees 128+N and a Ctrl-C stops a loop of porter calls.
                fatalSignal.withLock { $0 = sig }
                let all = made.withLock { $0 }
                for s in all { for t in s.allTasks { t.cancel() } }
            }
            source.resume()
            return source
        }
    }

    /// The schemes this program has handlers for ("data", "file", plugins' ...): a URL
    /// starting with one of them followed by ":" is not a host name (URL guessing).
    static let knownSchemes = Set(HandlerRegistry.shared.registrations.flatMap(\.schemes))

    /// Makes and starts the task; returns an error when it cannot even be made.
    func start(_ t: Transfer) -> PorterError? {
        // URL.scheme parses the scheme out again on each call: asked once.
        guard let url = FetchOptions.guessURL(t.urlText, knownSchemes: Runner.knownSchemes), let urlScheme = url.scheme else {
            return PorterError(.badURL, "not a valid URL: \(t.urlText)")
        }
        let scheme = urlScheme.lowercased()
        if let allowed = hot.protocols, !allowed.contains(scheme) {
            return PorterError(.unsupportedURL, "--proto does not allow \(scheme): \(t.urlText)", url: url)
        }
        var request = Request(url: url)
        if hot.head { request.method = "HEAD" }
        configureCurl(&request, scheme: scheme)
        if let literalCookie { _ = request.setValue(literalCookie, forHeader: "Cookie") }
        // curl's -H rules: "Name: value" adds (repeats add more), "Name:" removes the field
        // (the ones Porter or libcurl add themselves too), "Name;" sends it empty.
        for h in hot.header {
            guard let parsed = HeaderOption(h) else { return PorterError(.badURL, "a header needs 'Name: value': \(h)") }
            let valid: Bool
            switch parsed.action {
            case .add(let value): valid = request.addValue(value, forHeader: parsed.name)
            case .remove:
                valid = request.setValue(nil, forHeader: parsed.name)
                if valid { request.suppressedHeaders.insert(parsed.name.lowercased()) }
            }
            if !valid { return PorterError(.badURL, "not a valid header name: \(parsed.name)") }
        }
        if hot.sendsBody {
            do {
                try options.applyBody(to: &request)
            } catch let e as PorterError {
                t.exitOverride = .readError  // an input file it cannot read: curl's 26
                return e
            } catch {
                return PorterError(.unknown, "\(error)")
            }
        }
        if hot.setsHeaders || credential != nil { options.applyHeaders(to: &request, credential: credential) }
        if let m = hot.request { request.method = m }
        if t.output == nil, hot.remoteName {
            // The same name rule as -J's: the last component, control characters replaced.
            guard let name = PathText.fileName(from: url.path) else {
                return PorterError(.badURL, "-O: the URL has no file name: \(t.urlText)")
            }
            t.output = hot.outputDir.map { $0 + "/" + name } ?? name
        }
        if let offset = hot.continueOffset, t.output == nil || t.output == "-" {
            request.setValue("bytes=\(offset)-", forHeader: "Range")
        }
        if hot.createDirs, let output = t.output, output != "-" {
            let folder = PathText.parent(of: output)
            if (try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)) == nil {
                return PorterError(.cannotCreateFile, "--create-dirs: cannot create \(folder)")
            }
        }

        // -o FILE: a download into FILE's folder, renamed over FILE at the end. "-o -" is
        // stdout; an existing device, FIFO or socket is written through (renaming over
        // /dev/null would replace the device with a file); a folder is refused.
        var fileOutput: String?
        if let output = t.output, output != "-" {
            switch OutputFile.kind(of: output) {
            case .file: fileOutput = output
            case .folder: return PorterError(.cannotCreateFile, "cannot write to \(output): it is a folder")
            case .special:
                do { t.fd = try OutputFile.openThrough(output) } catch { return error }
                t.ownsFD = true
            }
        }
        let dir = fileOutput.map(PathText.parent(of:))
        let session = session(downloadDirectory: dir)
        let task: SessionTask
        if scheme == "file", copiesInKernel(to: fileOutput, fd: t.fd) {
            // The file handler copies the file into -o's output (a private file beside it,
            // placed at the end as a download's is) or into stdout / -o's device or FIFO,
            // in the kernel (BodyDestination, FileCopy); it streams as data when it cannot.
            if let output = fileOutput {
                do {
                    let made = try OutputFile.makeTemporary(beside: output)
                    t.fd = made.fd
                    t.ownsFD = true
                    t.directTemporary = made.path
                } catch {
                    return error
                }
            }
            let destination = BodyDestination(fd: t.fd)
            t.direct = destination
            request.setProperty(destination, forKey: BodyDestination.property)
            task = session.dataTask(with: request)
        } else if fileOutput == nil, Runner.curlSchemes.contains(scheme), writesThrough(fd: t.fd) {
            // http(s) and ftp(s) to stdout or -o's device or FIFO: libcurl's write callback
            // writes each chunk there itself (BodyDestination), as curl does — no copy of the
            // body and no hand-over to this thread. It comes as data when it cannot (a
            // response the cache stores).
            let destination = BodyDestination(fd: t.fd)
            t.direct = destination
            request.setProperty(destination, forKey: BodyDestination.property)
            task = session.dataTask(with: request)
        } else if let file = hot.uploadFile {
            // curl reads the file first: one it cannot read is its exit 26, nothing sent.
            guard access(file, R_OK) == 0, OutputFile.kind(of: file) != .folder else {
                t.exitOverride = .readError
                return PorterError(.fileDoesNotExist, "cannot read the file to upload: \(file)", cause: .errno(errno))
            }
            // A URL ending in '/' gets the file's name, on the request's URL (which -u's
            // login may have gone into), not the one typed.
            if request.url.absoluteString.hasSuffix("/") {
                request.url = request.url.appendingPathComponent(PathText.lastComponent(of: file))
            }
            // curl asks "Expect: 100-continue" for every non-empty PUT over HTTP/1.1 (a
            // POST only above 1 MiB, which the library's own rule already does).
            let size = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.int64Value ?? 0
            if scheme == "http" || (scheme == "https" && options.http11), size > 0, request.value(forHeader: "Expect") == nil,
               !request.suppressedHeaders.contains("expect") {
                request.setValue("100-continue", forHeader: "Expect")
            }
            task = session.uploadTask(with: request, fromFile: URL(fileURLWithPath: file))
        } else if let output = fileOutput {
            task = continuedDownload(session, request, into: output, directory: dir ?? ".") ?? session.downloadTask(with: request)
            if hot.progressBar || (stderrIsTTY && !hot.silent) { t.bar = ProgressBar() }
        } else {
            task = session.dataTask(with: request)
        }
        lock.withLock { transfers[ObjectIdentifier(task)] = t }
        // libcurl's handlers (http, https, ftp, ftps) show the request as sent (the debug
        // hook in configureCurl); for the others, the request as porter asked for it.
        if hot.verbose, !Runner.curlSchemes.contains(scheme) {
            note("> \(request.method) \(request.url.maskingPassword)")
            for field in request.headerFields {
                note("> \(field.name.rawName): \(Runner.masked(field.name.rawName, field.value))")
            }
        }
        t.start = .now()
        task.resume()
        return nil
    }

    /// Whether a file: body may go to its output without passing through the CLI: not
    /// when the CLI writes around it (-i's head on the same stdout), renames or resumes it
    /// (-J, -C), may start over (--retry), draws a progress bar, sends a body, or holds
    /// stdout back (--concurrency > 1 spools each body until its turn).
    private func copiesInKernel(to fileOutput: String?, fd: Int32) -> Bool {
        guard hot.uploadFile == nil, !hot.sendsBody, !hot.head, !hot.include, !hot.remoteHeaderName,
              hot.continueAt == nil, hot.retry == 0, !hot.progressBar else { return false }
        if fileOutput != nil { return hot.silent || !stderrIsTTY }
        return !(buffered && fd == 1)
    }

    /// Whether a libcurl handler may write the body to `fd` itself: as `copiesInKernel`,
    /// and the CLI must have nothing to say about a response before its body is written,
    /// nor write anything else where the body goes: no -f (the body of an error is not
    /// written), -z or --etag-save (decided per response), -D (the head, maybe on the same
    /// stdout), -v or --trace (their lines must come before the body's, as curl's do).
    private func writesThrough(fd: Int32) -> Bool {
        guard copiesInKernel(to: nil, fd: fd), !hot.fail, hot.timeCond == nil, hot.etagSave == nil,
              dumpFD == nil, !hot.verbose, trace == nil else { return false }
        return true
    }

    /// The schemes whose built-in handlers run on libcurl and honour the curl request
    /// properties (the debug hook, -4 / -6, --connect-to).
    static let curlSchemes: Set<String> = HTTPHandler.schemes.union(FTPHandler.schemes)

    /// The request properties the libcurl handlers honour: -L (a 3xx is the answer
    /// without it), -v's request head as sent, --trace, -4 / -6, --connect-to, --ssl(-reqd).
    func configureCurl(_ request: inout Request, scheme: String) {
        guard Runner.curlSchemes.contains(scheme) else { return }
        if !hot.follows { request.setProperty(true, forKey: HTTPHandler.deliversRedirectsProperty) }
        if let ip = hot.ipResolve { request.setProperty(ip, forKey: HTTPHandler.ipResolveProperty) }
        if !hot.connectTo.isEmpty { request.setProperty(hot.connectTo, forKey: HTTPHandler.connectToProperty) }
        if let tls = hot.ftpTLS { request.setProperty(tls, forKey: FTPHandler.tlsProperty) }
        let verbose = hot.verbose
        let trace = self.trace
        guard verbose || trace != nil else { return }
        let sink: @Sendable (Int, Data) -> Void = { kind, bytes in
            trace?.record(kind, bytes)
            // curl -v: the request head exactly as libcurl sent it (2: CURLINFO_HEADER_OUT).
            if verbose, kind == 2 { Runner.showSentHead(bytes) }
        }
        request.setProperty(sink, forKey: HTTPHandler.debugProperty)
    }

    /// `-C -`: continue into a copy of the existing output (the output itself is only ever
    /// replaced whole, by rename); a server that cannot resume sends it all again.
    func continuedDownload(_ session: Session, _ request: Request, into output: String, directory: String) -> DownloadTask? {
        guard hot.continueAt != nil, let attrs = try? FileManager.default.attributesOfItem(atPath: output),
              var size = (attrs[.size] as? NSNumber)?.int64Value, size > 0 else { return nil }
        // -C N: continue from byte N (the existing file's first N bytes are kept).
        if let offset = hot.continueOffset { size = min(size, offset) }
        guard size > 0 else { return nil }
        // A partial file as a download task makes its own (PartialFile's name, in the
        // session's download folder): resume data may name no other.
        var template = Array((directory + "/.porter-download-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let partial = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        guard (try? OutputFile.copy(from: output, to: fd, naming: partial)) != nil, ftruncate(fd, off_t(size)) == 0 else {
            unlink(partial)
            return nil
        }
        let resume = ResumeData(url: request.url, method: request.method,
                                headers: request.headerFields.map { [$0.name.rawName, $0.value] },
                                validator: nil, bytesReceived: size, expectedTotalBytes: -1, partialFilePath: partial)
        if hot.verbose { note("* continuing \(output) from byte \(size)") }
        return session.downloadTask(withResumeData: resume.encoded())
    }

    func finishTransfer(_ t: Transfer) {
        if let bar = t.bar {
            if t.error == nil { bar.update(t.bytes, of: t.expected, force: true) }
            bar.finish()
        }
        if let e = t.error, !hot.silent || hot.showError, !t.httpFailed {
            note("porter: \(e.message) (\(e.code))")
            let refused = Porter.pluginVerdicts.filter { $0.diagnostic != nil }.count
            if e.code == .unsupportedURL, refused > 0 {
                note("porter: \(refused) plugin(s) were refused at start-up; 'porter plugins' says why")
            }
        }
        if t.httpFailed, !hot.silent, let s = t.response?.statusCode { note("porter: the server answered \(s)") }
        if t.spool >= 0 || !t.memorySpool.isEmpty {
            // Transfers end on several threads: one body goes to stdout at a time.
            outputLock.withLock {
                if t.error == nil {
                    if t.spool >= 0 {
                        if !copySpool(t.spool, to: t.fd) { t.writeFailed = true }
                    } else if !writeAll(t.fd, t.memorySpool) {
                        t.writeFailed = true
                    }
                }
            }
            if t.spool >= 0 { close(t.spool) }
            t.spool = -1
            t.memorySpool = Data()
        }
        if t.ownsFD {
            if close(t.fd) != 0, t.error == nil { t.writeFailed = true }
            t.ownsFD = false
        }
        if let format = hot.writeOut {
            let line = WriteOut.render(format == "json" ? "%{json}\n" : format, WriteOut.values(for: t))
            outputLock.withLock { _ = writeAll(1, line) }
        }
    }
}
