import Foundation
import PorterCore

/// Loads a resource into a temporary file. The file is the delegate's (or the
/// completion handler's) to move during the call that hands it over; Porter removes
/// it afterwards. A failed or cancelled download leaves no file behind, except the
/// partial file named by resume data when resume data was produced.
public final class DownloadTask: SessionTask, @unchecked Sendable {
    enum Sink {
        /// An application's handler (on the delegate queue), or Porter's async wrapper
        /// (`inline`: on the executor).
        case completion(@Sendable (URL?, Response?, PorterError?) -> Void, inline: Bool)
        case delegate
    }

    private let sink: Sink
    // On the executor only:
    private var fd: Int32 = -1
    private var path: String?
    private var written: Int64 = 0
    private var writeFailed = false
    private let resumeFrom: ResumeData?
    /// Where resume data's partial file may be (PartialFile).
    private let partialFolders: [String]
    /// The resumed load failed before touching the partial file: hand its resume data back.
    private var keepsResumeFrom = false
    private let resumeCallback = Locked<(@Sendable (Data?) -> Void)?>(nil)

    init(session: Session, identifier: Int, request: Request, resume: ResumeData?, sink: Sink) {
        self.sink = sink
        var request = request
        var usable: ResumeData?
        let folders = PartialFile.folders(downloadDirectory: session.configuration.downloadDirectory)
        if let resume, PartialFile.usable(resume.partialFilePath, size: resume.bytesReceived, folders: folders) {
            request.resumeRange = ResumeRange(offset: resume.bytesReceived, validator: resume.validator)
            usable = resume
        }
        self.partialFolders = folders
        self.resumeFrom = usable
        super.init(session: session, identifier: identifier, request: request, asksResponseDisposition: false)
    }

    init(session: Session, adopting driver: TaskDriver, from dataTask: DataTask) {
        self.sink = .delegate
        self.resumeFrom = nil
        self.partialFolders = []
        super.init(session: session, adopting: driver, from: dataTask)
    }

    /// A background session's download, run by porterd.
    override var cancelWantsResumeData: Bool { resumeCallback.withLock { $0 != nil } }

    override package init(session: Session, remote client: any BackgroundClient, status: BackgroundTaskStatus) {
        self.sink = .delegate
        self.resumeFrom = nil
        self.partialFolders = []
        super.init(session: session, remote: client, status: status)
    }

    /// Cancels and hands back resume data (nil when the download cannot be resumed:
    /// nothing received yet, or the resource has no validator).
    public func cancel(byProducingResumeData completion: @escaping @Sendable (Data?) -> Void) {
        if let remote {
            cancelRequested.store(true, ordering: .releasing)
            return remote.cancelProducingResumeData(taskIdentifier, completion)
        }
        // The callback first: an end taken once `cancelRequested` is seen asks for it.
        resumeCallback.withLock { $0 = completion }
        cancelRequested.store(true, ordering: .releasing)
        let callback = resumeCallback
        let session = self.session
        driver.cancelProducingResumeData {
            // The task had ended: its completion already took (and answers) the callback,
            // or it was set too late for it; answer after the completion's callbacks.
            session.deliver {
                if let late = callback.withLock({ c -> (@Sendable (Data?) -> Void)? in let v = c; c = nil; return v }) { late(nil) }
            }
        }
    }

    override func sinkResponse(_ response: Response, driver: TaskDriver) {
        assert(driver.executor.isCurrent, "a task's sink ran off its executor")
        super.sinkResponse(response, driver: driver)
        written = 0
        if let resume = resumeFrom {
            // The one resume rule (ResumeCheck), as porterd applies it.
            let asked = ResumeRange(offset: resume.bytesReceived, validator: resume.validator)
            let verdict = ResumeCheck.verdict(asked: asked, knownTotal: resume.expectedTotalBytes, response: response)
            if case .mismatch(let why) = verdict {
                // Appending would make a wrong file. Fail, and leave the partial file (and
                // the resume data) as they were.
                keepsResumeFrom = true
                writeFailed = true
                driver.abort(PorterError(.resumeFailed, "\(why); the partial file is kept", url: response.url))
                return
            }
            let append = verdict == .append
            let opened = PartialFile.open(resume.partialFilePath, size: append ? resume.bytesReceived : nil,
                                          truncate: !append, folders: partialFolders)
            if let refusal = opened.refusal {
                keepsResumeFrom = true
                writeFailed = true
                driver.abort(PorterError(.resumeFailed, refusal, url: response.url))
                return
            }
            // Appended to, or (the handler started over) emptied and written from zero.
            fd = opened.fd
            path = resume.partialFilePath
            if append {
                written = resume.bytesReceived
                let total = response.expectedContentLength >= 0 ? Response.total(response.expectedContentLength, plus: written) : -1
                let offset = written
                if let delegate = session.downloadDelegate(for: self) {
                    session.deliver { delegate.downloadTask(self, didResumeAtOffset: offset, expectedTotalBytes: total) }
                }
                return
            }
        }
        if fd < 0 {
            var template = Array(((session.configuration.downloadDirectory ?? Session.temporaryDirectory) + "/.porter-download-XXXXXX").utf8CString)
            fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            if fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        }
        if fd < 0 {
            let err = errno
            path = nil
            writeFailed = true
            driver.abort(PorterError(.cannotCreateFile, "cannot create the download's temporary file",
                                     url: response.url, cause: .errno(err)))
        }
    }

    override func sinkData(_ data: Data, driver: TaskDriver) {
        assert(driver.executor.isCurrent, "a task's sink ran off its executor")
        super.sinkData(data, driver: driver)
        var handedToDelegate = false
        defer { if !handedToDelegate { driver.consumed(data.count) } }
        guard !writeFailed, fd >= 0 else { return }
        let ok = data.withUnsafeBytes { raw -> Bool in
            var offset = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                offset += n
            }
            return true
        }
        guard ok else {
            let err = errno
            writeFailed = true
            driver.abort(PorterError(.cannotWriteToFile, "cannot write the download's temporary file",
                                     url: response?.url, cause: .errno(err)))
            return
        }
        written += Int64(data.count)
        if let delegate = session.downloadDelegate(for: self) {
            // The bytes count as taken once the delegate has heard of them: a slow
            // delegate slows the transfer, and a cancel it makes from its progress
            // callback finds the transfer about where the callback said it was.
            handedToDelegate = true
            let expected = countOfBytesExpectedToReceive
            let total = written
            session.deliver {
                if !self.isCancelRequested {
                    delegate.downloadTask(self, didWriteData: Int64(data.count), totalBytesWritten: total, totalBytesExpectedToWrite: expected)
                }
                driver.consumed(data.count)
            }
        }
    }

    override func sinkComplete(_ error: PorterError?, driver: TaskDriver) {
        assert(driver.executor.isCurrent, "a task's sink ran off its executor")
        var error = error
        if writeFailed, error == nil {
            // Never hand over a file the task could not write whole.
            error = PorterError(.cannotWriteToFile, "the download could not be written", url: response?.url)
        }
        if fd >= 0 {
            if close(fd) != 0 && error == nil {
                error = PorterError(.cannotWriteToFile, "cannot finish writing the download", url: response?.url,
                                    cause: .errno(errno))
            }
            fd = -1
        }
        var resumeData: Data?
        if var failure = error {
            if let made = makeResumeData(for: failure, driver: driver) {
                resumeData = made.encoded()
                failure.resumeData = resumeData
            } else if let path, path != resumeFrom?.partialFilePath || response != nil {
                unlink(path)
            }
            if resumeData == nil, response == nil || keepsResumeFrom, let resumeFrom {
                // Failed before anything new arrived: the caller's partial file is untouched.
                resumeData = resumeFrom.encoded()
                failure.resumeData = resumeData
            }
            error = failure
        }
        super.sinkComplete(error, driver: driver)
        let resumeCallback = resumeCallback.withLock { c -> (@Sendable (Data?) -> Void)? in let v = c; c = nil; return v }
        let location = error == nil ? path.map { URL(fileURLWithPath: $0) } : nil
        let response = self.response
        let finalError = error
        let handBack = finalError?.code == .cancelled ? resumeData : nil
        // The file is the callee's only during the call that hands it over.
        switch sink {
        case .completion(let handler, let inline):
            // A delegate of the task's own (download(for:delegate:)) hears the end, as the
            // data task's does.
            if let own = delegateRoles?.task {
                session.deliver { own.task(self, didCompleteWithError: finalError) }
            }
            let complete: @Sendable () -> Void = {
                resumeCallback?(handBack)
                handler(location, response, finalError)
                if let location { unlink(location.path) }
            }
            // Behind the metrics and didCompleteWithError of any delegate (the task's own too).
            if inline, session.taskDelegate(for: self) == nil { complete() } else { session.deliver(complete) }
        case .delegate:
            let downloadDelegate = session.downloadDelegate(for: self)
            let taskDelegate = session.taskDelegate(for: self)
            session.deliver {
                resumeCallback?(handBack)
                if let location {
                    downloadDelegate?.downloadTask(self, didFinishDownloadingTo: location)
                    unlink(location.path)
                }
                taskDelegate?.task(self, didCompleteWithError: finalError)
            }
        }
    }

    private func makeResumeData(for error: PorterError, driver: TaskDriver) -> ResumeData? {
        guard let path, let response, let validator = response.validator, written > 0 else { return nil }
        switch error.code {
        case .cancelled:
            guard driver.wantsResumeData else { return nil }
        case .networkConnectionLost, .timedOut, .cannotConnectToHost, .resourceUnavailable:
            break
        default:
            return nil
        }
        let request = driver.currentRequest
        return ResumeData(url: request.url, method: request.method,
                          headers: ResumeData.shareableHeaders(request.headerFields),
                          validator: validator, bytesReceived: written,
                          expectedTotalBytes: countOfBytesExpectedToReceive, partialFilePath: path,
                          properties: request.properties.compactMapValues { $0 as? String })
    }
}
