import Foundation
import PorterCore
import PorterEngine

/// The challenge resolver: the credential store's proposal, the delegate's answer (or
/// the default handling), and what the answer does to the store (executor).
extension TaskDriver {
    func askChallenge(_ challenge: AuthenticationChallenge, id: UInt64) {
        var challenge = challenge
        let space = challenge.protectionSpace
        challenge.previousFailureCount = max(challenge.previousFailureCount, failureCounts[space] ?? 0)
        failureCounts[space, default: 0] += 1
        let store = session.configuration.credentialStore
        if challenge.previousFailureCount > 0, let failed = usedCredentials[space], let store,
           store.defaultCredential(for: space) == failed {
            // The stored credential was refused: drop it rather than offer it again.
            store.remove(failed, for: space)
        }
        if challenge.proposedCredential == nil, challenge.previousFailureCount == 0,
           let stored = store?.defaultCredential(for: space) {
            challenge.proposedCredential = stored
        }
        let asked = challenge
        let answer: @Sendable (ChallengeDisposition) -> Void = { disposition in
            self.executor.execute { self.settle(asked, id: id, disposition) }
        }
        logger.debug("\(asked)")
        TaskEventCenter.shared.post(.challenged(taskID: eventID, host: space.host,
                                                method: space.authenticationMethod.description,
                                                previousFailureCount: asked.previousFailureCount))
        if let delegate = session.taskDelegate(for: owner), let task = owner {
            // Its default passes connection-level challenges on to the session method.
            session.deliver { delegate.task(task, didReceive: asked, completion: answer) }
        } else if let delegate = session.delegate, asked.protectionSpace.authenticationMethod.isConnectionLevel {
            let session = self.session
            session.deliver { delegate.session(session, didReceive: asked, completion: answer) }
        } else {
            settle(asked, id: id, .performDefaultHandling)
        }
    }

    /// The answer to challenge `id`, on the executor.
    private func settle(_ asked: AuthenticationChallenge, id: UInt64, _ disposition: ChallengeDisposition) {
        assert(executor.isCurrent, "a challenge was settled off the task's executor")
        let resolved = disposition == .performDefaultHandling ? defaultDisposition(for: asked) : disposition
        // The machine replies only to a challenge the task still waits for (not one that
        // ended or was withdrawn); the store changes with the reply (`replyChallenge`).
        run(.event(.challengeDecision(id, resolved)))
    }

    /// Default handling: the proposed credential, the first time only; otherwise let
    /// the handler carry on without one.
    private func defaultDisposition(for challenge: AuthenticationChallenge) -> ChallengeDisposition {
        if let proposed = challenge.proposedCredential, challenge.previousFailureCount == 0 {
            return .useCredential(proposed)
        }
        return .performDefaultHandling
    }
}
