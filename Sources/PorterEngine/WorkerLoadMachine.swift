/// The host's side of one plugin load running in a worker process, as a value: an event
/// goes in, the actions to perform come out; no I/O, no locks, no clocks. The shell
/// (PorterPlugins' `IsolatedHandler`) holds it under its lock and performs the actions
/// after unlocking.
///
/// Guarantees, by construction:
/// - the client hears at most one end (`deliverEnd` or `deliverDeath`), and nothing after
///   the end or after the session stopped the load;
/// - `stop` reaches the worker at most once, and only for a load it was told to start and
///   has not destroyed; its timer is scheduled with it and cancelled when the worker
///   confirms the destroy (or dies);
/// - pause and resume reach the worker only for a live, started load, and only on a change.
package struct WorkerLoadMachine: Sendable, Equatable {
    package enum Phase: Sendable, Equatable {
        /// Not yet handed to a worker.
        case idle
        /// Started in a worker; the client hears its reports.
        case live
        /// The end was reported to the client, or the session stopped the load: the client
        /// hears nothing more. `stopSent`: the worker was asked to stop.
        case silenced(stopSent: Bool)
    }

    package enum Event: Sendable, Equatable {
        /// The load was handed to a worker (its start message goes out now).
        case attached
        /// It could not be handed to one (refused, no worker, too large): the load fails.
        case attachFailed
        case pause
        case resume
        /// The session stops the load (`stopLoading`).
        case stop
        /// A report from the worker; `isEnd` for finish, fail or a served cached response.
        case report(isEnd: Bool)
        /// The worker confirmed the load is destroyed.
        case destroyed
        /// The worker died with the load in flight.
        case died
        /// The stop timer ran out.
        case stopTimerFired
    }

    package enum Action: Sendable, Equatable {
        /// Send the start message; follow it with a pause when `paused`.
        case sendStart(paused: Bool)
        case sendPause
        case sendResume
        /// Send stop and schedule the stop timer.
        case sendStopAndScheduleTimer
        case cancelStopTimer
        /// Hand the report to the client.
        case deliver
        /// Hand the end to the client (the last thing it hears).
        case deliverEnd
        /// Fail the load: its worker died (or it could not be started).
        case deliverDeath
        /// The report comes after the end or the stop: drop it.
        case drop
        /// The worker did not destroy a stopped load in time.
        case killWorker
    }

    package private(set) var phase: Phase = .idle
    package private(set) var paused = false
    /// The worker confirmed the destroy, or died.
    package private(set) var destroyed = false
    private var timerScheduled = false

    package init() {}

    /// Whether the client still hears reports.
    package var isLive: Bool { phase == .live || phase == .idle }

    package mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .attached:
            guard phase == .idle else { return [] }
            phase = .live
            return [.sendStart(paused: paused)]
        case .attachFailed:
            guard phase == .idle else { return [] }
            phase = .silenced(stopSent: false)
            return [.deliverDeath]
        case .pause, .resume:
            let wanted = event == .pause
            guard paused != wanted else { return [] }
            paused = wanted
            guard phase == .live, !destroyed else { return [] }
            return [wanted ? .sendPause : .sendResume]
        case .stop:
            switch phase {
            case .idle:
                phase = .silenced(stopSent: false)
                return []
            case .live:
                guard !destroyed else {
                    phase = .silenced(stopSent: false)
                    return []
                }
                phase = .silenced(stopSent: true)
                timerScheduled = true
                return [.sendStopAndScheduleTimer]
            case .silenced(let sent):
                // The end was reported first: the worker destroys the load on its own.
                guard !sent else { return [] }
                return []
            }
        case .report(let isEnd):
            guard phase == .live else { return [.drop] }
            if isEnd {
                phase = .silenced(stopSent: false)
                return [.deliverEnd]
            }
            return [.deliver]
        case .destroyed:
            guard !destroyed else { return [] }
            destroyed = true
            return cancelTimer()
        case .died:
            guard !destroyed || phase == .live else { return [] }
            destroyed = true
            var actions = cancelTimer()
            if phase == .live || phase == .idle {
                phase = .silenced(stopSent: false)
                actions.append(.deliverDeath)
            }
            return actions
        case .stopTimerFired:
            guard timerScheduled else { return [] }
            timerScheduled = false
            return destroyed ? [] : [.killWorker]
        }
    }

    private mutating func cancelTimer() -> [Action] {
        guard timerScheduled else { return [] }
        timerScheduled = false
        return [.cancelStopTimer]
    }
}
