import XCTest
import PorterTestSupport
@testable import Porter

/// What a task's delegate hears, and when, against a real nginx: the life cycle users see.
final class LifecycleTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap()
        super.setUp()
    }


    final class Recorder: TaskDelegate, @unchecked Sendable {
        let seen = Locked<[String]>([])
        func task(_ task: SessionTask, didFinishCollecting metrics: TaskMetrics) { seen.withLock { $0.append("metrics") } }
        func task(_ task: SessionTask, didCompleteWithError error: PorterError?) { seen.withLock { $0.append("complete") } }
    }

    /// data(for:delegate:) returns only after its own delegate heard the metrics and the
    /// end (they came after the return in 3 of 50 network loads and up to 8 of 100 cache
    /// hits): checked at the moment of return, 1,000 times each, without waiting.
    func testMetricsAndTheEndComeBeforeTheReturn() async throws {
        var config = SessionConfiguration.ephemeral
        config.proxies = .none
        config.responseCache = HTTPCache()
        let session = Session(configuration: config)
        for (path, kind) in [("/index.html", "network load"), ("/cache/fresh.txt", "cache hit")] {
            var late = 0
            for _ in 0..<1000 {
                let own = Recorder()
                _ = try await session.data(for: Request(url: URL(string: nginx.http + path)!), delegate: own)
                if own.seen.current != ["metrics", "complete"] { late += 1 }
            }
            XCTAssertEqual(late, 0, "\(kind)s whose delegate had not heard metrics and the end when data(for:) returned")
        }
        let own = Recorder()
        _ = try await session.download(for: Request(url: URL(string: nginx.http + "/index.html")!), delegate: own)
        XCTAssertEqual(own.seen.current, ["metrics", "complete"], "download(for:delegate:) too")
        session.finishTasksAndInvalidate()
    }
}
