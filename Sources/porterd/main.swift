// porterd: the per-user daemon of Porter's background sessions. Started on demand by the
// first background session (or by systemd socket activation, see Support/systemd), it
// exits by itself after PORTERD_IDLE_EXIT seconds (30) with nothing to do.
import Foundation
import PorterDaemon
import PorterPlugins

// Before anything else: started as its own plugin worker (no porter-plugin-worker beside
// it), porterd serves the plugin and exits here.
PluginWorker.runIfRequested()

do {
    let daemon = try Daemon(options: try Daemon.Options.fromEnvironment())
    try daemon.run()
} catch {
    FileHandle.standardError.write(Data("porterd: \(error)\n".utf8))
    exit(1)
}
