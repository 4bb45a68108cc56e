import Foundation
import PorterCore
import PorterSession

/// The delegate of each task `PorterTransport` starts. It gives Porter a fresh pass over
/// the request body when one must be sent again, and stops the body's producer when the
/// task ends (told by the metrics, which Porter reports for every task as it ends, before
/// its completion; a `bytes(for:)` task reports no completion to a delegate). Everything
/// else goes to the session's delegate, as if the task had none of its own.
final class TransportTaskDelegate: TaskDelegate, @unchecked Sendable {
    private let source: RequestBodySource?

    init(source: RequestBodySource?) {
        self.source = source
    }

    private func sessionTaskDelegate(_ task: SessionTask) -> (any TaskDelegate)? {
        task.session.delegate as? any TaskDelegate
    }

    func session(_ session: Session, didReceive challenge: AuthenticationChallenge,
                 completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        if let delegate = session.delegate {
            delegate.session(session, didReceive: challenge, completion: completion)
        } else {
            completion(.performDefaultHandling)
        }
    }

    func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
              completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        if let delegate = sessionTaskDelegate(task) {
            delegate.task(task, didReceive: challenge, completion: completion)
        } else if challenge.protectionSpace.authenticationMethod.isConnectionLevel {
            session(task.session, didReceive: challenge, completion: completion)
        } else {
            completion(.performDefaultHandling)
        }
    }

    func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
              completion: @escaping @Sendable (Request?) -> Void) {
        if let delegate = sessionTaskDelegate(task) {
            delegate.task(task, willPerformRedirection: response, newRequest: newRequest, completion: completion)
        } else {
            completion(newRequest)
        }
    }

    func task(_ task: SessionTask, needNewBodyStream completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
        if let pipe = source?.makePipe() {
            completion(pipe)
        } else if let delegate = sessionTaskDelegate(task) {
            delegate.task(task, needNewBodyStream: completion)
        } else {
            completion(nil)
        }
    }

    func task(_ task: SessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        sessionTaskDelegate(task)?.task(task, didSendBodyData: bytesSent, totalBytesSent: totalBytesSent,
                                        totalBytesExpectedToSend: totalBytesExpectedToSend)
    }

    func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) {
        source?.close()
        sessionTaskDelegate(task)?.task(task, didFinishCollecting: metrics)
    }

    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        source?.close()
        sessionTaskDelegate(task)?.task(task, didCompleteWithError: error)
    }
}
