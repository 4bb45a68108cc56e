import Foundation
import PorterCore

/// Session-level events. All delegate methods of a session are called on its
/// delegate queue, one at a time; the calls for one task arrive in order.
public protocol SessionDelegate: AnyObject, Sendable {
    func session(_ session: Session, didBecomeInvalidWithError error: PorterError?)
    /// Connection-level challenges (server trust, client certificate, NTLM, Negotiate)
    /// that the task delegate passed on. Default: `.performDefaultHandling`.
    func session(_ session: Session, didReceive challenge: AuthenticationChallenge,
                 completion: @escaping @Sendable (ChallengeDisposition) -> Void)
    func session(_ session: Session, didCreateTask task: SessionTask)
    /// A background session delivered every event porterd held for it when it connected
    /// (the tasks that finished while no process held the session).
    func sessionDidFinishEvents(forBackgroundSession session: Session)
}

public protocol TaskDelegate: SessionDelegate {
    /// Follow (`completion(newRequest)`, possibly changed) or refuse (`completion(nil)`:
    /// the redirect response becomes the task's response). Default: follow.
    func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
              completion: @escaping @Sendable (Request?) -> Void)
    /// Default: connection-level methods go to the session delegate, others get
    /// `.performDefaultHandling`.
    func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
              completion: @escaping @Sendable (ChallengeDisposition) -> Void)
    /// A fresh stream body (a streamed upload's first, or after a redirect / retry).
    func task(_ task: SessionTask, needNewBodyStream completion: @escaping @Sendable ((any BodyStream)?) -> Void)
    func task(_ task: SessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64)
    func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics)
    /// Exactly once per task. A resumable download's error carries `resumeData`.
    func task(_ task: SessionTask, didCompleteWithError error: PorterError?)
    /// The task found no route to its host and waits for the network
    /// (`SessionConfiguration.waitsForConnectivity`); at most once per task.
    func taskIsWaitingForConnectivity(_ task: SessionTask)
}

public protocol DataDelegate: TaskDelegate {
    /// Default: `.allow`.
    func dataTask(_ task: DataTask, didReceive response: Response,
                  completion: @escaping @Sendable (ResponseDisposition) -> Void)
    func dataTask(_ task: DataTask, didBecome downloadTask: DownloadTask)
    func dataTask(_ task: DataTask, didReceive data: Data)
    /// Change or refuse (nil) what is stored. Default: store as proposed.
    func dataTask(_ task: DataTask, willCacheResponse proposed: CachedResponse,
                  completion: @escaping @Sendable (CachedResponse?) -> Void)
}

public protocol DownloadDelegate: TaskDelegate {
    func downloadTask(_ task: DownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64,
                      totalBytesExpectedToWrite: Int64)
    func downloadTask(_ task: DownloadTask, didResumeAtOffset offset: Int64, expectedTotalBytes: Int64)
    /// The file at `location` is removed when this returns: move or open it here.
    func downloadTask(_ task: DownloadTask, didFinishDownloadingTo location: URL)
}

extension SessionDelegate {
    public func session(_ session: Session, didBecomeInvalidWithError error: PorterError?) {}
    public func session(_ session: Session, didReceive challenge: AuthenticationChallenge,
                        completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        completion(.performDefaultHandling)
    }
    public func session(_ session: Session, didCreateTask task: SessionTask) {}
    public func sessionDidFinishEvents(forBackgroundSession session: Session) {}
}

extension TaskDelegate {
    public func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
                     completion: @escaping @Sendable (Request?) -> Void) {
        completion(newRequest)
    }
    public func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                     completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        if challenge.protectionSpace.authenticationMethod.isConnectionLevel {
            session(task.session, didReceive: challenge, completion: completion)
        } else {
            completion(.performDefaultHandling)
        }
    }
    public func task(_ task: SessionTask, needNewBodyStream completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
        completion(nil)
    }
    public func task(_ task: SessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {}
    public func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {}
    public func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {}
    public func taskIsWaitingForConnectivity(_ task: SessionTask) {}
}

extension DataDelegate {
    public func dataTask(_ task: DataTask, didReceive response: Response,
                         completion: @escaping @Sendable (ResponseDisposition) -> Void) {
        completion(.allow)
    }
    public func dataTask(_ task: DataTask, didBecome downloadTask: DownloadTask) {}
    public func dataTask(_ task: DataTask, didReceive data: Data) {}
    public func dataTask(_ task: DataTask, willCacheResponse proposed: CachedResponse,
                         completion: @escaping @Sendable (CachedResponse?) -> Void) {
        completion(proposed)
    }
}

extension DownloadDelegate {
    public func downloadTask(_ task: DownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64,
                             totalBytesExpectedToWrite: Int64) {}
    public func downloadTask(_ task: DownloadTask, didResumeAtOffset offset: Int64, expectedTotalBytes: Int64) {}
}
