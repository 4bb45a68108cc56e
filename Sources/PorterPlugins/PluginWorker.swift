import CPorterPlugin
import Foundation
import Logging
import PorterCore
import PorterIPC
import PorterStorage

/// The plugin worker program, and which executable runs it.
///
/// Two executables can be a worker, and both run the same code (`main(arguments:)`):
/// - `porter-plugin-worker`, the dedicated program (installed beside `porter`, built by
///   `swift build` beside every executable of this package);
/// - the application itself, started as `/proc/self/exe --porter-plugin-worker …` (one
///   binary, as browsers do): an application built with plain `swift build` in a package of
///   its own has no `porter-plugin-worker` beside it, and still gets isolated plugins.
///   `Porter.bootstrap()` calls `runIfRequested()` before anything else, so in a worker
///   it serves the plugin and exits, never returning into the application's code.
///
/// The application's part: **call `Porter.bootstrap()` first in `main`** (or
/// `PluginWorker.runIfRequested()`, when it uses `PluginLoader` without the umbrella),
/// before it reads its arguments, prints, opens files or starts threads. Whatever runs
/// before that call runs in every worker too (outside the sandbox, which the worker sets
/// up before it maps the plugin), and an argument parser that runs first would refuse the
/// worker's arguments — the plugin then fails loudly (its worker exited), never silently.
/// What runs before `main` in any program, the worker included (C constructors of linked
/// libraries, the Swift runtime's set-up), runs there as well; Swift's own globals are
/// lazy and run only when used.
///
/// Which one: `$PORTER_PLUGIN_WORKER`, else `porter-plugin-worker` beside the program,
/// else the program itself if it has called `runIfRequested()` (so it is known to reach
/// the check), else `porter-plugin-worker` on PATH; else none, and plugin files are then
/// refused rather than run in process (unless `PluginIsolation.inProcessWithoutWorker`).
public enum PluginWorker {
    /// `argv[1]` of an application started as its own plugin worker.
    public static let selfMarker = "--porter-plugin-worker"
    /// How a worker that is the application itself is started: the very image this
    /// process runs (even if the file was replaced or removed since).
    static let selfExecutable = "/proc/self/exe"

    /// Whether this process has passed `runIfRequested()`: only then can it be its own
    /// worker (a program that never makes the check would run its own `main` instead).
    private static let checked = Locked(false)

    /// In a process started as a plugin worker (`argv[1] == selfMarker`), runs the worker
    /// and exits; otherwise returns at once, and from then on this program may serve as
    /// its own plugin worker. `Porter.bootstrap()` calls it first.
    public static func runIfRequested(arguments: [String] = CommandLine.arguments) {
        if arguments.count >= 2, arguments[1] == selfMarker {
            main(arguments: Array(arguments.dropFirst(2)))
        }
        checked.withLock { $0 = true }
    }

    /// True once `runIfRequested()` returned in this process.
    public static var canServeAsWorker: Bool { checked.current }

    /// A program that runs workers: its path and the arguments before the worker's own.
    struct Program: Sendable, Equatable {
        var path: String
        /// True when it is this application itself.
        var isSelf: Bool
        /// `argv` up to the worker's arguments (`--probe FD` or `--serve …`).
        var leadingArguments: [String] {
            isSelf ? ["porter-plugin-worker", PluginWorker.selfMarker] : ["porter-plugin-worker"]
        }
    }

    /// The worker program to start, or nil when there is none (see the type's note).
    static func program(environment env: [String: String] = ProcessInfo.processInfo.environment) -> Program? {
        if let p = env["PORTER_PLUGIN_WORKER"], access(p, X_OK) == 0 { return Program(path: p, isSelf: false) }
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            let beside = (exe as NSString).deletingLastPathComponent + "/porter-plugin-worker"
            if access(beside, X_OK) == 0 { return Program(path: beside, isSelf: false) }
        }
        if canServeAsWorker { return Program(path: selfExecutable, isSelf: true) }
        if let onPath = HelperProgram.find("porter-plugin-worker", override: "PORTER_PLUGIN_WORKER", environment: env) {
            return Program(path: onPath, isSelf: false)
        }
        return nil
    }

    /// The worker program: `--probe FD` (map the checked plugin file FD, call its entry
    /// point and print what it declares, or why it is refused, saying which stage it
    /// reached first) or `--serve …` (confine itself, map the plugin, fd 4, and serve its
    /// loads over the host's socket, fd 3). Never returns.
    public static func main(arguments args: [String]) -> Never {
        // The answer goes to a private copy of stdout; the plugin's own printf goes nowhere
        // (it could otherwise forge lines — the host checks what it reads anyway).
        let answer = FileHandle(fileDescriptor: dup(1), closeOnDealloc: true)
        let devnull = open("/dev/null", O_WRONLY)
        if devnull >= 0 { dup2(devnull, 1); close(devnull) }
        func say(_ line: String) { answer.write(Data((line + "\n").utf8)) }

        if args.first == "--serve" {
            PluginWorkerServer.serve(arguments: Array(args.dropFirst()))
        }
        guard args.count == 2, args[0] == "--probe", let fd = Int32(args[1]) else {
            FileHandle.standardError.write(Data("usage: porter-plugin-worker --probe FD | --serve [options]\n".utf8))
            _exit(64)
        }
        // The probe runs the plugin's constructor and entry point: confined as a worker is
        // (no network, nothing inside the home folder), before either runs.
        let (confined, skipped) = PluginWorkerServer.confine(pluginFD: fd)
        if confined < 0 {
            say("REFUSED " + PluginWorkerServer.json(stage: "open", reason: "the probe's sandbox could not be set up",
                                                     detail: skipped.isEmpty ? nil : skipped))
            _exit(0)
        }
        say("STAGE open")
        guard let handle = dlopen("/proc/self/fd/\(fd)", RTLD_NOW | RTLD_LOCAL) else {
            say("REFUSED " + PluginWorkerServer.json(stage: "open", reason: "dlopen failed",
                                                     detail: dlerror().map { String(cString: $0) }))
            _exit(0)
        }
        say("STAGE symbol")
        guard let symbol = dlsym(handle, PORTER_PLUGIN_ENTRY_SYMBOL) else {
            say("REFUSED " + PluginWorkerServer.json(stage: "symbol", reason: "no '\(PORTER_PLUGIN_ENTRY_SYMBOL)' function",
                                                     detail: dlerror().map { String(cString: $0) }))
            _exit(0)
        }
        say("STAGE init")
        let entry = unsafeBitCast(symbol, to: porter_plugin_entry_fn.self)
        say(PluginWorkerServer.probeResult(entry: entry))
        _exit(0)
    }
}
