import CPorterIPC
import Foundation
import Porter
import PorterBackground
import PorterCore
import PorterIPC
import PorterSession

// Logins a server asks for while a job runs: the credential store, else the app holding
// the session, else a timed-out login (the scheduler turns it into the job's error).
extension Daemon {
    /// A login waiting for an app's answer, for one attempt of one job.
    struct PendingChallenge {
        var transfer: Transfer
        var attempt: Int
        var info: BackgroundChallenge
        var timer: DispatchWorkItem
        var completion: @Sendable (ChallengeDisposition) -> Void
    }

    /// How long a login waits for an app to answer when the credential store has none
    /// (`PORTERD_CHALLENGE_WAIT` seconds, default 300).
    var challengeWait: Double { ProcessInfo.processInfo.environment["PORTERD_CHALLENGE_WAIT"].flatMap(Double.init) ?? 300 }

    public func session(_ session: Session, didReceive challenge: AuthenticationChallenge,
                        completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        // Server trust and client certificates: the system's CAs and the configuration
        // only; never an app's say-so from here.
        completion(.performDefaultHandling)
    }

    /// A login: the credential store's default for the space; else the app holding the
    /// session is asked; else the task waits `challengeWait` for an app to attach (and
    /// answer), then fails with userAuthenticationRequired.
    public func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
                     completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        let space = challenge.protectionSpace
        guard let t = transfer(task), !space.authenticationMethod.isConnectionLevel else { return completion(.performDefaultHandling) }
        if challenge.previousFailureCount == 0, let stored = task.session.configuration.credentialStore?.defaultCredential(for: space) {
            return completion(.useCredential(stored))
        }
        let id = nextChallenge
        nextChallenge += 1
        let info = BackgroundChallenge(challenge)
        let timer = DispatchWorkItem { [weak self] in
            guard let self, let p = self.pendingChallenges.removeValue(forKey: id) else { return }
            self.send(.loginTimedOut(p.transfer.row.id, attempt: p.attempt))
            self.note("task \(p.transfer.row.id): no app answered the login for \(space) in \(Int(self.challengeWait)) s")
            p.completion(.cancelAuthenticationChallenge)
        }
        pendingChallenges[id] = PendingChallenge(transfer: t, attempt: t.attempt, info: info, timer: timer, completion: completion)
        queue.asyncAfter(deadline: .now() + challengeWait, execute: timer)
        holders[t.row.session]?.send(.challenge(task: t.row.id, id: id, info))
    }
}
