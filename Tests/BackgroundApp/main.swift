// A small application for the background-session tests: it makes a background session,
// starts a download and prints its progress ("PROGRESS <task> <bytes>") until it is
// killed. The tests kill it with SIGKILL mid-download and check that porterd finishes
// the transfer and that the next process with the identifier hears of it.
//   BackgroundApp IDENTIFIER URL
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
guard args.count == 3, let url = URL(string: args[2]) else {
    FileHandle.standardError.write(Data("usage: BackgroundApp IDENTIFIER URL\n".utf8))
    exit(64)
}
Porter.bootstrap()
let session = Session(configuration: .background(identifier: args[1]), delegate: Printer())
let task = session.downloadTask(with: url)
task.resume()
say("STARTED \(task.taskIdentifier)")
while true { sleep(60) }
