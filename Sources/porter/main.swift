import CPorterHost
import PorterCLI
import PorterPlugins

// Buffers above 384 KiB (the 512 KiB staging chunks of large bodies) always come from
// mmap and go back to the system when freed. glibc otherwise raises its mmap threshold
// after the first such free and serves them from a heap that fragments across the loop
// and delivery threads: the CLI's peak memory on a 1 GiB download then wandered between
// 27 and 40 MiB from run to run instead of staying near 29 MiB. (At 128 KiB, libcurl's
// 256 KiB receive buffers were mmapped too, which cost small requests a fifth of their
// speed.)
_ = porter_fix_mmap_threshold(384 * 1024)

// Before the arguments are parsed: started as its own plugin worker (when no
// porter-plugin-worker is installed beside it), porter serves the plugin and exits here.
PluginWorker.runIfRequested()

PorterCommand.main(PorterCommand.arguments(Array(CommandLine.arguments.dropFirst())))
