// porterd: the per-user daemon of Porter's background sessions. Started on demand by the
// first background session (or by systemd socket activation, see Support/systemd), it
// exits by itself after PORTERD_IDLE_EXIT seconds (30) with nothing to do.
import CPorterHost
import Foundation
import PorterDaemon
import PorterPlugins

// Before anything else: started as its own plugin worker (no porter-plugin-worker beside
// it), porterd serves the plugin and exits here.
PluginWorker.runIfRequested()

// Two malloc arenas for all of porterd's threads (the journal's queue, the transfer loop,
// a reader and a writer per client, GCD's workers): glibc otherwise gives each thread that
// allocates an arena of its own, and with ten thousand queued tasks their free lists and
// fragmentation held ~1.3 MiB more (36.1 MiB peak against 37.4 with the default).
_ = porter_limit_malloc_arenas(2)

do {
    let daemon = try Daemon(options: try Daemon.Options.fromEnvironment())
    try daemon.run()
} catch {
    FileHandle.standardError.write(Data("porterd: \(error)\n".utf8))
    exit(1)
}
