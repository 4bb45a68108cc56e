import Foundation
import PorterCore
import PorterEngine

/// Flow credit and the clock. Received bytes count as held from the moment the
/// machine delivers them until their consumer says it is done with them (`consumed`,
/// from any thread); past `receiveBufferLimit` the machine hears `backlog` and pauses
/// the handler, and at a quarter of it `drained`.
extension TaskDriver {
    var lowWater: Int { session.configuration.receiveBufferLimit / 4 }

    /// `count` received bytes are on their way to a consumer (any thread). True when
    /// they take the total past the flow limit (the machine then hears `backlog`).
    /// `beforeBacklog` runs first when they do, before the machine can hear of it: a
    /// producer paused there directly is paused before any resume the machine decides.
    @discardableResult
    func hold(_ count: Int, beforeBacklog: () -> Void = {}) -> Bool {
        let limit = session.configuration.receiveBufferLimit
        let held = outstanding.add(count, ordering: .sequentiallyConsistent).newValue
        guard held > limit, held - count <= limit else { return false }
        beforeBacklog()
        sendNow(.backlog)
        return true
    }

    /// A consumer is done with `count` bytes (any thread).
    func consumed(_ count: Int) {
        let left = outstanding.subtract(count, ordering: .sequentiallyConsistent).newValue
        if left <= lowWater, flowPausedMirror.load(ordering: .sequentiallyConsistent) {
            send(.drained)
        }
    }

    // MARK: - timeouts

    /// Joins the session's one timeout check (a timer per task costs a trip through
    /// libdispatch's manager thread to create, start and cancel).
    func armTimer() {
        let config = session.configuration
        idleLimit = currentRequest.timeoutInterval > 0 ? currentRequest.timeoutInterval : config.timeoutIntervalForRequest
        totalLimit = config.timeoutIntervalForResource
        session.timeouts.watch(self, tick: max(0.02, min(0.25, min(idleLimit, totalLimit) / 4)))
    }

    /// Called by the session's timeout check (any thread).
    func checkTimeouts() {
        executor.execute { self.checkTimeoutsNow() }
    }

    private func checkTimeoutsNow() {
        let now = DispatchTime.now()
        let idleFor = Double(now.uptimeNanoseconds - lastActivity.uptimeNanoseconds) / 1e9
        let elapsed = Double(now.uptimeNanoseconds - startTime.uptimeNanoseconds) / 1e9
        // The machine decides whether the time counts and whether it is a timeout.
        run(.event(.clock(idleFor: idleFor, elapsed: elapsed, idleLimit: idleLimit, totalLimit: totalLimit)))
    }
}
