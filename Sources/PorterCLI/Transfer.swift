import ArgumentParser
import Foundation
import Logging
import Porter
import PorterStorage

/// One URL's transfer as the CLI sees it.
final class Transfer: @unchecked Sendable {
    let urlText: String
    var output: String?
    var start = DispatchTime.now()
    /// --retry: attempts left, and whether this attempt ended in a transient failure.
    var retriesLeft = 0
    var retryPending = false
    var retryAfter: TimeInterval?
    var metrics: TaskMetrics?
    var response: Response?
    var bytes: Int64 = 0
    var expected: Int64 = -1
    var error: PorterError?
    var httpFailed = false
    var writeFailed = false
    /// -z's condition was not met (the server sent the body anyway): nothing is written,
    /// and the stop that follows is no failure (curl's rule).
    var conditionUnmet = false
    /// A failure the CLI itself decided on (a -T file it cannot read: curl's 26).
    var exitOverride: PorterExit?
    /// The exit code this transfer's outcome means (curl's numbers).
    var exitCode: PorterExit {
        if writeFailed { return .writeError }
        if let exitOverride { return exitOverride }
        if httpFailed { return .httpError }
        return error.map(PorterExit.init) ?? .success
    }
    /// Where a data task's body goes: stdout, or a device / FIFO named by -o (which is
    /// written through, never replaced by a file).
    var fd: Int32 = 1
    var ownsFD = false
    /// With --concurrency > 1, a body to stdout waits here (an unlinked temporary file,
    /// so memory stays flat however large the body) until its transfer ends.
    var spool: Int32 = -1
    /// The first `Transfer.memorySpoolLimit` bytes of such a body wait in memory: a small
    /// response costs no temporary file.
    var memorySpool = Data()
    static let memorySpoolLimit = 256 * 1024
    /// file: with a body the file handler writes into `fd` itself (FileCopy), and the
    /// private file beside -o's output it writes into, placed when the transfer succeeds.
    var direct: BodyDestination?
    var directTemporary: String?
    var bar: ProgressBar?
    /// Called once when the transfer has ended (frees its slot).
    var onDone: @Sendable () -> Void = {}
    init(urlText: String, output: String?) {
        self.urlText = urlText
        self.output = output
    }
}

/// An unlinked temporary file for a body that must wait its turn (-1 on failure).
func makeSpool() -> Int32 {
    let dir = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    var template = Array((dir + "/.porter-spool-XXXXXX").utf8CString)
    let made = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
    if made >= 0 {
        _ = fcntl(made, F_SETFD, FD_CLOEXEC)
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
    }
    return made
}

/// Copies a spool file from its start to `fd` (FileCopy: in the kernel, sendfile).
func copySpool(_ spool: Int32, to fd: Int32) -> Bool {
    guard lseek(spool, 0, SEEK_SET) == 0 else { return false }
    return (try? FileCopy.copy(from: spool, to: fd)) != nil
}

/// The options read for every transfer, worked out once (--proto's sets, -f with
/// --fail-with-body, ...): a URL list reads a dozen per URL.
struct HotOptions {
    let head: Bool, header: [String], request: String?, remoteName: Bool, continueOffset: Int64?
    let createDirs: Bool, uploadFile: String?, silent: Bool, verbose: Bool, writeOut: String?
    let fail: Bool, include: Bool, remoteHeaderName: Bool, follows: Bool, showError: Bool
    /// --fail-with-body: -f's exit, with the body written.
    let failWithBody: Bool
    /// --proto / --proto-redir: the schemes a URL / a redirect may use (nil: any).
    let protocols: Set<String>?, redirectProtocols: Set<String>?
    let progressBar: Bool, outputDir: String?
    let retry: Int, continueAt: String?
    /// A body option is given (-d, --data-*, -F, --json).
    let sendsBody: Bool
    /// -A, -e or -r is given.
    let setsHeaders: Bool
    /// The libcurl handlers' request properties (configureCurl): -4 / -6, --connect-to,
    /// --ssl-reqd / --ssl.
    let ipResolve: Int?, connectTo: [String], ftpTLS: String?
    /// -z and --etag-save, read for every response (`noteResponse`).
    let timeCond: String?, etagSave: String?

    init(_ o: FetchOptions) {
        head = o.head
        header = o.header
        request = o.request
        remoteName = o.remoteName
        continueOffset = o.continueOffset
        createDirs = o.createDirs
        uploadFile = o.uploadFile
        silent = o.silent
        verbose = o.verbose
        writeOut = o.writeOut
        fail = o.fail || o.curl.failWithBody
        include = o.include
        remoteHeaderName = o.remoteHeaderName
        follows = o.followsRedirects
        failWithBody = o.curl.failWithBody
        protocols = o.curl.proto.flatMap { CurlFlags.protocols($0, base: CurlFlags.allProtocols.union(Runner.knownSchemes)) }
        // Without --proto-redir the library's rule holds (same scheme, or http / https).
        redirectProtocols = o.curl.protoRedir.flatMap { CurlFlags.protocols($0, base: ["http", "https", "ftp", "ftps"]) }
        progressBar = o.curl.progressBar
        outputDir = o.curl.outputDir
        showError = o.showError
        retry = o.retry
        continueAt = o.continueAt
        sendsBody = !o.form.isEmpty || !o.json.isEmpty || o.dataBinary != nil || !o.data.isEmpty || !o.dataUrlencode.isEmpty
            || !o.curl.dataRaw.isEmpty
        setsHeaders = o.userAgent != nil || o.referer != nil || o.range != nil || o.curl.oauth2Bearer != nil
            || o.curl.etagCompare != nil || o.curl.timeCond != nil
        let curl = o.curl
        ipResolve = curl.ipv6 ? 6 : curl.ipv4 ? 4 : nil
        connectTo = curl.connectTo
        ftpTLS = curl.ssl ? "try" : curl.sslReqd ? "required" : nil
        timeCond = curl.timeCond
        etagSave = curl.etagSave
    }
}
