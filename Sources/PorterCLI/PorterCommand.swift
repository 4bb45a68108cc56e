import ArgumentParser
import Foundation
import Logging
import Porter

/// The `porter` command. An application that registers its own handlers can run it
/// in-process with `PorterCommand.main(arguments)`.
///
/// Every command here names itself (`commandName:`): without one, ArgumentParser derives
/// the name from the type with `String(describing:)` on every parse, a protocol
/// conformance scan of every loaded image each time — 9 M instructions of the 82 M that
/// `porter data:,x` took.
public struct PorterCommand: ParsableCommand {
    public init() {}
    public static let configuration = CommandConfiguration(
        commandName: "porter",
        abstract: "Load URLs, curl-style: http, https, ftp, ftps (implicit TLS), file, data, and the schemes plugins add (see 'porter handlers').",
        discussion: """
            porter [options] URL... is 'porter fetch'; 'porter fetch --help' lists every option. The common ones, with curl's meaning: \
            -o FILE / -O (write to a file), -L (follow redirects), -i / -I (show the head), -v (show the request as sent and the response head), \
            -s / -S, -f / --fail-with-body (exit 22 on an HTTP error), -d / --data-raw / --data-urlencode / --json / -F (send a body), \
            -T FILE (upload), -X METHOD, -H 'Name: value', -u USER:PASSWORD, -b / -c (cookies), -C - (continue), -r RANGE, \
            -x PROXY, -k / --cacert, -m SECONDS, --retry N, --limit-rate RATE, -Z (parallel), -w FORMAT, -K FILE (config).

            \(PorterExit.table)
            """,
        version: Porter.version,
        subcommands: [Fetch.self, Handlers.self, Plugins.self, PluginCommand.self, Cache.self, Jobs.self, Credentials.self],
        defaultSubcommand: Fetch.self)
}

extension PorterCommand {
    /// The command line with every `-K FILE` / `--config FILE` expanded in place (curl's
    /// config files); a file that cannot be read or parsed ends the program with 64.
    public static func arguments(_ raw: [String]) -> [String] {
        do {
            return try ConfigFile.expand(raw)
        } catch {
            note("porter: \(error)")
            Foundation.exit((error as? ConfigFile.Failure)?.isReadError == true ? PorterExit.readError.rawValue : PorterExit.badCommandLine.rawValue)
        }
    }

    /// Runs the command as curl does: a bad command line (an unknown option, a missing
    /// or malformed value) exits with 2, curl's code for it, where ArgumentParser says 64.
    public static func main(_ arguments: [String]?) {
        do {
            // The common path: a command line the start-up parser reads in full, and that
            // passes fetch's checks, runs without ArgumentParser (whose parse reflects over
            // every option of `fetch`: about half of the instructions of `porter data:,x`).
            if let arguments, var options = FetchCommandLine.parse(arguments), (try? options.validate()) != nil {
                try options.run()
                return
            }
            var command: any ParsableCommand
            if let arguments, parsesAsFetch(arguments), let fetch = try? Fetch.parseAsRoot(arguments) {
                command = fetch
            } else {
                // Everything else, and a command line `fetch` refused: the root's parse
                // gives what it always gave, its error messages included.
                command = try parseAsRoot(arguments)
            }
            try command.run()
        } catch {
            if exitCode(for: error) == .validationFailure {
                note(fullMessage(for: error))
                Foundation.exit(PorterExit.badCommandLine.rawValue)
            }
            exit(withError: error)
        }
    }
}

extension PorterCommand {
    /// True when the command line can only mean `fetch`, the root's default subcommand:
    /// no argument names a subcommand or `help`, none asks the root for its help, version
    /// or completion script (nor is `--` or a short cluster with `h`), and the first is not
    /// empty. The root would hand all of it to `fetch` with the same result; parsing it as
    /// `fetch` directly skips the root's passes over every option of `fetch` (each a round
    /// of Swift reflection and protocol conformance look-ups: `porter -s -o F URL` took
    /// 31.0 M instructions to parse through the root, 25.2 M directly). Conservative: a
    /// command line this refuses goes through the root, which is always right.
    static func parsesAsFetch(_ arguments: [String]) -> Bool {
        guard let first = arguments.first, !first.isEmpty else { return false }
        return !arguments.contains { a in
            FetchCommandLine.commandWords.contains(a) || a == "--" || a == "--version" || a.hasPrefix("--help") || a.hasPrefix("--generate-completion")
                || a.hasPrefix("--experimental") || (a.hasPrefix("-") && !a.hasPrefix("--") && a.contains("h"))
        }
    }
}

/// `--plugin-path`, shared by every subcommand.
struct PluginOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Also load plugins from DIR (or the plugin file DIR), before the search path.",
                                            valueName: "DIR"))
    var pluginPath: [String] = []

    @Flag(name: .long, help: "Run plugins inside this process instead of each in a sandboxed worker process (faster; a crashing plugin then takes porter down).")
    var pluginsInProcess = false

    /// The two options as a plain value (what `FetchOptions` carries).
    var choice: PluginChoice { PluginChoice(pluginPath: pluginPath, pluginsInProcess: pluginsInProcess) }

    func bootstrap() { choice.bootstrap() }

    /// The schemes built into Porter, which no plugin may take over.
    static let builtInSchemes: Set<String> = DataHandler.schemes.union(FileHandler.schemes)
        .union(HTTPHandler.schemes).union(FTPHandler.schemes)

    static func needsPlugins(urls: [String], fromList: Bool, verbose: Bool, pluginPath: [String]) -> Bool {
        if fromList || verbose || !pluginPath.isEmpty || urls.isEmpty { return true }
        return !urls.allSatisfy { raw in
            guard let colon = raw.firstIndex(of: ":") else { return false }
            let scheme = raw[..<colon].lowercased()
            guard builtInSchemes.contains(scheme) else { return false }
            return raw[colon...].hasPrefix("://") || scheme == "data" || scheme == "file"
        }
    }
}

struct Plugins: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugins",
        abstract: "List every plugin candidate of the search path with its verdict.",
        discussion: "Search path: --plugin-path, $PORTER_PLUGIN_PATH, $XDG_DATA_HOME/porter/plugins (or ~/.local/share/porter/plugins), PREFIX/lib/porter/plugins when porter runs from PREFIX/bin, /usr/local/lib/porter/plugins, /usr/lib/porter/plugins.")

    @OptionGroup var plugins: PluginOptions

    func run() throws {
        plugins.bootstrap()
        let folders = plugins.pluginPath + PluginLoader.searchPath()
        print("search path:")
        for f in folders {
            var isDir: ObjCBool = false
            let exists = FileManager.default.fileExists(atPath: f, isDirectory: &isDir)
            print("  \(f)\(exists ? "" : " (missing)")")
        }
        let verdicts = Porter.pluginVerdicts
        if verdicts.isEmpty { print("no plugin candidates") }
        for v in verdicts {
            switch v {
            case .loaded(let p):
                print("loaded  \(p.path)")
                print("        \(p.name) \(p.version); schemes: " + p.schemes.map { s in
                    s.flagNames.isEmpty ? s.name : "\(s.name) (\(s.flagNames.joined(separator: ", ")))"
                }.joined(separator: ", "))
                print("        mode: \(p.mode)\(p.modeNote.map { " (\($0))" } ?? "")")
                print("        needs: \(p.needs.isEmpty ? "none" : p.needs.joined(separator: ", "))")
                if p.mode == .isolated, let status = PluginLoader.isolatedPlugins.last(where: { $0.path == p.path }) {
                    func list(_ paths: [String]) -> String { paths.isEmpty ? "none" : paths.joined(separator: ", ") }
                    print("        profile: \(status.network ? "network" : "no network")")
                    print("        reads: \(list(status.readPaths))")
                    print("        writes: \(list(status.writePaths))")
                    print("        sandbox: \(PluginLoader.sandboxReport(forPluginAt: p.path) ?? "unknown (its worker did not start)")")
                }
            case .refused(let d):
                print("refused \(d.path)")
                print("        stage: \(d.stage); reason: \(d.reason)")
                if let detail = d.detail { print("        detail: \(detail)") }
            }
        }
    }
}

struct Cache: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cache",
        abstract: "The persistent HTTP cache that --cache uses: 'stats' or 'clear'.",
        discussion: "It lives in $XDG_CACHE_HOME/porter/http (~/.cache/porter/http).")

    @Argument(help: "stats | clear")
    var action: String

    func validate() throws {
        guard ["stats", "clear"].contains(action) else { throw ValidationError("use 'porter cache stats' or 'porter cache clear'") }
    }

    func run() throws {
        let cache: HTTPCache
        do {
            cache = try HTTPCache(diskCapacity: 256 << 20, directory: HTTPCache.defaultDirectory())
        } catch let e as PorterError {
            FileHandle.standardError.write(Data("porter: \(e.message)\n".utf8))
            throw ExitCode(PorterExit.store.rawValue)
        }
        if action == "clear" { cache.removeAllCachedResponses() }
        let s = cache.statistics
        print("\(cache.directory ?? "-"): \(s.diskEntries) entries, \(s.diskBytes) bytes on disk\(action == "clear" ? " (cleared)" : "")")
    }
}

struct Handlers: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "handlers", abstract: "List every registered handler and where it came from.")

    @OptionGroup var plugins: PluginOptions

    func run() throws {
        plugins.bootstrap()
        var rows = [["SCHEME", "HANDLER", "ORIGIN", "VERSION"]]
        for reg in HandlerRegistry.shared.registrations {
            rows.append([reg.schemes.joined(separator: ","), reg.name, reg.origin.description, reg.version])
        }
        let widths = (0..<4).map { c in rows.map { $0[c].count }.max() ?? 0 }
        for row in rows {
            let line = row.enumerated().map { i, v in i == 3 ? v : v.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
            print(line.joined(separator: "  "))
        }
    }
}

struct Fetch: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "fetch", abstract: "Load URLs (the default command).")

    @Argument(help: "URLs to load, in order.")
    var urls: [String] = []

    @Option(name: [.customShort("o"), .long], help: "Write the body to FILE (atomically); one per URL, in order.")
    var output: [String] = []

    @Option(name: .long, help: ArgumentHelp("Queue the downloads in background session NAME and return at once: porterd runs them (surviving this program, crashes and reboots) and puts each at its -o FILE. See 'porter jobs'.", valueName: "NAME"))
    var background: String?

    @Flag(name: [.customShort("i"), .long], help: "Print the response head before the body.")
    var include = false

    @Flag(name: [.customShort("I"), .long], help: "Send HEAD and print only the response head.")
    var head = false

    @Option(name: [.customShort("X"), .long], help: "Request method.")
    var request: String?

    @Option(name: [.customShort("H"), .long], help: "Add a header, 'Name: value' ('Name:' removes it).")
    var header: [String] = []

    @Option(name: [.customShort("d"), .long], help: "Send DATA as the body (POST); '@FILE' reads a file. Repeats join with '&'.")
    var data: [String] = []

    @Option(name: .long, help: "Send DATA as the body unchanged; '@FILE' reads a file.")
    var dataBinary: String?

    @Option(name: [.customShort("T"), .long], help: "Upload FILE to the URL (a URL ending in '/' gets the file's name).")
    var uploadFile: String?

    @Option(name: [.customShort("u"), .long], help: "USER:PASSWORD for authentication challenges.")
    var user: String?

    @Flag(name: [.customShort("n"), .long], help: "Log in with ~/.netrc (refused if others can read it).")
    var netrc = false

    @Option(name: .long, help: "Log in with this netrc FILE.")
    var netrcFile: String?

    @Option(name: .long, help: "HOST:PORT:ADDRESS[,ADDRESS]: connect to ADDRESS for HOST on PORT, ahead of DNS (repeatable).")
    var resolve: [String] = []

    @Option(name: [.customShort("b"), .long], help: "Send cookies: 'name=value[; n2=v2]' as given, or the cookies of a Netscape cookies.txt FILE.")
    var cookie: String?

    @Flag(name: .long, help: "Use the persistent HTTP cache ($XDG_CACHE_HOME/porter/http); off by default, as with curl.")
    var cache = false

    @Flag(name: .long, help: "Keep cookies in the persistent default store ($XDG_DATA_HOME/porter/cookies.sqlite) across runs.")
    var cookieStore = false

    @Option(name: [.customShort("c"), .customLong("cookie-jar")], help: "Write every cookie to FILE (Netscape format, mode 0600) at the end.")
    var cookieJar: String?

    @Option(name: .long, help: "Keep HSTS hosts in FILE (curl's HSTS cache format): http:// URLs of hosts that asked for https only load over https. '': in memory for this run.")
    var hsts: String?

    @Option(name: .customLong("alt-svc"), help: "Keep alternative services (Alt-Svc) in FILE (curl's alt-svc cache format) and connect to them.")
    var altSvc: String?

    @Option(name: .long, help: "Trust the CA certificates in this PEM file (instead of the system's).")
    var cacert: String?

    @Flag(name: [.customShort("k"), .long], help: "Do not verify TLS certificates (explicit only; prefer --cacert).")
    var insecure = false

    @Option(name: .long, help: "Accept only this public key: sha256//BASE64 (';'-separated) or a PEM/DER key file.")
    var pinnedpubkey: String?

    @Flag(name: .long, help: "Do not follow redirects (the default, as in curl; overrides -L).")
    var noLocation = false

    @Option(name: [.customShort("C"), .customLong("continue-at")], help: "'-' continues a download into an existing -o FILE.")
    var continueAt: String?

    @Flag(name: .long, help: "Ask for a compressed body and decode it (Porter always does; accepted for curl users).")
    var compressed = false

    @Option(name: [.customShort("x"), .long], help: "Use this proxy for every URL (http://, https://, socks5://, socks5h://).")
    var proxy: String?

    @Flag(name: .customLong("http1.1"), help: "Use HTTP/1.1 only.")
    var http11 = false

    @Flag(name: .customLong("http2"), help: "Use HTTP/2 where the server offers it (the default).")
    var http2 = false

    @Option(name: .long, help: "Client certificate (PEM) for TLS servers that ask.")
    var cert: String?

    @Option(name: .long, help: "Private key (PEM) of --cert.")
    var key: String?

    @Option(name: .long, help: "Give up after SECONDS in total.")
    var maxTime: Double?

    @Flag(name: .customLong("wait-for-connectivity"), help: "With no route to the host, wait for the network to come up (until --max-time) instead of failing (URLSession's waitsForConnectivity).")
    var waitForConnectivity = false

    @Option(name: .long, help: "With -L, follow at most N redirects (-1: no limit).")
    var maxRedirs: Int?

    @Flag(name: [.customShort("s"), .long], help: "No progress bar and no error messages.")
    var silent = false

    @Flag(name: [.customShort("v"), .long], help: "Print the life cycle of each task on stderr.")
    var verbose = false

    @Flag(name: [.customShort("f"), .long], help: "Fail (exit 22) with no body on an HTTP status of 400 or more.")
    var fail = false

    @Option(name: [.customShort("w"), .long], help: "After each URL, print FORMAT with curl's %{variables} (%{http_code}, %{url_effective}, %{time_total}, ... and %{json}); 'json' alone prints one JSON object.")
    var writeOut: String?

    @Option(name: .long, help: "Read URLs from FILE, one per line (with the ones given as arguments).")
    var urlList: String?

    // curl's everyday flags, with curl's meaning.
    @Flag(name: [.customShort("L"), .long], help: "Follow redirects (at most --max-redirs, 50 unless set); without -L a 3xx is the answer, as in curl.")
    var location = false

    @Flag(name: [.customShort("S"), .customLong("show-error")], help: "With -s, still print errors (Porter's -s keeps errors off; -S brings them back).")
    var showError = false

    @Option(name: [.customShort("A"), .customLong("user-agent")], help: "Send this User-Agent.")
    var userAgent: String?

    @Option(name: [.customShort("e"), .long], help: "Send this Referer.")
    var referer: String?

    @Flag(name: [.customShort("G"), .long], help: "Put the -d data in the URL's query and send GET.")
    var get = false

    @Option(name: [.customShort("r"), .long], help: "Ask for a byte RANGE (e.g. 0-499, 500-, -100).")
    var range: String?

    @Option(name: .customShort("m"), help: "Same as --max-time.")
    var maxTimeShort: Double?

    @Flag(name: [.customShort("O"), .customLong("remote-name")], help: "Write to a file named like the URL's last path component.")
    var remoteName = false

    @Flag(name: [.customShort("J"), .customLong("remote-header-name")], help: "With -O, use the server's Content-Disposition file name (its last component only).")
    var remoteHeaderName = false

    @Option(name: [.customShort("D"), .customLong("dump-header")], help: "Write the response heads to FILE ('-': stdout).")
    var dumpHeader: String?

    @Option(name: [.customShort("F"), .long], help: "Multipart form field 'name=value', 'name=@FILE' (with ';type=MIME' and ';filename=NAME'), or 'name=<FILE' (contents as a value).")
    var form: [String] = []

    @Option(name: .long, help: "Send JSON (POST, Content-Type and Accept application/json); '@FILE' reads a file.")
    var json: [String] = []

    @Option(name: .long, help: "Send 'content', 'name=content', '=content', '@file' or 'name@file', URL-encoded (POST, or the query with -G).")
    var dataUrlencode: [String] = []

    @Flag(name: .long, help: "With -u: Digest only (challenge-driven).")
    var digest = false

    @Flag(name: .long, help: "With -u: Basic, sent with the first request (the default).")
    var basic = false

    @Flag(name: .long, help: "With -u: whichever method the server asks for, Negotiate and NTLM included (challenge-driven).")
    var anyauth = false

    @Flag(name: .long, help: "With -u: NTLM only (challenge-driven).")
    var ntlm = false

    @Flag(name: .long, help: "Negotiate (SPNEGO) with your Kerberos tickets; curl's '--negotiate -u :' (challenge-driven).")
    var negotiate = false

    @Option(name: .long, help: "Retry transient failures (timeouts, connection failures, 408, 429, 500, 502, 503, 504) up to N times.")
    var retry: Int = 0

    @Option(name: .long, help: "Download at most RATE bytes per second (suffixes k, m, g).")
    var limitRate: String?

    @Option(name: .long, help: "Give up connecting after SECONDS.")
    var connectTimeout: Double?

    @Flag(name: .long, help: "Create the folders of -o FILE that are missing.")
    var createDirs = false

    @Option(name: [.customShort("K"), .long], help: "Read options from FILE (curl's config syntax), as if given before the others.")
    var config: String?

    @Option(name: .long, help: "How many URLs to load at once (with --url-list).")
    var concurrency: Int = 1

    @OptionGroup(title: "curl options") var curl: CurlFlags

    /// ArgumentParser's path: the parsed command becomes the same `FetchOptions` the
    /// start-up parser makes, and both run the same checks and the same run.
    func validate() throws {
        var options = FetchOptions(self)
        try options.validate()
    }

    @OptionGroup var plugins: PluginOptions

    func run() throws {
        var options = FetchOptions(self)
        try options.validate()
        try options.run()
    }
}
