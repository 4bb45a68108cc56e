/// The start-up parser of `porter fetch`'s command line: a table of fetch's options
/// (checked against ArgumentParser's own definitions by FetchCommandLineTests, so the two
/// cannot drift) and a reader that accepts exactly the forms ArgumentParser accepts for
/// them, filling a `FetchOptions`. ArgumentParser's parse of `fetch` reflects over every
/// option with Mirror and looks up protocol conformances several passes over: ~25 M
/// instructions of `porter -s -o F data:,x`'s 54 M. This one is a loop over the words.
///
/// Anything it does not fully understand (an unknown option, help, a subcommand name,
/// `--`, -K, a value that does not convert, a word ArgumentParser would reject) makes
/// `parse` return nil: the caller then parses with ArgumentParser as before, so errors,
/// help and every odd case read exactly as they always did.
enum FetchCommandLine {
    /// One option of `fetch`: its names, whether it takes a value, and where it goes.
    struct Spec: Sendable {
        enum Kind: Sendable, Equatable {
            /// A flag: takes no value.
            case flag
            /// Takes one value (the next word unless attached as `--name=value` / `-n=value`).
            case value
            /// Takes the next word whatever it is (ArgumentParser's `.unconditional`).
            case unconditionalValue
            /// Known, but left to ArgumentParser (-K: config files are expanded before main).
            case fallback
        }
        let long: String?
        let short: Character?
        let kind: Kind
        /// An array option (each use adds a value); the others keep the last value.
        let repeats: Bool
        /// Stores the value (or sets the flag); false when the value does not convert.
        let apply: @Sendable (inout FetchOptions, String) -> Bool

        static func flag(_ long: String?, _ short: Character? = nil, _ set: @escaping @Sendable (inout FetchOptions, String) -> Void) -> Spec {
            Spec(long: long, short: short, kind: .flag, repeats: false, apply: { o, v in set(&o, v); return true })
        }

        static func value(_ long: String?, _ short: Character? = nil, repeats: Bool = false, unconditional: Bool = false,
                          _ apply: @escaping @Sendable (inout FetchOptions, String) -> Bool) -> Spec {
            Spec(long: long, short: short, kind: unconditional ? .unconditionalValue : .value, repeats: repeats, apply: apply)
        }

        static func fallback(_ long: String?, _ short: Character? = nil) -> Spec {
            Spec(long: long, short: short, kind: .fallback, repeats: false, apply: { _, _ in false })
        }
    }

    /// Every option of `fetch`, `CurlFlags` and `PluginOptions`, in declaration order.
    static let options: [Spec] = [
        .value("output", "o", repeats: true) { $0.output.append($1); return true },
        .value("background") { $0.background = $1; return true },
        .flag("include", "i") { o, _ in o.include = true },
        .flag("head", "I") { o, _ in o.head = true },
        .value("request", "X") { $0.request = $1; return true },
        .value("header", "H", repeats: true) { $0.header.append($1); return true },
        .value("data", "d", repeats: true) { $0.data.append($1); return true },
        .value("data-binary") { $0.dataBinary = $1; return true },
        .value("upload-file", "T") { $0.uploadFile = $1; return true },
        .value("user", "u") { $0.user = $1; return true },
        .flag("netrc", "n") { o, _ in o.netrc = true },
        .value("netrc-file") { $0.netrcFile = $1; return true },
        .value("resolve", repeats: true) { $0.resolve.append($1); return true },
        .value("cookie", "b") { $0.cookie = $1; return true },
        .flag("cache") { o, _ in o.cache = true },
        .flag("cookie-store") { o, _ in o.cookieStore = true },
        .value("cookie-jar", "c") { $0.cookieJar = $1; return true },
        .value("hsts") { $0.hsts = $1; return true },
        .value("alt-svc") { $0.altSvc = $1; return true },
        .value("cacert") { $0.cacert = $1; return true },
        .flag("insecure", "k") { o, _ in o.insecure = true },
        .value("pinnedpubkey") { $0.pinnedpubkey = $1; return true },
        .flag("no-location") { o, _ in o.noLocation = true },
        .value("continue-at", "C") { $0.continueAt = $1; return true },
        .flag("compressed") { o, _ in o.compressed = true },
        .value("proxy", "x") { $0.proxy = $1; return true },
        .flag("http1.1") { o, _ in o.http11 = true },
        .flag("http2") { o, _ in o.http2 = true },
        .value("cert") { $0.cert = $1; return true },
        .value("key") { $0.key = $1; return true },
        .value("max-time") { guard let n = Double($1) else { return false }; $0.maxTime = n; return true },
        .flag("wait-for-connectivity") { o, _ in o.waitForConnectivity = true },
        .value("max-redirs") { guard let n = Int($1) else { return false }; $0.maxRedirs = n; return true },
        .flag("silent", "s") { o, _ in o.silent = true },
        .flag("verbose", "v") { o, _ in o.verbose = true },
        .flag("fail", "f") { o, _ in o.fail = true },
        .value("write-out", "w") { $0.writeOut = $1; return true },
        .value("url-list") { $0.urlList = $1; return true },
        .flag("location", "L") { o, _ in o.location = true },
        .flag("show-error", "S") { o, _ in o.showError = true },
        .value("user-agent", "A") { $0.userAgent = $1; return true },
        .value("referer", "e") { $0.referer = $1; return true },
        .flag("get", "G") { o, _ in o.get = true },
        .value("range", "r") { $0.range = $1; return true },
        .value(nil, "m") { guard let n = Double($1) else { return false }; $0.maxTimeShort = n; return true },
        .flag("remote-name", "O") { o, _ in o.remoteName = true },
        .flag("remote-header-name", "J") { o, _ in o.remoteHeaderName = true },
        .value("dump-header", "D") { $0.dumpHeader = $1; return true },
        .value("form", "F", repeats: true) { $0.form.append($1); return true },
        .value("json", repeats: true) { $0.json.append($1); return true },
        .value("data-urlencode", repeats: true) { $0.dataUrlencode.append($1); return true },
        .flag("digest") { o, _ in o.digest = true },
        .flag("basic") { o, _ in o.basic = true },
        .flag("anyauth") { o, _ in o.anyauth = true },
        .flag("ntlm") { o, _ in o.ntlm = true },
        .flag("negotiate") { o, _ in o.negotiate = true },
        .value("retry") { guard let n = Int($1) else { return false }; $0.retry = n; return true },
        .value("limit-rate") { $0.limitRate = $1; return true },
        .value("connect-timeout") { guard let n = Double($1) else { return false }; $0.connectTimeout = n; return true },
        .flag("create-dirs") { o, _ in o.createDirs = true },
        .fallback("config", "K"),
        .value("concurrency") { guard let n = Int($1) else { return false }; $0.concurrency = n; return true },
        .value("url", repeats: true) { $0.curl.url.append($1); return true },
        .flag("ssl-reqd") { o, _ in o.curl.sslReqd = true },
        .flag("ssl") { o, _ in o.curl.ssl = true },
        .flag("fail-with-body") { o, _ in o.curl.failWithBody = true },
        .value("data-raw", repeats: true) { $0.curl.dataRaw.append($1); return true },
        .flag("parallel", "Z") { o, _ in o.curl.parallel = true },
        .value("parallel-max") { guard let n = Int($1) else { return false }; $0.curl.parallelMax = n; return true },
        .flag("tlsv1.2") { o, _ in o.curl.tlsv12 = true },
        .flag("tlsv1.3") { o, _ in o.curl.tlsv13 = true },
        .value("tls-max") { $0.curl.tlsMax = $1; return true },
        .flag("ipv4", "4") { o, _ in o.curl.ipv4 = true },
        .flag("ipv6", "6") { o, _ in o.curl.ipv6 = true },
        .value("oauth2-bearer") { $0.curl.oauth2Bearer = $1; return true },
        .value("output-dir") { $0.curl.outputDir = $1; return true },
        .value("connect-to", repeats: true) { $0.curl.connectTo.append($1); return true },
        .value("noproxy") { $0.curl.noproxy = $1; return true },
        .value("proxy-user", "U") { $0.curl.proxyUser = $1; return true },
        .flag("progress-bar", "#") { o, _ in o.curl.progressBar = true },
        .value("trace-ascii") { $0.curl.traceASCII = $1; return true },
        .value("trace") { $0.curl.trace = $1; return true },
        .value("etag-save") { $0.curl.etagSave = $1; return true },
        .value("etag-compare") { $0.curl.etagCompare = $1; return true },
        .value("time-cond", "z", unconditional: true) { $0.curl.timeCond = $1; return true },
        .value("proto") { $0.curl.proto = $1; return true },
        .value("proto-redir") { $0.curl.protoRedir = $1; return true },
        .flag("remote-name-all") { o, _ in o.curl.remoteNameAll = true },
        .value("plugin-path", repeats: true) { $0.plugins.pluginPath.append($1); return true },
        .flag("plugins-in-process") { o, _ in o.plugins.pluginsInProcess = true }
    ]

    /// The root's subcommand names and `help`: a word equal to one of them anywhere goes to
    /// the root's parse (the root would take it as a command). Checked against
    /// `PorterCommand.configuration` by the tests.
    static let commandWords: [String] = ["fetch", "handlers", "plugins", "plugin", "cache", "jobs", "credentials", "help"]

    static func option(long name: Substring) -> Spec? {
        options.first { $0.long.map { $0[...] == name } ?? false }
    }

    static func option(short c: Character) -> Spec? {
        options.first { $0.short == c }
    }

    /// The options of `arguments`, or nil where ArgumentParser must decide. Not yet
    /// validated: `FetchOptions.validate()` is the same for both parsers.
    static func parse(_ arguments: [String]) -> FetchOptions? {
        // What the root would not hand to `fetch` unchanged (help, version, subcommands,
        // `--`, a first word that is empty).
        guard PorterCommand.parsesAsFetch(arguments) else { return nil }
        // ArgumentParser refuses a word of three or more leading dashes wherever it stands
        // (even as the value -z takes whatever follows): its error, then.
        if arguments.contains(where: { $0.hasPrefix("---") }) { return nil }
        var o = FetchOptions()
        var used = [Bool](repeating: false, count: arguments.count)
        var positional: [String] = []

        /// ArgumentParser's value words: no leading dash, or exactly "" or "-".
        func isValueWord(_ a: String) -> Bool { a.isEmpty || a == "-" || a.first != "-" }

        /// The value of the option at `i` that has none attached: the first word after it
        /// not taken yet (in a cluster, each value option takes the next, in order), which
        /// must be a value word unless the option is unconditional.
        func takeValue(after i: Int, unconditional: Bool) -> String? {
            var j = i + 1
            while j < arguments.count, used[j] { j += 1 }
            guard j < arguments.count, unconditional || isValueWord(arguments[j]) else { return nil }
            used[j] = true
            return arguments[j]
        }

        func use(_ spec: Spec, attached: String?, at i: Int) -> Bool {
            switch spec.kind {
            case .fallback:
                return false
            case .flag:
                return attached == nil && spec.apply(&o, "")
            case .value, .unconditionalValue:
                guard let v = attached ?? takeValue(after: i, unconditional: spec.kind == .unconditionalValue) else { return false }
                return spec.apply(&o, v)
            }
        }

        for i in arguments.indices where !used[i] {
            let a = arguments[i]
            if isValueWord(a) {
                positional.append(a)
                continue
            }
            // A word of dashes only ("--", "---") or three leading dashes: ArgumentParser's
            // terminator or an error.
            if a.hasPrefix("---") || a.allSatisfy({ $0 == "-" }) { return nil }
            if a.hasPrefix("--") {
                // "--name=value"; "--name=" is "--name" (ArgumentParser drops an empty value).
                let body = a.dropFirst(2)
                var name = body
                var attached: String?
                if let eq = body.firstIndex(of: "=") {
                    name = body[..<eq]
                    let v = body[body.index(after: eq)...]
                    if !v.isEmpty { attached = String(v) }
                }
                guard let spec = option(long: name), use(spec, attached: attached, at: i) else { return nil }
                continue
            }
            let body = a.dropFirst()
            if let eq = body.firstIndex(of: "=") {
                // "-n=value" is the short option n with the value (empty included); any
                // longer name before "=" is an unknown single-dash option.
                let name = body[..<eq]
                guard name.count == 1, let c = name.first, let spec = option(short: c), spec.kind != .flag,
                      use(spec, attached: String(body[body.index(after: eq)...]), at: i) else { return nil }
                continue
            }
            // "-n" or a cluster "-abc": each letter an option, in order; the ones that take
            // a value take the words after the cluster, in order. No joined value ("-ofile").
            for c in body {
                guard let spec = option(short: c), use(spec, attached: nil, at: i) else { return nil }
            }
        }
        o.urls = positional
        return o
    }
}
