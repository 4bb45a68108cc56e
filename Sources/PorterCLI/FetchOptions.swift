import ArgumentParser
import Foundation
import Logging
import Porter

/// What `porter fetch` was asked to do, as a plain value: filled by the start-up parser
/// (`FetchCommandLine`) on the common path, or converted from ArgumentParser's `Fetch`
/// on every other. The run reads only this, so both paths run the same code, and reading
/// an option is a field load, not a trip through ArgumentParser's property wrappers.
/// Field names are `Fetch`'s (and `CurlFlags`'s under `curl`).
struct FetchOptions: Equatable, Sendable {
    var urls: [String] = []
    var output: [String] = []
    var background: String?
    var include = false
    var head = false
    var request: String?
    var header: [String] = []
    var data: [String] = []
    var dataBinary: String?
    var uploadFile: String?
    var user: String?
    var netrc = false
    var netrcFile: String?
    var resolve: [String] = []
    var cookie: String?
    var cache = false
    var cookieStore = false
    var cookieJar: String?
    var hsts: String?
    var altSvc: String?
    var cacert: String?
    var insecure = false
    var pinnedpubkey: String?
    var noLocation = false
    var continueAt: String?
    var compressed = false
    var proxy: String?
    var http11 = false
    var http2 = false
    var cert: String?
    var key: String?
    var maxTime: Double?
    var waitForConnectivity = false
    var maxRedirs: Int?
    var silent = false
    var verbose = false
    var fail = false
    var writeOut: String?
    var urlList: String?
    var location = false
    var showError = false
    var userAgent: String?
    var referer: String?
    var get = false
    var range: String?
    var maxTimeShort: Double?
    var remoteName = false
    var remoteHeaderName = false
    var dumpHeader: String?
    var form: [String] = []
    var json: [String] = []
    var dataUrlencode: [String] = []
    var digest = false
    var basic = false
    var anyauth = false
    var ntlm = false
    var negotiate = false
    var retry: Int = 0
    var limitRate: String?
    var connectTimeout: Double?
    var createDirs = false
    var config: String?
    var concurrency: Int = 1
    var curl = CurlOptions()
    var plugins = PluginChoice()

    init() {}

    init(_ f: Fetch) {
        urls = f.urls
        output = f.output
        background = f.background
        include = f.include
        head = f.head
        request = f.request
        header = f.header
        data = f.data
        dataBinary = f.dataBinary
        uploadFile = f.uploadFile
        user = f.user
        netrc = f.netrc
        netrcFile = f.netrcFile
        resolve = f.resolve
        cookie = f.cookie
        cache = f.cache
        cookieStore = f.cookieStore
        cookieJar = f.cookieJar
        hsts = f.hsts
        altSvc = f.altSvc
        cacert = f.cacert
        insecure = f.insecure
        pinnedpubkey = f.pinnedpubkey
        noLocation = f.noLocation
        continueAt = f.continueAt
        compressed = f.compressed
        proxy = f.proxy
        http11 = f.http11
        http2 = f.http2
        cert = f.cert
        key = f.key
        maxTime = f.maxTime
        waitForConnectivity = f.waitForConnectivity
        maxRedirs = f.maxRedirs
        silent = f.silent
        verbose = f.verbose
        fail = f.fail
        writeOut = f.writeOut
        urlList = f.urlList
        location = f.location
        showError = f.showError
        userAgent = f.userAgent
        referer = f.referer
        get = f.get
        range = f.range
        maxTimeShort = f.maxTimeShort
        remoteName = f.remoteName
        remoteHeaderName = f.remoteHeaderName
        dumpHeader = f.dumpHeader
        form = f.form
        json = f.json
        dataUrlencode = f.dataUrlencode
        digest = f.digest
        basic = f.basic
        anyauth = f.anyauth
        ntlm = f.ntlm
        negotiate = f.negotiate
        retry = f.retry
        limitRate = f.limitRate
        connectTimeout = f.connectTimeout
        createDirs = f.createDirs
        config = f.config
        concurrency = f.concurrency
        curl = CurlOptions(f.curl)
        plugins = f.plugins.choice
    }
}

/// `CurlFlags`' options as a plain value (see `FetchOptions`).
struct CurlOptions: Equatable, Sendable {
    var url: [String] = []
    var sslReqd = false
    var ssl = false
    var failWithBody = false
    var dataRaw: [String] = []
    var parallel = false
    var parallelMax: Int?
    var tlsv12 = false
    var tlsv13 = false
    var tlsMax: String?
    var ipv4 = false
    var ipv6 = false
    var oauth2Bearer: String?
    var outputDir: String?
    var connectTo: [String] = []
    var noproxy: String?
    var proxyUser: String?
    var progressBar = false
    var traceASCII: String?
    var trace: String?
    var etagSave: String?
    var etagCompare: String?
    var timeCond: String?
    var proto: String?
    var protoRedir: String?
    var remoteNameAll = false

    init() {}

    init(_ c: CurlFlags) {
        url = c.url
        sslReqd = c.sslReqd
        ssl = c.ssl
        failWithBody = c.failWithBody
        dataRaw = c.dataRaw
        parallel = c.parallel
        parallelMax = c.parallelMax
        tlsv12 = c.tlsv12
        tlsv13 = c.tlsv13
        tlsMax = c.tlsMax
        ipv4 = c.ipv4
        ipv6 = c.ipv6
        oauth2Bearer = c.oauth2Bearer
        outputDir = c.outputDir
        connectTo = c.connectTo
        noproxy = c.noproxy
        proxyUser = c.proxyUser
        progressBar = c.progressBar
        traceASCII = c.traceASCII
        trace = c.trace
        etagSave = c.etagSave
        etagCompare = c.etagCompare
        timeCond = c.timeCond
        proto = c.proto
        protoRedir = c.protoRedir
        remoteNameAll = c.remoteNameAll
    }
}

extension FetchOptions {
    /// The server authentication methods the CLI answers, as curl's -u options choose
    /// them: Basic unless one of --digest, --ntlm, --negotiate or --anyauth says
    /// otherwise (nil: every method). A challenge for another method is not answered: the
    /// 401 is the response, as curl prints it.
    var serverAuthMethods: Set<AuthenticationMethod>? {
        if anyauth { return nil }
        if digest { return [.httpDigest] }
        if ntlm { return [.ntlm] }
        if negotiate { return [.negotiate] }
        return [.httpBasic]
    }

    /// Redirects are followed (-L and not --no-location).
    var followsRedirects: Bool { location && !noLocation }

    /// Checks the options as ArgumentParser's `validate()` did (the curl group's first, as
    /// ArgumentParser validates an option group before its command) and turns curl's
    /// spellings into porter's: --url, -Z, --remote-name-all, --output-dir.
    mutating func validate() throws {
        if curl.ssl && curl.sslReqd { throw ValidationError("--ssl and --ssl-reqd exclude each other") }
        if curl.ipv4 && curl.ipv6 { throw ValidationError("-4 and -6 exclude each other") }
        if let m = curl.parallelMax, m < 1 || m > 300 { throw ValidationError("--parallel-max wants 1 to 300, not \(m)") }
        if let t = curl.tlsMax, CurlFlags.tlsVersion(t) == nil, t != "default" {
            throw ValidationError("--tls-max wants 1.0, 1.1, 1.2, 1.3 or default, not \(t)")
        }
        if curl.tlsv12 && curl.tlsv13 { throw ValidationError("--tlsv1.2 and --tlsv1.3 exclude each other") }
        for c in curl.connectTo where c.split(separator: ":", omittingEmptySubsequences: false).count < 4 {
            throw ValidationError("--connect-to wants HOST1:PORT1:HOST2:PORT2, not \(c)")
        }
        if let u = curl.proxyUser, !u.contains(":") { throw ValidationError("--proxy-user needs USER:PASSWORD") }
        for list in [curl.proto, curl.protoRedir].compactMap({ $0 }) where CurlFlags.protocols(list, base: []) == nil {
            throw ValidationError("--proto wants a list like '=https', '-all,+https' or 'https,ftps', not \(list)")
        }
        if let t = curl.timeCond, CurlFlags.timeCondition(t) == nil {
            throw ValidationError("-z wants an HTTP date or a file, not \(t)")
        }
        // curl's spellings of what porter already has.
        urls += curl.url
        if curl.parallel { concurrency = curl.parallelMax ?? 50 }
        if curl.remoteNameAll { remoteName = true }
        if let dir = curl.outputDir {
            output = output.map { $0 == "-" || $0.hasPrefix("/") ? $0 : dir + "/" + $0 }
        }
        if urls.isEmpty && urlList == nil { throw ValidationError("give at least one URL (or --url-list FILE)") }

        if concurrency < 1 || concurrency > FetchOptions.maximumConcurrency {
            throw ValidationError("--concurrency must be between 1 and \(FetchOptions.maximumConcurrency)")
        }
        if let t = maxTime, !(t.isFinite && t > 0 && t <= FetchOptions.maximumSeconds) {
            throw ValidationError("--max-time wants a number of seconds above 0 and at most \(Int(FetchOptions.maximumSeconds)), not \(t)")
        }
        if let r = maxRedirs, r < -1 || r > 100_000 {
            throw ValidationError("--max-redirs wants -1 (no limit) or 0 to 100000, not \(r)")
        }
        if let m = request, !Request.isValidMethod(m) {
            throw ValidationError("-X wants a method name (letters, digits and !#$%&'*+-.^_`|~), not \(m.debugDescription)")
        }
        for h in header where h.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) {
            throw ValidationError("a header cannot contain CR, LF or NUL: \(h.debugDescription)")
        }
        for h in header where HeaderOption(h) == nil { throw ValidationError("a header needs 'Name: value', 'Name:' or 'Name;': \(h)") }
        if let u = user, !u.contains(":") { throw ValidationError("--user needs USER:PASSWORD") }
        if let c = continueAt, c != "-", Int64(c).map({ $0 < 0 }) ?? true {
            throw ValidationError("-C takes '-' (continue from the size of the -o file) or a byte offset")
        }
        if continueAt == "-" && output.isEmpty && !remoteName { throw ValidationError("-C - needs -o FILE or -O") }
        if let t = maxTimeShort, !(t.isFinite && t > 0 && t <= FetchOptions.maximumSeconds) {
            throw ValidationError("-m wants a number of seconds above 0 and at most \(Int(FetchOptions.maximumSeconds)), not \(t)")
        }
        if let t = connectTimeout, !(t.isFinite && t > 0 && t <= FetchOptions.maximumSeconds) {
            throw ValidationError("--connect-timeout wants a number of seconds above 0, not \(t)")
        }
        if retry < 0 || retry > 1000 { throw ValidationError("--retry wants 0 to 1000, not \(retry)") }
        if let r = limitRate, FetchOptions.rate(r) == nil { throw ValidationError("--limit-rate wants a number with an optional k, m or g, not \(r)") }
        if [digest, basic, anyauth, ntlm, negotiate].filter({ $0 }).count > 1 {
            throw ValidationError("--basic, --digest, --ntlm, --negotiate and --anyauth exclude each other")
        }
        if !form.isEmpty && (!data.isEmpty || dataBinary != nil || !json.isEmpty || !dataUrlencode.isEmpty || !curl.dataRaw.isEmpty) {
            throw ValidationError("-F and -d / --data-binary / --json / --data-urlencode exclude each other")
        }
        if let r = range, !FetchOptions.isRange(r) { throw ValidationError("-r wants ranges like 0-499, 500- or -100, not \(r)") }
        for f in form where !f.contains("=") { throw ValidationError("-F wants name=value, name=@FILE or name=<FILE: \(f)") }
        if http11 && http2 { throw ValidationError("--http1.1 and --http2 exclude each other") }
        if (cert == nil) != (key == nil) { throw ValidationError("--cert and --key go together") }
        for r in resolve where HostOverride(parsing: r) == nil {
            throw ValidationError("--resolve wants HOST:PORT:ADDRESS[,ADDRESS], not \(r)")
        }
        if let p = proxy, URL(string: p.contains("://") ? p : "http://" + p)?.host == nil {
            throw ValidationError("not a proxy URL: \(p)")
        }
    }

    /// -C N: the byte offset to continue from (nil for -C - or no -C).
    var continueOffset: Int64? { continueAt.flatMap { $0 == "-" ? nil : Int64($0) } }

    /// curl caps --parallel-max at 300; more than this many at once is a typing error.
    static let maximumConcurrency = 1024
    /// About 31 years: any longer is a typing error (and overflows the timers' arithmetic).
    static let maximumSeconds: Double = 1e9

    /// "100k" → 102400; nil when not a rate.
    static func rate(_ text: String) -> Int64? {
        let t = text.lowercased()
        let unit: Int64
        var digits = Substring(t)
        switch t.last {
        case "k": unit = 1 << 10; digits = digits.dropLast()
        case "m": unit = 1 << 20; digits = digits.dropLast()
        case "g": unit = 1 << 30; digits = digits.dropLast()
        default: unit = 1
        }
        guard let n = Int64(digits), n > 0, n <= Int64.max / unit else { return nil }
        return n * unit
    }

    /// curl's -r: "a-b", "a-", "-n", comma-separated.
    static func isRange(_ text: String) -> Bool {
        !text.isEmpty && text.split(separator: ",", omittingEmptySubsequences: false).allSatisfy { part in
            let pieces = part.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
            guard pieces.count == 2, !(pieces[0].isEmpty && pieces[1].isEmpty) else { return false }
            return pieces.allSatisfy { $0.isEmpty || $0.allSatisfy(\.isASCII) && UInt64($0) != nil }
        }
    }

    func run() throws {
        if let background {
            var all = urls
            if let urlList {
                // A list names files by their URLs (-O): one -o per URL does not scale to it.
                guard remoteName else { throw ValidationError("--background with --url-list writes each file by its URL's name: add -O") }
                do {
                    let source = try URLSource(arguments: [], listPath: urlList)
                    while let u = source.next() { all.append(u) }
                } catch let e as PorterError {
                    note("porter: \(e.message)")
                    throw ExitCode(PorterExit.readError.rawValue)
                }
            }
            return try BackgroundCLI.enqueue(session: background, urls: all, outputs: output, remoteName: remoteName, headers: header)
        }
        plugins.bootstrap(forURLs: urls, fromList: urlList != nil, verbose: verbose)
        let refused = Porter.pluginVerdicts.compactMap(\.diagnostic)
        if verbose { for d in refused { note("* plugin \(d)") } }
        let source: URLSource
        do {
            source = try URLSource(arguments: urls, listPath: urlList)
        } catch let e as PorterError {
            note("porter: \(e.message)")
            throw ExitCode(PorterExit.readError.rawValue)
        }
        let runner = try Runner(options: self)
        var code = runner.run(source)
        if !runner.writeCookieJar(), code == .success { code = .writeError }
        if let sig = runner.fatalSignal.current {
            // Everything is cleaned up: end the way the signal would have ended us.
            signal(sig, SIG_DFL)
            raise(sig)
        }
        if code != .success { throw ExitCode(code.rawValue) }
    }
}
/// `PluginOptions` (--plugin-path, --plugins-in-process) as a plain value.
struct PluginChoice: Equatable, Sendable {
    var pluginPath: [String] = []
    var pluginsInProcess = false

    var isolation: PluginIsolation {
        var i = PluginIsolation.default
        if pluginsInProcess { i.defaultMode = .inProcess }
        return i
    }

    func bootstrap() {
        Porter.bootstrap(pluginPaths: pluginPath, pluginIsolation: isolation)
    }

    /// Loads the plugins only when `urls` may need one: a run whose every URL names a
    /// built-in scheme outright ("https://...", "data:...") starts without scanning,
    /// opening and checking the plugin folders (a plugin never takes a built-in scheme,
    /// so nothing it could do changes such a run). A URL list read from a file, a
    /// --plugin-path, -v (which reports refused plugins) or any other URL loads them.
    func bootstrap(forURLs urls: [String], fromList: Bool, verbose: Bool) {
        let load = PluginOptions.needsPlugins(urls: urls, fromList: fromList, verbose: verbose, pluginPath: pluginPath)
        // The isolation settings only matter to plugins: reading them copies the whole
        // environment into a dictionary (~0.4 M instructions), which a run without plugins
        // does not need.
        Porter.bootstrap(pluginPaths: pluginPath, loadPlugins: load, pluginIsolation: load ? isolation : PluginIsolation())
    }
}
