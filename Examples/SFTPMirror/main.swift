import Foundation
import Porter
import PorterSFTP

// SFTPMirror: mirrors a remote sftp folder into a local one through a Porter session.
// The sftp plugin is linked in (import PorterSFTP) and registered directly — no dlopen,
// no plugin folder — through the same adapter a plugin file goes through.
//
//   SFTPMirror sftp://user[:password]@host[:port]/remote/folder/ LOCAL-FOLDER
//              [--known-hosts FILE] [--identity KEYFILE] [--insecure] [--stop-after BYTES]
//
// Files already there with the remote size are skipped. An interrupted download keeps
// its partial file and resume data (LOCAL/.NAME.porter-resume) and continues from
// there on the next run. --stop-after interrupts each download after BYTES, to show it.

func usage() -> Never {
    FileHandle.standardError.write(Data("""
        usage: SFTPMirror sftp://user@host[:port]/folder/ LOCAL-FOLDER [--known-hosts FILE] \
        [--identity KEYFILE] [--insecure] [--stop-after BYTES]\n
        """.utf8))
    exit(64)
}

struct Options: Sendable {
    var positional: [String] = []
    var knownHosts: String?
    var identity: String?
    var insecure = false
    var stopAfter: Int64?

    init(_ arguments: [String]) {
        var args = arguments.makeIterator()
        func value() -> String {
            guard let v = args.next() else { usage() }
            return v
        }
        while let a = args.next() {
            switch a {
            case "--known-hosts": knownHosts = value()
            case "--identity": identity = value()
            case "--insecure": insecure = true
            case "--stop-after":
                guard let n = Int64(value()) else { usage() }
                stopAfter = n
            default: positional.append(a)
            }
        }
    }

    func request(_ url: URL) -> Request {
        var r = Request(url: url)
        if let knownHosts { r.setProperty(knownHosts, forKey: "sftp.knownHostsFile") }
        if let identity { r.setProperty(identity, forKey: "sftp.identityFile") }
        return r
    }
}

// First, before the arguments are read: started as its own plugin worker, the program
// serves the plugin from inside this call and exits.
Porter.bootstrap()

let options = Options(Array(CommandLine.arguments.dropFirst()))
let positional = options.positional
guard positional.count == 2, var remote = URL(string: positional[0]), remote.scheme == "sftp" else { usage() }
if !remote.absoluteString.hasSuffix("/") { remote = URL(string: remote.absoluteString + "/")! }
let local = URL(fileURLWithPath: positional[1], isDirectory: true)

let verdict = PluginLoader().register(entry: SFTPPlugin.entry, name: "PorterSFTP (linked in)")
guard verdict.plugin != nil else {
    FileHandle.standardError.write(Data("cannot register sftp: \(verdict)\n".utf8))
    exit(1)
}

/// One file's download: progress every quarter, the finished file moved into place.
final class FileDownload: DownloadDelegate, @unchecked Sendable {
    let name: String
    let destination: URL
    let resumeFile: URL
    let stopAfter: Int64?
    var continuation: CheckedContinuation<Void, Never>?
    private var lastQuarter = -1
    var error: PorterError?

    init(name: String, destination: URL, resumeFile: URL, stopAfter: Int64?) {
        self.stopAfter = stopAfter
        self.name = name
        self.destination = destination
        self.resumeFile = resumeFile
    }

    func downloadTask(_ task: DownloadTask, didResumeAtOffset offset: Int64, expectedTotalBytes: Int64) {
        print("  \(name): resumed at byte \(offset) of \(expectedTotalBytes)")
    }

    func downloadTask(_ task: DownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64,
                      totalBytesExpectedToWrite: Int64) {
        if totalBytesExpectedToWrite > 0 {
            let quarter = Int(totalBytesWritten * 4 / totalBytesExpectedToWrite)
            if quarter != lastQuarter {
                lastQuarter = quarter
                print("  \(name): \(quarter * 25)%")
            }
        }
        if let stopAfter, totalBytesWritten >= stopAfter, task.state == .running {
            task.cancel(byProducingResumeData: { data in
                if let data { try? data.write(to: self.resumeFile) }
            })
        }
    }

    func downloadTask(_ task: DownloadTask, didFinishDownloadingTo location: URL) {
        do {
            try? FileManager.default.removeItem(at: destination)
            try FileManager.default.moveItem(at: location, to: destination)
            try? FileManager.default.removeItem(at: resumeFile)
        } catch {
            self.error = PorterError(.cannotMoveFile, "cannot move \(name) into place: \(error)")
        }
    }

    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        if let error {
            self.error = error
            if let data = error.resumeData { try? data.write(to: resumeFile) }
        }
        continuation?.resume()
        continuation = nil
    }
}

var config = SessionConfiguration.ephemeral
config.tlsVerificationDisabled = options.insecure
config.downloadDirectory = local.path   // partial files stay beside their final place

var failures = 0
var transferred = 0, skipped = 0

@MainActor
func mirror(_ folder: URL, into target: URL) async {
    do {
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        let (data, _) = try await Session(configuration: config).data(for: options.request(folder))
        let listing = try DirectoryListing.parse(data)
        for entry in listing.entries {
            let remoteURL = folder.appendingPathComponent(entry.name, isDirectory: entry.kind == .directory)
            let destination = target.appendingPathComponent(entry.name)
            switch entry.kind {
            case .directory:
                await mirror(remoteURL, into: destination)
            case .file:
                let existing = (try? FileManager.default.attributesOfItem(atPath: destination.path))?[.size] as? Int64
                if let size = entry.size, existing == size {
                    skipped += 1
                    continue
                }
                let resumeFile = target.appendingPathComponent(".\(entry.name).porter-resume")
                let download = FileDownload(name: remoteURL.path, destination: destination, resumeFile: resumeFile,
                                            stopAfter: options.stopAfter)
                let session = Session(configuration: config, delegate: download)
                let task = (try? Data(contentsOf: resumeFile)).map { session.downloadTask(withResumeData: $0) }
                    ?? session.downloadTask(with: options.request(remoteURL))
                await withCheckedContinuation { continuation in
                    download.continuation = continuation
                    task.resume()
                }
                session.finishTasksAndInvalidate()
                if let error = download.error {
                    failures += 1
                    print("  \(remoteURL.path): \(error.message) (\(error.code))")
                } else {
                    transferred += 1
                }
            default:
                print("  \(remoteURL.path): skipped (\(entry.kind))")
            }
        }
    } catch {
        failures += 1
        print("  \(folder.absoluteString): \(error)")
    }
}

print("mirroring \(remote.absoluteString) into \(local.path)")
await mirror(remote, into: local)
print("done: \(transferred) downloaded, \(skipped) already there, \(failures) failed")
exit(failures == 0 ? 0 : 1)
