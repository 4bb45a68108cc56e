import Foundation
import PorterCore

/// A download delegate for resume tests: cancels with resume data once `cancelAt` bytes
/// are written (when set), and records the resume offset, the finished file and the error.
public final class ResumeRecorder: DownloadDelegate, @unchecked Sendable {
    public let lock = NSLock()
    public private(set) var resumeData: Data?
    public private(set) var resumedAt: Int64?
    public private(set) var file: Data?
    public private(set) var error: PorterError?
    public let done = DispatchSemaphore(value: 0)
    let cancelAt: Int64?

    public init(cancelAt: Int64?) { self.cancelAt = cancelAt }

    public func downloadTask(_ task: DownloadTask, didWriteData w: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        if let c = cancelAt, totalBytesWritten >= c {
            task.cancel(byProducingResumeData: { d in self.lock.withLock { self.resumeData = d } })
        }
    }
    public func downloadTask(_ task: DownloadTask, didResumeAtOffset offset: Int64, expectedTotalBytes: Int64) {
        lock.withLock { resumedAt = offset }
    }
    public func downloadTask(_ task: DownloadTask, didFinishDownloadingTo location: URL) {
        lock.withLock { file = try? Data(contentsOf: location) }
    }
    public func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        lock.withLock { self.error = error }
        done.signal()
    }
}

/// Starts a helper server that prints "READY <port>" on its first line; returns the
/// process and the port (0 if it never said READY).
public func startReadyServer(_ executable: String, _ arguments: [String]) throws -> (Process, Int) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    let out = Pipe()
    p.standardOutput = out
    p.standardError = FileHandle.nullDevice
    try p.run()
    var line = Data()
    while !line.contains(UInt8(ascii: "\n")) {
        let d = out.fileHandleForReading.availableData
        if d.isEmpty { break }
        line.append(d)
    }
    let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    guard text.hasPrefix("READY "), let port = Int(text.dropFirst(6)) else { return (p, 0) }
    return (p, port)
}

/// The built `porter`: $PORTER_BIN (set by `make test`), else .build/debug/porter.
public let porterBinary: String = ProcessInfo.processInfo.environment["PORTER_BIN"]
    ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent(".build/debug/porter").path
