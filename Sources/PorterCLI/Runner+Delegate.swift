import ArgumentParser
import Foundation
import Logging
import Porter
import PorterStorage

// The Runner as its tasks' delegate: responses, bodies, files, redirects, challenges,
// metrics and ends; and -v's lines for what was sent.

extension Runner {
    /// -v's "> " lines for a request head (or FTP commands) as sent, credentials masked.
    static func showSentHead(_ bytes: Data) {
        var lines: [String] = []
        // Split on the bytes: in a Swift String "\r\n" is one Character.
        for raw in bytes.split(separator: 0x0A, omittingEmptySubsequences: false) {
            var line = String(decoding: raw, as: UTF8.self)
            if line.hasSuffix("\r") { line.removeLast() }
            if line.isEmpty { continue }
            if let colon = line.firstIndex(of: ":"), !line.hasPrefix(" ") {
                let name = String(line[..<colon])
                let value = String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
                let shown = masked(name, value)
                lines.append("> " + (shown == value ? line : name + ": " + shown))
            } else if line.uppercased().hasPrefix("PASS ") {
                lines.append("> PASS ***")
            } else {
                lines.append("> " + line)
            }
        }
        lines.append(">")
        note(lines.joined(separator: "\n"))
    }

    /// What -v shows of a header: credentials and cookie values masked.
    static func masked(_ name: String, _ value: String) -> String {
        switch name.lowercased() {
        case "authorization", "proxy-authorization":
            return (value.split(separator: " ").first.map(String.init) ?? "") + " ***"
        case "cookie", "set-cookie":
            return value.split(separator: ";").map { pair -> String in
                let p = pair.trimmingCharacters(in: .whitespaces)
                guard let eq = p.firstIndex(of: "=") else { return p }
                return String(p[..<eq]) + "=***"
            }.joined(separator: "; ")
        default:
            return value
        }
    }

    func noteResponse(_ t: Transfer, _ response: Response) -> Bool {
        t.response = response
        if t.retriesLeft > 0, let s = response.statusCode, Runner.transientStatuses.contains(s) {
            t.retryPending = true
            // Retry-After in seconds (a date, or anything else, falls back to curl's wait).
            t.retryAfter = response.value(forHeader: "Retry-After").flatMap { v in
                v.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) ? TimeInterval(v) : nil
            }
            return false
        }
        if !showHead(response) { t.writeFailed = true; return false }
        if timeConditionUnmet(response) {
            t.conditionUnmet = true
            return false
        }
        if let path = hot.etagSave, !saveETag(response, to: path) { t.writeFailed = true; return false }
        if hot.fail, let s = response.statusCode, s >= 400 {
            t.httpFailed = true
            return hot.failWithBody  // --fail-with-body: the body is still written
        }
        return true
    }

    /// -z: a 200 whose Last-Modified does not meet the condition is not written (libcurl's
    /// CURLOPT_TIMECONDITION: a server may ignore If-Modified-Since or compare exactly).
    func timeConditionUnmet(_ response: Response) -> Bool {
        guard let cond = hot.timeCond, response.statusCode == 200,
              let (date, modifiedSince) = CurlFlags.timeCondition(cond),
              let last = response.value(forHeader: "Last-Modified").flatMap(HTTPDate.parse) else { return false }
        return modifiedSince ? last <= date : last > date
    }

    /// --etag-save FILE: the ETag as sent and a newline (an empty file when there is none), as curl.
    func saveETag(_ response: Response, to path: String) -> Bool {
        let tag = response.value(forHeader: "ETag").map { $0 + "\n" } ?? ""
        return PrivateFiles.writeAtomically(Data(tag.utf8), to: path)
    }

    func dataTask(_ task: DataTask, didReceive response: Response,
                  completion: @escaping @Sendable (ResponseDisposition) -> Void) {
        guard let t = transfer(for: task) else { completion(.allow); return }
        completion(noteResponse(t, response) ? .allow : .cancel)
    }

    func dataTask(_ task: DataTask, didReceive data: Data) {
        guard let t = transfer(for: task) else { return }
        t.bytes += Int64(data.count)
        if hot.head { return }
        if buffered, t.fd == 1 {
            if t.spool < 0, t.memorySpool.count + data.count <= Transfer.memorySpoolLimit {
                t.memorySpool.append(data)
                return
            }
            if t.spool < 0 {
                t.spool = makeSpool()
                if t.spool >= 0, !t.memorySpool.isEmpty, !writeAll(t.spool, t.memorySpool) {
                    close(t.spool)
                    t.spool = -1
                }
                t.memorySpool = Data()
            }
            if t.spool >= 0, writeAll(t.spool, data) { return }
            t.writeFailed = true
            task.cancel()
            return
        }
        if !writeAll(t.fd, data) {
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
        guard let t = transfer(for: task), var dest = t.output else { return }
        // -J: the server's Content-Disposition name, its last component only, never over an
        // existing file (curl's rule).
        if hot.remoteHeaderName, let name = task.response.flatMap(Runner.dispositionFilename) {
            let named = PathText.parent(of: dest) + "/" + name
            if FileManager.default.fileExists(atPath: named) {
                t.error = PorterError(.cannotCreateFile, "-J: \(named) exists already; not overwritten")
                return
            }
            dest = named
            t.output = named
        }
        if t.response == nil, let r = task.response, !noteResponse(t, r) { return }
        if t.httpFailed, !hot.failWithBody { return }
        t.bytes = task.countOfBytesReceived
        // The download was private (0600) while it grew; the output rule gives it the mode
        // a new file would have (0666 less the umask, as curl's) or an existing file's.
        do {
            try OutputFile.place(location.path, at: dest, umask: umaskValue)
        } catch {
            var e = error
            e.url = task.originalRequest.url
            t.error = e
        }
    }

    /// -v, -i / -I and -D for one response head (every hop of a redirect too, as curl -iL);
    /// `note` and `responseHead` clean what the server wrote (`TerminalText`).
    func showHead(_ response: Response) -> Bool {
        if hot.verbose {
            note("< \(response)")
            if let line = response.statusLine { note("< \(line)") }
            for f in response.headerFields { note("< \(f.name.rawName): \(Runner.masked(f.name.rawName, f.value))") }
        }
        return outputLock.withLock {
            if let dumpFD { _ = writeAll(dumpFD, responseHead(response)) }
            if hot.include || hot.head {
                return writeAll(1, responseHead(response))
            }
            return true
        }
    }

    /// curl's --retry: a timeout or one of these statuses is transient.
    static let transientStatuses: Set<Int> = [408, 429, 500, 502, 503, 504]

    func taskIsWaitingForConnectivity(_ task: SessionTask) {
        if hot.verbose { note("* no route to \(task.originalRequest.url.maskingPassword): waiting for connectivity") }
    }

    func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
              completion: @escaping @Sendable (Request?) -> Void) {
        // An HSTS upgrade is no redirect of the server's: curl neither shows it nor needs -L.
        if response.isInternalRedirect {
            if hot.verbose { note("* HSTS: \(newRequest.url.maskingPassword)") }
            completion(newRequest)
            return
        }
        if let t = transfer(for: task), !showHead(response) { t.writeFailed = true }
        if !hot.follows {
            completion(nil)  // without -L the 3xx is the answer (curl's default)
            return
        }
        // --proto-redir: a redirect elsewhere fails the transfer (curl's exit 1), same
        // scheme or not.
        let scheme = newRequest.url.scheme?.lowercased() ?? ""
        if let allowed = hot.redirectProtocols, !allowed.contains(scheme), let t = transfer(for: task) {
            t.error = PorterError(.redirectNotAllowed, "--proto-redir does not allow a redirect to \(scheme)", url: newRequest.url)
            completion(nil)
            task.cancel()
            return
        }
        if hot.verbose { note("* redirected to \(newRequest.url.maskingPassword)") }
        completion(newRequest)
    }

    func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
              completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        if hot.verbose { note("* \(challenge)") }
        completion(Runner.answer(challenge, originalURL: task.originalRequest.url,
                                 loadingURL: task.currentRequest?.url ?? task.originalRequest.url, user: credential, netrc: netrc,
                                 methods: options.serverAuthMethods))
    }

    /// How the CLI answers a challenge, as curl does:
    /// - `-u` is for the first URL's origin (scheme, host, port) only: never for another
    ///   host a redirect leads to, never over plain http when it was given for https, and
    ///   never for a proxy (a proxy's credentials come from the -x URL).
    /// - a netrc login is for the host of the URL being loaded (`loadingURL`; after a
    ///   redirect, the new one), only when the challenge is that host's, and not over plain
    ///   http when the first URL was https: a handler (a plugin) cannot name another host
    ///   and be handed its login.
    /// - a refused credential is not tried again, and with nothing (else) to answer, the
    ///   401 / 407 itself is the response (default handling), as URLSession delivers it.
    static func answer(_ challenge: AuthenticationChallenge, originalURL: URL, loadingURL: URL? = nil, user: Credential?,
                       netrc: Netrc?, methods: Set<AuthenticationMethod>? = nil) -> ChallengeDisposition {
        let space = challenge.protectionSpace
        switch space.authenticationMethod {
        case .serverTrust, .clientCertificate:
            return .performDefaultHandling
        default:
            break
        }
        // A method the command line did not ask for (curl answers Basic unless told
        // otherwise): the next method the server offers, and with none left the 401.
        // Only http's methods are chosen so; a plugin's challenge is answered as asked.
        let httpMethods: Set<AuthenticationMethod> = [.httpBasic, .httpDigest, .ntlm, .negotiate]
        if !space.isProxy, let methods, httpMethods.contains(space.authenticationMethod),
           !methods.contains(space.authenticationMethod) {
            return .rejectProtectionSpace
        }
        guard challenge.previousFailureCount == 0, !space.isProxy else { return .performDefaultHandling }
        if let user, space.isOrigin(of: originalURL) { return .useCredential(user) }
        if challenge.proposedCredential != nil { return .performDefaultHandling }
        let downgrade = originalURL.scheme?.lowercased() == "https" && space.protocol.lowercased() != "https"
        if let netrc, !downgrade, let host = (loadingURL ?? originalURL).host, host.lowercased() == space.host.lowercased(),
           let found = netrc.credential(for: host) {
            return .useCredential(found)
        }
        return .performDefaultHandling
    }

    func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
        transfer(for: task)?.metrics = metrics
        guard hot.verbose, let last = metrics.transactionMetrics.last else { return }
        if let ip = last.remoteAddress, let port = last.remotePort {
            note("* \(last.isReusedConnection ? "Re-used connection" : "Connected") to \(last.request.url.host ?? ip) (\(ip)) port \(port)")
        }
        if let tls = last.negotiatedTLSProtocolVersion { note("* TLS: \(tls) / \(last.negotiatedTLSCipherSuite ?? "?")") }
        if let proto = last.networkProtocolName { note("* protocol: \(proto)") }
        let what: String
        switch last.fetchType {
        case "localCache": what = "served from the cache"
        case "revalidated": what = "revalidated with the server (304), served from the cache"
        case "networkLoad": what = "loaded from the network"
        default: what = last.fetchType
        }
        note("* \(what)")
    }

    /// Starts `t` again after curl's wait (1 s, doubling; a Retry-After of up to 10 minutes wins).
    func retry(_ t: Transfer) {
        let attempt = hot.retry - t.retriesLeft
        let wait = min(t.retryAfter ?? Double(1 << min(attempt, 9)), 600)
        if !hot.silent || hot.showError {
            note("porter: transient problem; will retry in \(Int(wait)) s (\(t.retriesLeft) left)")
        }
        t.retriesLeft -= 1
        t.retryPending = false
        t.retryAfter = nil
        if t.ownsFD {
            close(t.fd)
            t.ownsFD = false
            t.fd = 1
        }
        t.error = nil
        t.httpFailed = false
        t.response = nil
        t.bytes = 0
        if t.spool >= 0 { close(t.spool); t.spool = -1 }
        t.memorySpool = Data()
        DispatchQueue.global().asyncAfter(deadline: .now() + wait) { [self] in
            if let failure = start(t) {
                t.error = failure
                finishTransfer(t)
                let done = t.onDone
                t.onDone = {}
                done()
            }
        }
    }

    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        guard let t = transfer(for: task) else { return }
        // The CLI never resumes later: a kept partial file would be litter beside the output.
        if let data = error?.resumeData, let resume = try? ResumeData(data: data) { unlink(resume.partialFilePath) }
        if t.response == nil { t.response = task.response }
        if let direct = t.direct { t.bytes += direct.written }
        if t.bytes == 0 { t.bytes = task.countOfBytesReceived }
        if let temporary = t.directTemporary {
            t.directTemporary = nil
            if error == nil, !t.writeFailed, let output = t.output {
                do {
                    try OutputFile.place(temporary, at: output, umask: umaskValue)
                } catch {
                    var e = error
                    e.url = task.originalRequest.url
                    t.error = e
                }
            } else {
                unlink(temporary)
            }
        }
        if let error, t.error == nil, !((t.httpFailed || t.conditionUnmet) && error.code == .cancelled) {
            t.error = error
        }
        lock.withLock { _ = transfers.removeValue(forKey: ObjectIdentifier(task)) }
        if t.retriesLeft > 0, t.retryPending || t.error?.code == .timedOut, !stopping.current {
            retry(t)
            return
        }
        if hot.verbose {
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - t.start.uptimeNanoseconds) / 1e9
            note(String(format: "* %@ after %lld bytes in %.3f s", t.error == nil ? "done" : "failed", t.bytes, elapsed))
        }
        finishTransfer(t)
        // onDone captures its transfer: clear it, or every transfer would keep itself alive.
        let done = t.onDone
        t.onDone = {}
        done()
    }
}
