import Foundation
import PorterCore
import Synchronization

/// Loads a resource into memory, or hands it to the data delegate as it arrives.
public class DataTask: SessionTask, @unchecked Sendable {
    /// Where the body goes.
    enum Sink {
        /// Collect it for a completion handler: an application's (called on the delegate
        /// queue) or Porter's own async wrapper (`inline`: called on the executor).
        case completion(@Sendable (Data?, Response?, PorterError?) -> Void, inline: Bool)
        /// Hand chunks to the session's data delegate (or drop them without one).
        case delegate
        /// Feed an `AsyncBytes` sequence; it reports consumption itself.
        case stream(ByteStreamBuffer)
    }

    private let sink: Sink
    /// A data callback was held back by `cancel()` (delegate queue).
    private let skippedData = Atomic<Bool>(false)
    private var body = Data()          // on the executor only
    private var cacheBody: Data? = nil  // body kept for the cache in delegate mode

    init(session: Session, identifier: Int, request: Request, sink: Sink, delegate: (any TaskDelegate)? = nil) {
        self.sink = sink
        var asks = false
        if case .delegate = sink { asks = session.dataDelegate != nil || delegate is any DataDelegate }
        super.init(session: session, identifier: identifier, request: request, asksResponseDisposition: asks)
        if let delegate { self.delegate = delegate }
    }

    /// A background session's upload, run by porterd.
    override package init(session: Session, remote client: any BackgroundClient, status: BackgroundTaskStatus) {
        self.sink = .delegate
        super.init(session: session, remote: client, status: status)
    }

    override func sinkResponse(_ response: Response, driver: TaskDriver) {
        assert(driver.executor.isCurrent, "a task's sink ran off its executor")
        super.sinkResponse(response, driver: driver)
        switch sink {
        case .completion:
            if response.expectedContentLength > 0 && response.expectedContentLength < 64 << 20 {
                body.reserveCapacity(Int(response.expectedContentLength))
            }
        case .delegate:
            if wantsCaching(driver) { cacheBody = Data() }
        case .stream(let buffer):
            buffer.deliver(response: response)
        }
    }

    override func sinkData(_ data: Data, driver: TaskDriver) {
        assert(driver.executor.isCurrent, "a task's sink ran off its executor")
        super.sinkData(data, driver: driver)
        switch sink {
        case .completion:
            body.append(data)
            driver.consumed(data.count)
        case .delegate:
            if cacheBody != nil {
                if cacheBody!.count + data.count <= DataTask.cacheBodyLimit { cacheBody!.append(data) } else { cacheBody = nil }
            }
            if let delegate = session.dataDelegate(for: self) {
                session.deliver {
                    if self.isCancelRequested {
                        self.skippedData.store(true, ordering: .relaxed)
                    } else {
                        delegate.dataTask(self, didReceive: data)
                    }
                    driver.consumed(data.count)
                }
            } else {
                driver.consumed(data.count)
            }
        case .stream(let buffer):
            buffer.append(data)
        }
    }

    static let cacheBodyLimit = HTTPCacheRules.maximumBodyBytes

    private func wantsCaching(_ driver: TaskDriver) -> Bool {
        session.configuration.responseCache != nil && driver.cacheCandidateStoragePolicy != .notAllowed
            && HTTPCacheRules.mayStoreResponses(to: driver.currentRequest.method)
    }

    override func sinkComplete(_ error: PorterError?, driver: TaskDriver) {
        assert(driver.executor.isCurrent, "a task's sink ran off its executor")
        super.sinkComplete(error, driver: driver)
        // A delegate of the task's own (data(for:delegate:), bytes(for:delegate:)) hears
        // the end as URLSession's does, whatever the sink; the session's hears it only
        // for tasks that report through delegates.
        if case .delegate = sink {} else if let own = delegateRoles?.task {
            session.deliver { own.task(self, didCompleteWithError: error) }
        }
        switch sink {
        case .completion(let handler, let inline):
            if error == nil, let response = self.response {
                storeInCache(response: response, data: body, driver: driver, ask: false)
            }
            let result = error == nil ? body : nil
            let response = self.response
            body = Data()
            // Porter's own wrapper completes on the executor, unless a delegate (the
            // session's or the task's own) has callbacks queued that must come first
            // (metrics, didCompleteWithError): then it completes behind them.
            if inline, session.taskDelegate(for: self) == nil { handler(result, response, error) } else { session.deliver { handler(result, response, error) } }
        case .delegate:
            if error == nil, let response = self.response, let kept = cacheBody {
                storeInCache(response: response, data: kept, driver: driver, ask: true)
            }
            cacheBody = nil
            if let delegate = session.taskDelegate(for: self) {
                let url = response?.url
                session.deliver {
                    // cancel() came after the load had ended but before all of it was handed
                    // over: what was held back makes it a cancelled task, not a short success.
                    let reported = error == nil && self.skippedData.load(ordering: .relaxed)
                        ? PorterError(.cancelled, "the task was cancelled", url: url) : error
                    delegate.task(self, didCompleteWithError: reported)
                }
            }
        case .stream(let buffer):
            buffer.finish(error)
        }
    }

    private func storeInCache(response: Response, data: Data, driver: TaskDriver, ask: Bool) {
        guard let cache = session.configuration.responseCache, wantsCaching(driver) else { return }
        let request = driver.cacheKeyRequest ?? driver.currentRequest
        let proposed = CachedResponse(response: response, data: data, storagePolicy: driver.cacheCandidateStoragePolicy)
        guard ask, let delegate = session.dataDelegate(for: self) else {
            cache.storeCachedResponse(proposed, for: request)
            return
        }
        session.deliver {
            delegate.dataTask(self, willCacheResponse: proposed) { chosen in
                if let chosen, chosen.storagePolicy != .notAllowed { cache.storeCachedResponse(chosen, for: request) }
            }
        }
    }
}

/// A data task that sends a body (from data, a file or a stream).
public final class UploadTask: DataTask, @unchecked Sendable {}
