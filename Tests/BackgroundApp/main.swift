// A small application for the background-session tests: it makes a background session,
// starts a download and prints its progress ("PROGRESS <task> <bytes>") until it is
// killed. The tests kill it with SIGKILL mid-download and check that porterd finishes
// the transfer and that the next process with the identifier hears of it.
//   BackgroundApp IDENTIFIER URL
//   BackgroundApp --wake MARKS IDENTIFIER URL...   set the launch command, queue, exit
//   BackgroundApp --woken MARKS                    (the launch command) append the session to MARKS
import Foundation
import Porter

func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

final class Printer: DownloadDelegate, @unchecked Sendable {
    func downloadTask(_ task: DownloadTask, didWriteData w: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        say("PROGRESS \(task.taskIdentifier) \(totalBytesWritten)")
    }
    func downloadTask(_ task: DownloadTask, didFinishDownloadingTo location: URL) {
        say("FINISHED \(task.taskIdentifier)")
    }
}

let args = CommandLine.arguments
if args.count == 3, args[1] == "--woken" {
    // Started by porterd as the session's launch command: note the session and exit
    // (without attaching, so its events keep waiting).
    let line = (ProcessInfo.processInfo.environment["PORTER_BACKGROUND_SESSION"] ?? "(none)") + "\n"
    let fd = open(args[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
    if fd >= 0 {
        _ = line.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, $0.count - 1) }
        close(fd)
    }
    exit(0)
}
if args.count >= 5, args[1] == "--wake" {
    // Sets the session's launch command to this program (`--woken MARKS`), queues the
    // downloads and lets go of the session, as an app that exits.
    guard let me = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { exit(70) }
    Porter.bootstrap()
    var config = SessionConfiguration.background(identifier: args[3])
    config.launchCommand = [me, "--woken", args[2]]
    let session = Session(configuration: config, delegate: Printer())
    for url in args[4...].compactMap({ URL(string: $0) }) {
        let task = session.downloadTask(with: url)
        task.resume()
        say("STARTED \(task.taskIdentifier)")
    }
    session.finishTasksAndInvalidate()
    exit(0)
}
guard args.count == 3, let url = URL(string: args[2]) else {
    FileHandle.standardError.write(Data("usage: BackgroundApp IDENTIFIER URL | --wake MARKS IDENTIFIER URL... | --woken MARKS\n".utf8))
    exit(64)
}
Porter.bootstrap()
let session = Session(configuration: .background(identifier: args[1]), delegate: Printer())
let task = session.downloadTask(with: url)
task.resume()
say("STARTED \(task.taskIdentifier)")
while true { sleep(60) }
