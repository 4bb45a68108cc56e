import Foundation
import PorterCore
import PorterEngine
import Synchronization

/// What a handler's client hands the driver, in the order it was said: life-cycle
/// reports go through the state machine; metrics and upload progress do not, but keep
/// their place in line.
enum InboxItem: @unchecked Sendable {
    case report(HandlerReport)
    indirect case metrics(TransactionMetrics)
    case sent(Int64, Int64, Int64)
}

/// The client Porter hands to one handler instance. A call made on the task's executor
/// (a libcurl handler's callbacks on its loop thread) is run there and then; a call from
/// any other thread is queued and run on the executor, in order. Calls from a handler
/// that was replaced (after a redirect) or whose task ended are dropped by the machine.
final class HandlerClient: ProtocolClient, @unchecked Sendable {
    /// Strong: the driver lives at least as long as the handler that reports to it (a
    /// report after the task ended, or from a replaced handler, is dropped by the
    /// machine). Not weak: see `TaskDriver.handler`.
    private let driver: TaskDriver?
    private let generation: UInt64
    let context: SessionContext
    /// The handler this client serves (for the eager pause in `didLoad`), until the
    /// driver lets go of it (`detach`): held strongly, the cycle is broken there.
    private let handler = Locked<(any ProtocolHandler)?>(nil)

    func attach(_ made: any ProtocolHandler) { handler.withLock { $0 = made } }
    /// The driver let go of the handler (its load ended or was replaced).
    func detach() { _ = handler.withLock { h in defer { h = nil }; return h } }

    init(driver: TaskDriver, generation: UInt64, context: SessionContext) {
        self.driver = driver
        self.generation = generation
        self.context = context
    }

    private func post(_ report: HandlerReport) { driver?.hand(generation, .report(report)) }

    func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy) { post(.response(response, cacheStoragePolicy)) }
    func didLoad(_ data: Data) {
        guard let driver, !data.isEmpty else { return }
        // Data counts as held from the moment it is handed over. A producer on another
        // thread that passes the flow limit is paused here and now, ahead of the
        // machine's `backlog` decision (which always pauses, and alone decides when to
        // resume): it cannot run on while the executor catches up.
        // The pause comes before `backlog` is sent: had it come after, the executor could
        // have paused, heard `drained` and resumed first, leaving this late pause in place
        // for good (the transfer then stalled until its timeout, 1 run in 12).
        let onExecutor = driver.executor.isCurrent
        driver.hold(data.count) {
            if !onExecutor { handler.withLock { $0 }?.pauseDelivery() }
        }
        post(.data(data))
    }
    func wasRedirected(to request: Request, redirectResponse: Response) { post(.redirect(request, redirectResponse)) }
    func didFinishLoading() { post(.finish) }
    func didFail(with error: PorterError) { post(.fail(error)) }
    func didReceive(_ challenge: AuthenticationChallenge) { post(.challenge(challenge)) }
    func didCancel(_ challenge: AuthenticationChallenge) { post(.challengeWithdrawn(challenge)) }
    func cachedResponseIsValid() { post(.cachedResponseValid(serving: nil, revalidated: false)) }
    func cachedResponseIsValid(serving response: Response, revalidated: Bool) {
        post(.cachedResponseValid(serving: response, revalidated: revalidated))
    }
    func didSendBodyData(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        driver?.hand(generation, .sent(bytesSent, totalBytesSent, totalBytesExpectedToSend))
    }
    func didCollect(_ metrics: TransactionMetrics) { driver?.hand(generation, .metrics(metrics)) }
    func needNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
        guard let driver else { completion(nil); return }
        driver.executor.execute { driver.askNewBodyStream(completion) }
    }
}

/// Reports from threads other than the executor wait here; one drain per batch, so
/// reports that arrive together (response, data, finish) cost one hop.
final class Inbox: Sendable {
    private struct State {
        var items: [(UInt64, InboxItem)] = []
        var scheduled = false
    }
    /// A futex word in this object: one allocation per task (an NSLock was two more).
    private let state = Mutex(State())

    /// Queues an item; true when the caller must schedule a drain.
    func put(_ generation: UInt64, _ item: InboxItem) -> Bool {
        state.withLock { s in
            s.items.append((generation, item))
            let schedule = !s.scheduled
            s.scheduled = true
            return schedule
        }
    }

    /// Everything queued, in order; an empty batch ends the drain.
    func take() -> [(UInt64, InboxItem)] {
        state.withLock { s in
            let batch = s.items
            s.items.removeAll(keepingCapacity: true)
            if batch.isEmpty { s.scheduled = false }
            return batch
        }
    }
}

extension TaskDriver {
    /// From the handler (any thread).
    func hand(_ generation: UInt64, _ item: InboxItem) {
        if executor.isCurrent, inboxCount.load(ordering: .acquiring) == 0 {
            run(.item(generation, item))
            return
        }
        inboxCount.add(1, ordering: .releasing)
        if inbox.put(generation, item) { executor.execute { self.drainInbox() } }
    }

    private func drainInbox() {
        while true {
            let batch = inbox.take()
            if batch.isEmpty { return }
            for (gen, item) in batch {
                run(.item(gen, item))
                // Counted down only once it ran: a report made on the executor meanwhile
                // must not overtake the rest of the batch.
                inboxCount.subtract(1, ordering: .releasing)
            }
        }
    }

    /// Runs one item (inside `run`).
    func take(_ gen: UInt64, _ item: InboxItem) {
        switch item {
        case .report(let report):
            if let task = owner, task.isCancelRequested {
                switch report {
                case .finish, .fail:
                    // cancel() returned before this end was taken: the task was cancelled
                    // then (as URLSession's: once marked cancelled, it completes with the
                    // cancellation), with resume data if asked. A handler that ran ahead of
                    // the cancel's hop to this executor (a whole body in one libcurl
                    // perform) no longer turns it into a success. The machine decides: a
                    // task already over stays as it ended, and the cancel's own event,
                    // still queued, finds it over.
                    perform(machine.handle(.cancel(producingResumeData: task.cancelWantsResumeData)))
                    return
                default: break
                }
            }
            // The machine decides all of it: the stores' part of a response
            // (`recordResponse`), delivery, keeping, or dropping data (`discardData`).
            perform(machine.handle(.handler(generation: gen, report)))
        case .metrics(let m):
            guard machine.generation == gen, !machine.isFinal else { return }
            transactionMetrics.append(m)
        case .sent(let n, let total, let expected):
            guard !machine.isFinal, machine.generation == gen, let task = owner else { return }
            task.noteSent(total: total, expected: expected)
            if let delegate = session.taskDelegate(for: owner) {
                session.deliver {
                    guard !task.isCancelRequested else { return }
                    delegate.task(task, didSendBodyData: n, totalBytesSent: total, totalBytesExpectedToSend: expected)
                }
            }
        }
    }

    /// Asks the task's delegate for a fresh copy of a stream body (executor).
    func askNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
        guard let delegate = session.taskDelegate(for: owner), let task = owner else {
            completion(nil)
            return
        }
        session.deliver { delegate.task(task, needNewBodyStream: completion) }
    }
}
