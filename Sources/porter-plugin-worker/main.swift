// porter-plugin-worker: runs a plugin's code away from the host. Today it probes: the host
// opens and checks the plugin file, passes the descriptor as fd 3, and this process maps
// it and calls its entry point, saying which stage it reached, so a plugin whose
// constructor or entry point crashes is refused with the stage and the signal, and never
// takes the host down (issue 13's first slice; serving loads comes next).
//   porter-plugin-worker --probe FD
import CPorterPlugin
import Foundation
import PorterCore
import PorterPlugins

func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

let args = CommandLine.arguments
guard args.count == 3, args[1] == "--probe", let fd = Int32(args[2]) else {
    FileHandle.standardError.write(Data("usage: porter-plugin-worker --probe FD\n".utf8))
    exit(64)
}
say("STAGE open")
guard let handle = dlopen("/proc/self/fd/\(fd)", RTLD_NOW | RTLD_LOCAL) else {
    say("REFUSED open " + (dlerror().map { String(cString: $0) } ?? "dlopen failed"))
    exit(0)
}
say("STAGE symbol")
guard let symbol = dlsym(handle, PORTER_PLUGIN_ENTRY_SYMBOL) else {
    say("REFUSED symbol")
    exit(0)
}
say("STAGE init")
let entry = unsafeBitCast(symbol, to: porter_plugin_entry_fn.self)
switch PluginLoader(registry: HandlerRegistry()).register(entry: entry, name: "probe") {
case .loaded(let plugin):
    say("OK " + plugin.schemes.map(\.name).joined(separator: ","))
case .refused(let d):
    say("REFUSED \(d.stage) \(d.reason)")
}
exit(0)
