// porter-plugin-worker: runs a plugin's code away from the host (issue 13).
//   porter-plugin-worker --probe FD   maps the checked plugin file FD, calls its entry
//                                     point and prints what it declares (or why it is
//                                     refused), saying which stage it reached first, so a
//                                     plugin whose constructor or entry point crashes is
//                                     refused with the stage and the signal.
//   porter-plugin-worker --serve ...  confines itself, maps the plugin (fd 4) and serves
//                                     its loads over the host's socket (fd 3).
// The same code serves an application started as its own worker (PluginWorker).
import PorterPlugins

PluginWorker.main(arguments: Array(CommandLine.arguments.dropFirst()))
