// An application that loads plugin files with PluginLoader alone: it never calls
// Porter.bootstrap() or PluginWorker.runIfRequested(), so it cannot be its own plugin
// worker. Copied alone into a folder (no porter-plugin-worker beside it, none on PATH),
// it has no worker at all: the boundary tests check that its plugins are refused, loudly,
// unless it asks for them in process (`--allow-in-process`).
//   PluginHostApp FOLDER [--allow-in-process]   prints one verdict a line
import Foundation
import PorterCore
import PorterPlugins

var isolation = PluginIsolation.default
isolation.defaultMode = .isolated
isolation.inProcessWithoutWorker = CommandLine.arguments.contains("--allow-in-process")
let folder = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "."
for verdict in PluginLoader(registry: HandlerRegistry(), isolation: isolation).loadAll(from: [folder]) {
    print(verdict)
}
