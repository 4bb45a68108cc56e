// porter-plugin-worker: runs a plugin's code away from the host (issue 13).
//   porter-plugin-worker --probe FD   maps the checked plugin file FD, calls its entry
//                                     point and prints what it declares (or why it is
//                                     refused), saying which stage it reached first, so a
//                                     plugin whose constructor or entry point crashes is
//                                     refused with the stage and the signal.
//   porter-plugin-worker --serve ...  confines itself, maps the plugin (fd 4) and serves
//                                     its loads over the host's socket (fd 3).
import CPorterPlugin
import Foundation
import PorterCore
import PorterPlugins

// The answer goes to a private copy of stdout; the plugin's own printf goes nowhere (it
// could otherwise forge lines — the host checks what it reads anyway).
let answer = FileHandle(fileDescriptor: dup(1), closeOnDealloc: true)
let devnull = open("/dev/null", O_WRONLY)
if devnull >= 0 { dup2(devnull, 1); close(devnull) }
func say(_ line: String) { answer.write(Data((line + "\n").utf8)) }

let args = CommandLine.arguments
if args.count >= 2, args[1] == "--serve" {
    PluginWorkerServer.serve(arguments: Array(args.dropFirst(2)))
}
guard args.count == 3, args[1] == "--probe", let fd = Int32(args[2]) else {
    FileHandle.standardError.write(Data("usage: porter-plugin-worker --probe FD | --serve [options]\n".utf8))
    exit(64)
}
// The probe runs the plugin's constructor and entry point: confined as a worker is (no
// network, nothing inside the home folder), before either runs.
let (confined, skipped) = PluginWorkerServer.confine(pluginFD: fd)
if confined < 0 {
    say("REFUSED " + PluginWorkerServer.json(stage: "open", reason: "the probe's sandbox could not be set up",
                                             detail: skipped.isEmpty ? nil : skipped))
    exit(0)
}
say("STAGE open")
guard let handle = dlopen("/proc/self/fd/\(fd)", RTLD_NOW | RTLD_LOCAL) else {
    say("REFUSED " + PluginWorkerServer.json(stage: "open", reason: "dlopen failed", detail: dlerror().map { String(cString: $0) }))
    exit(0)
}
say("STAGE symbol")
guard let symbol = dlsym(handle, PORTER_PLUGIN_ENTRY_SYMBOL) else {
    say("REFUSED " + PluginWorkerServer.json(stage: "symbol", reason: "no '\(PORTER_PLUGIN_ENTRY_SYMBOL)' function",
                                             detail: dlerror().map { String(cString: $0) }))
    exit(0)
}
say("STAGE init")
let entry = unsafeBitCast(symbol, to: porter_plugin_entry_fn.self)
say(PluginWorkerServer.probeResult(entry: entry))
exit(0)
