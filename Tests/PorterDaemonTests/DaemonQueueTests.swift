import Foundation
import MetricsTestKit
import Porter
import PorterIPC
import PorterTestSupport
import XCTest

/// porterd's queue (issue 23, issue 25): the queue is the journal, so what porterd keeps
/// in memory per waiting task is bounded; and an app sees porterd's queue depth as a gauge.
final class DaemonQueueTests: DaemonTestCase {
    override func setUpWithError() throws {
        try super.setUpWithError()
        daemonHome.install()
    }

    /// porterd's resident memory, in KiB, from /proc.
    private func residentKiB(_ pid: pid_t) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first.flatMap { Int($0) }
        }
        return nil
    }

    /// Queues `count` downloads held back by an earliest begin a day away, in batches (the
    /// client reads every answer before the next batch, so no backlog of replies sits in
    /// porterd), and resumes each; returns when porterd has handled all of it.
    private func queue(_ count: Int, on c: Channel, from first: Int) throws {
        let later = Date().timeIntervalSince1970 + 24 * 3600
        var done = 0
        while done < count {
            let batch = min(100, count - done)
            for i in 0..<batch {
                var spec = BackgroundTaskSpec(kind: .download, url: URL(string: "http://127.0.0.1:9/file-\(first + done + i).bin")!,
                                              headers: [["Accept", "*/*"]], taskDescription: "held back")
                spec.earliestBegin = later
                try c.send(message: BackgroundClientMessage.enqueue(reference: first + done + i, spec: spec))
            }
            var ids: [Int] = []
            while ids.count < batch {
                switch try BackgroundProtocol.receive(on: c) {
                case .enqueued(_, let task): ids.append(task.id)
                case .refused(_, let message): throw PorterError(.unknown, "porterd refused a task: \(message)")
                default: continue
                }
            }
            for id in ids { try c.send(message: BackgroundClientMessage.control(task: id, .resume)) }
            try c.send(message: BackgroundClientMessage.ping(reference: first + done))
            loop: while true {
                if case .pong(first + done) = try BackgroundProtocol.receive(on: c) { break loop }
            }
            done += batch
        }
    }

    /// What porterd keeps per queued task is bounded: its resident memory grows by less
    /// than 1.5 KiB per task from 1,000 to 5,000 tasks waiting (each resumed, held back
    /// by its earliest begin). A task's URL, header fields, description and state stay in
    /// the journal until it starts; before, porterd kept every row, a transfer object and
    /// a timer per task (~4 KiB each).
    func testPorterdsMemoryPerQueuedTaskIsBounded() throws {
        let starter = Session(configuration: .background(identifier: "starter"))
        defer { starter.finishTasksAndInvalidate() }
        let pid = try XCTUnwrap(daemonHome.daemonPID, "porterd runs")
        let c = try Channel.connect(path: home + "/run/porter/porterd.sock")
        defer { c.close() }
        _ = try c.greet(BackgroundProtocol.hello)
        try c.send(message: BackgroundClientMessage.attach(session: "queue", launchCommand: nil))
        try queue(1000, on: c, from: 0)
        let atFirst = try XCTUnwrap(residentKiB(pid))
        try queue(4000, on: c, from: 1000)
        let atLast = try XCTUnwrap(residentKiB(pid))
        let perTask = Double(atLast - atFirst) / 4000
        print("porterd: \(atFirst) KiB with 1,000 queued tasks, \(atLast) KiB with 5,000: \(perTask) KiB per task")
        XCTAssertLessThan(perTask, 1.5, "porterd grew from \(atFirst) KiB to \(atLast) KiB: \(perTask) KiB per queued task")
        // They are all there, and all wait (none started: the scheduler holds them).
        let listed = try list("queue", on: c)
        XCTAssertEqual(listed.count, 5000)
        XCTAssertTrue(listed.allSatisfy { $0.state == "running" && $0.received == 0 }, "\(listed.prefix(3))")
        XCTAssertEqual(listed.first?.taskDescription, "held back")
    }

    private func list(_ session: String, on c: Channel) throws -> [BackgroundTaskSnapshot] {
        try c.send(message: BackgroundClientMessage.list(session: nil, reference: -1))
        var all: [BackgroundTaskSnapshot] = []
        while true {
            switch try BackgroundProtocol.receive(on: c) {
            case .taskPage(-1, let page): all += page
            case .tasks(-1, let last): return all + last
            default: continue
            }
        }
    }

    private func gauge(_ metrics: TestMetrics, _ session: String) -> Double? {
        (try? metrics.expectGauge(PorterMetricLabels.daemonQueueDepth, [("session", session)]))?.lastValue
    }

    /// `porter_daemon_queue_depth` follows porterd's queue of a background session, as
    /// porterd reports it: three tasks resumed and held back by their earliest begin → 3;
    /// cancelled (they end) → 0.
    func testTheQueueDepthGaugeFollowsPorterdsQueue() throws {
        let metrics = TestMetrics()
        let id = "depth-\(UUID().uuidString.prefix(6))"
        var configuration = SessionConfiguration.background(identifier: id)
        configuration.taskObserver = PorterInstrumentation(metricsFactory: metrics)
        let recorder = BackgroundRecorder()
        let session = Session(configuration: configuration, delegate: recorder)
        defer { session.finishTasksAndInvalidate() }
        XCTAssertTrue(eventually(120) { gauge(metrics, id) == 0 }, "the depth as the session attached: \(String(describing: gauge(metrics, id)))")
        let tasks = (0..<3).map { i -> DownloadTask in
            let t = session.downloadTask(with: URL(string: nginx.http + "/medium.bin?\(i)")!)
            t.earliestBeginDate = Date().addingTimeInterval(3600)
            return t
        }
        XCTAssertEqual(gauge(metrics, id), 0, "made, not resumed: not queued")
        tasks.forEach { $0.resume() }
        XCTAssertTrue(eventually(120) { gauge(metrics, id) == 3 }, "three queued: \(String(describing: gauge(metrics, id)))")
        tasks.forEach { $0.cancel() }
        XCTAssertTrue(eventually(120) { gauge(metrics, id) == 0 }, "they ended: \(String(describing: gauge(metrics, id)))")
        XCTAssertTrue(eventually(120) { recorder.completions.count == 3 })
        XCTAssertTrue(recorder.completions.values.allSatisfy { $0?.code == .cancelled }, "\(recorder.completions)")
    }
}
