import Foundation
import MetricsTestKit
import Porter
import PorterTestSupport
import Tracing
import XCTest

/// Tracing and metrics of tasks (issue 25): spans after the OpenTelemetry HTTP client
/// conventions, W3C context propagation seen by a real server (nginx echoes the
/// `traceparent` and `tracestate` it received), and swift-metrics counters and timers.
/// Every test names its tracer and metrics backend on the session: the process-wide
/// systems stay unbootstrapped, so no other test sees a header it did not ask for.
final class ObservabilityTests: NginxTestCase {
    override class func setUp() {
        Porter.bootstrap()
        super.setUp()
    }


    private func session(tracer: RecordingTracer?, metrics: TestMetrics? = nil) -> Session {
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        c.caCertificateFile = nginx.caFile
        c.responseCache = nil
        c.taskObserver = PorterInstrumentation(tracer: tracer, metricsFactory: metrics)
        return Session(configuration: c)
    }
    private func url(_ s: String) -> URL { URL(string: s)! }
    private func text(_ d: Data) -> String { String(decoding: d, as: UTF8.self) }

    /// The context of an incoming request, as a server framework would have extracted it.
    private func incomingContext() -> ServiceContext {
        var context = ServiceContext.topLevel
        context[RecordingTracer.IDsKey.self] = .init(traceID: "4bf92f3577b34da6a3ce929d0e0e4736", spanID: "00f067aa0ba902b7")
        context[RecordingTracer.TraceStateKey.self] = "porter=t61rcWkgMzE"
        return context
    }

    // MARK: - spans

    func testTaskSpanIsAChildOfTheTaskLocalContextAndItsContextReachesTheServer() async throws {
        let tracer = RecordingTracer()
        let s = session(tracer: tracer)
        let target = url(nginx.http + "/trace")
        let (data, response) = try await ServiceContext.withValue(incomingContext()) { try await s.data(from: target) }
        XCTAssertEqual(response.statusCode, 200)

        let spans = tracer.finished.current
        XCTAssertEqual(spans.count, 1, "one span for a task without redirects")
        let span = try XCTUnwrap(spans.first)
        XCTAssertEqual(span.operationName, "GET")
        XCTAssertEqual(span.kind, .client)
        XCTAssertEqual(span.ids.traceID, "4bf92f3577b34da6a3ce929d0e0e4736", "the incoming trace goes on")
        XCTAssertEqual(span.parentSpanID, "00f067aa0ba902b7", "a child of the task-local context's span")
        XCTAssertEqual(text(data), "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-\(span.ids.spanID)-01 tracestate=porter=t61rcWkgMzE\n",
                       "the server sees the task span as its parent, and the trace state")

        XCTAssertEqual(span.string("http.request.method"), "GET")
        XCTAssertEqual(span.string("url.full"), target.absoluteString)
        XCTAssertEqual(span.string("url.scheme"), "http")
        XCTAssertEqual(span.string("server.address"), "127.0.0.1")
        XCTAssertEqual(span.int("server.port"), Int64(nginx.httpPort))
        XCTAssertEqual(span.int("http.response.status_code"), 200)
        XCTAssertEqual(span.string("network.protocol.version"), "1.1")
        XCTAssertNil(span.record.current.status, "a success leaves the status unset")
        XCTAssertNil(span.string("error.type"))
        XCTAssertTrue(span.record.current.errors.isEmpty)
    }

    func testHTTPSOverH2ReportsProtocolVersion2AndDefaultPortlessURL() async throws {
        let tracer = RecordingTracer()
        let (_, response) = try await session(tracer: tracer).data(from: url(nginx.https + "/index.html"))
        XCTAssertEqual(response.statusCode, 200)
        let span = try XCTUnwrap(tracer.finished.current.first)
        XCTAssertEqual(span.string("network.protocol.version"), "2")
        XCTAssertEqual(span.string("url.scheme"), "https")
        XCTAssertEqual(span.int("server.port"), Int64(nginx.httpsPort))
    }

    func testEachRedirectIsAChildSpanWithResendCountAndSendsItsOwnContext() async throws {
        let tracer = RecordingTracer()
        let (data, response) = try await session(tracer: tracer).data(from: url(nginx.http + "/trace/hop"))
        XCTAssertEqual(response.statusCode, 200)
        let spans = tracer.finished.current
        XCTAssertEqual(spans.count, 2, "the task's span and one for the redirect")
        let task = try XCTUnwrap(spans.first { $0.parentSpanID == nil })
        let hop = try XCTUnwrap(spans.first { $0.parentSpanID != nil })
        XCTAssertEqual(hop.parentSpanID, task.ids.spanID)
        XCTAssertEqual(hop.ids.traceID, task.ids.traceID)
        XCTAssertEqual(hop.kind, .client)
        XCTAssertEqual(hop.int("http.request.resend_count"), 1)
        XCTAssertEqual(hop.string("url.full"), nginx.http + "/trace")
        XCTAssertEqual(hop.int("http.response.status_code"), 200)
        XCTAssertNil(task.int("http.request.resend_count"), "the first request is no resend")
        XCTAssertEqual(task.string("url.full"), nginx.http + "/trace/hop")
        XCTAssertEqual(task.int("http.response.status_code"), 200, "the task's outcome is the final response")
        XCTAssertEqual(text(data), "traceparent=00-\(task.ids.traceID)-\(hop.ids.spanID)-01 tracestate=\n",
                       "the redirected request carries its own span, not the first one's")

        let chain = RecordingTracer()
        _ = try await session(tracer: chain).data(from: url(nginx.http + "/chain/3"))
        let hops = chain.finished.current.filter { $0.parentSpanID != nil }
        XCTAssertEqual(hops.compactMap { $0.int("http.request.resend_count") }.sorted(), [1, 2, 3])
        XCTAssertEqual(chain.finished.current.count, 4)
    }

    func testContextIsTheOneCurrentWhereTheTaskIsCreatedNotWhereItIsResumed() async throws {
        let tracer = RecordingTracer()
        let s = session(tracer: tracer)
        let target = url(nginx.http + "/trace")
        let task = ServiceContext.withValue(incomingContext()) {
            s.dataTask(with: target) { _, _, _ in }
        }
        var other = ServiceContext.topLevel
        other[RecordingTracer.IDsKey.self] = .init(traceID: "0af7651916cd43dd8448eb211c80319c", spanID: "b7ad6b7169203331")
        ServiceContext.withValue(other) { task.resume() }
        _ = await eventuallyAsync { !tracer.finished.current.isEmpty }
        let span = try XCTUnwrap(tracer.finished.current.first)
        XCTAssertEqual(span.parentSpanID, "00f067aa0ba902b7")
        XCTAssertEqual(span.ids.traceID, "4bf92f3577b34da6a3ce929d0e0e4736")
    }

    /// The attacker's move: a URL with credentials and a signed query. Neither the
    /// password nor the signature may reach the trace backend — not in `url.full`, not
    /// in the recorded error (PorterError's description shows its URL).
    func testCredentialsAndSignaturesNeverReachTheTracer() async throws {
        let tracer = RecordingTracer()
        let s = session(tracer: tracer)
        let port = try NginxFixture.freePort()   // nobody listens there
        do {
            _ = try await s.data(from: url("http://alice:hunter2@127.0.0.1:\(port)/private?sig=s3cret&x=1"))
            XCTFail("nothing listens on \(port)")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotConnectToHost, "\(e)")
        }
        let span = try XCTUnwrap(tracer.finished.current.first)
        XCTAssertEqual(span.string("url.full"), "http://REDACTED:REDACTED@127.0.0.1:\(port)/private?sig=REDACTED&x=1")
        XCTAssertEqual(span.string("error.type"), "cannotConnectToHost")
        XCTAssertEqual(span.record.current.status?.code, .error)
        XCTAssertEqual(span.record.current.errors.count, 1, "the failure is recorded")
        let everything = span.record.current.errors.joined(separator: " ") + " \(span.attributes)"
            + " \(span.record.current.status?.message ?? "")"
        XCTAssertFalse(everything.contains("hunter2"), everything)
        XCTAssertFalse(everything.contains("s3cret"), everything)

        // A task that fails before any request (no handler) still gets its span.
        let none = RecordingTracer()
        do { _ = try await session(tracer: none).data(from: url("nohandler://bob:pw@h/")) } catch {}
        let failed = try XCTUnwrap(none.finished.current.first)
        XCTAssertEqual(failed.string("error.type"), "unsupportedURL")
        XCTAssertEqual(failed.string("url.full"), "nohandler://REDACTED:REDACTED@h/")
    }

    func testErrorStatusIsAnErrorOfTheClientSpan() async throws {
        let tracer = RecordingTracer()
        let (_, response) = try await session(tracer: tracer).data(from: url(nginx.http + "/missing"))
        XCTAssertEqual(response.statusCode, 404)
        let span = try XCTUnwrap(tracer.finished.current.first)
        XCTAssertEqual(span.int("http.response.status_code"), 404)
        XCTAssertEqual(span.string("error.type"), "404")
        XCTAssertEqual(span.record.current.status?.code, .error)
        XCTAssertTrue(span.record.current.errors.isEmpty, "a status is no thrown error")
    }

    func testAUnknownMethodIsOtherAndACancelIsRecorded() async throws {
        let tracer = RecordingTracer()
        var request = Request(url: url(nginx.http + "/slow"))
        request.method = "BREW"
        let s = session(tracer: tracer)
        let task = s.dataTask(with: request) { _, _, _ in }
        task.resume()
        _ = await eventuallyAsync { !tracer.started.current.isEmpty }
        task.cancel()
        _ = await eventuallyAsync { !tracer.finished.current.isEmpty }
        let span = try XCTUnwrap(tracer.finished.current.first)
        XCTAssertEqual(span.operationName, "HTTP")
        XCTAssertEqual(span.string("http.request.method"), "_OTHER")
        XCTAssertEqual(span.string("http.request.method_original"), "BREW")
        XCTAssertEqual(span.string("error.type"), "cancelled")
        XCTAssertEqual(span.record.current.status?.code, .error)
    }

    // MARK: - no backend, task-local tracer

    func testWithoutABackendNothingIsObservedOrSent() async throws {
        // This process bootstraps neither InstrumentationSystem nor MetricsSystem.
        XCTAssertNil(PorterInstrumentation().observeTask(Request(url: url(nginx.http + "/trace"))))
        XCTAssertTrue(SessionConfiguration.ephemeral.taskObserver is PorterInstrumentation, "Porter.bootstrap() installs it")
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        let (data, _) = try await Session(configuration: c).data(from: url(nginx.http + "/trace"))
        XCTAssertEqual(text(data), "traceparent= tracestate=\n")
    }

    func testTheDefaultObserverUsesTheTaskLocalTracer() async throws {
        let tracer = RecordingTracer()
        var c = SessionConfiguration.ephemeral
        c.proxies = .none
        let s = Session(configuration: c)
        let target = url(nginx.http + "/trace")
        let (data, _) = try await withTracer(tracer) { try await s.data(from: target) }
        let span = try XCTUnwrap(tracer.finished.current.first)
        XCTAssertEqual(text(data), "traceparent=00-\(span.ids.traceID)-\(span.ids.spanID)-01 tracestate=\n")
    }

    // MARK: - metrics

    func testRequestsBytesErrorsAndDurationsPerSchemeAndStatusClass() async throws {
        let metrics = TestMetrics()
        let s = session(tracer: nil, metrics: metrics)
        let (ok, _) = try await s.data(from: url(nginx.http + "/index.html"))
        let (missing, r404) = try await s.data(from: url(nginx.http + "/missing"))
        XCTAssertEqual(r404.statusCode, 404)
        let port = try NginxFixture.freePort()
        do { _ = try await s.data(from: url("http://127.0.0.1:\(port)/")); XCTFail("nothing listens on \(port)") } catch {}
        var put = Request(url: url(nginx.http + "/dav/observed-\(UUID().uuidString).bin"))
        put.method = "PUT"
        let (_, created) = try await s.upload(for: put, from: Data(repeating: 7, count: 1000))
        XCTAssertEqual(created.statusCode, 201)
        let (file, _) = try await s.data(from: URL(fileURLWithPath: "/etc/hostname"))

        func requests(_ scheme: String, _ cls: String) -> Int64 {
            metrics.counterTotal(label: PorterMetricLabels.requests, dimensions: [("scheme", scheme), ("status_class", cls)])
        }
        XCTAssertEqual(requests("http", "2xx"), 2, "the GET and the PUT")
        XCTAssertEqual(requests("http", "4xx"), 1)
        XCTAssertEqual(requests("http", "none"), 1, "the refused connection")
        XCTAssertEqual(requests("file", "none"), 1)
        XCTAssertEqual(metrics.counterTotal(label: PorterMetricLabels.errors,
                                            dimensions: [("scheme", "http"), ("error", "cannotConnectToHost")]), 1)
        XCTAssertEqual(metrics.counterTotal(label: PorterMetricLabels.errors), 1, "a 404 is no error")
        XCTAssertEqual(metrics.counterTotal(label: PorterMetricLabels.bytesSent, dimensions: [("scheme", "http")]), 1000)
        let receivedHTTP = metrics.counterTotal(label: PorterMetricLabels.bytesReceived, dimensions: [("scheme", "http")])
        XCTAssertGreaterThanOrEqual(receivedHTTP, Int64(ok.count + missing.count))
        XCTAssertEqual(metrics.counterTotal(label: PorterMetricLabels.bytesReceived, dimensions: [("scheme", "file")]),
                       Int64(file.count))
        let durations = metrics.timers(label: PorterMetricLabels.duration, dimensions: [("scheme", "http"), ("status_class", "2xx")])
        XCTAssertEqual(durations.flatMap(\.values).count, 2)
        XCTAssertTrue(durations.flatMap(\.values).allSatisfy { $0 > 0 })
        XCTAssertEqual(metrics.counterTotal(label: PorterMetricLabels.pluginCrashes), 0)
    }

    /// A real plugin crash: the test plugin of PorterPluginsTests, isolated in its worker,
    /// dies of SIGSEGV mid-load; the task fails with `pluginCrashed`, and that is counted
    /// and recorded on the task's span.
    func testAPluginCrashIsCountedAndRecorded() async throws {
        let tests = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        let source = tests.appendingPathComponent("PorterPluginsTests/Fixtures/testplugin.c").path
        let include = tests.deletingLastPathComponent().appendingPathComponent("Sources/CPorterPlugin/include").path
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("porter-observability-\(getpid())-\(UUID().uuidString.prefix(6))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        chmod(folder.path, 0o755)
        defer { try? FileManager.default.removeItem(at: folder) }
        let plugin = folder.appendingPathComponent("ptest.so").path
        try runChecked("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-I", include, "-o", plugin, source, "-lpthread"])
        chmod(plugin, 0o644)
        let registry = HandlerRegistry()
        var isolation = PluginIsolation.default
        isolation.defaultMode = .isolated
        isolation.crashLimit = 1000
        let verdicts = PluginLoader(registry: registry, isolation: isolation).loadAll(from: [folder.path])
        XCTAssertTrue(verdicts.contains { $0.plugin?.mode == .isolated }, "\(verdicts)")

        let tracer = RecordingTracer()
        let metrics = TestMetrics()
        var c = SessionConfiguration.ephemeral
        c.registry = registry
        c.taskObserver = PorterInstrumentation(tracer: tracer, metricsFactory: metrics)
        do {
            _ = try await Session(configuration: c).data(from: url("ptest://h/crash-start"))
            XCTFail("the plugin crashes")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .pluginCrashed, "\(e)")
        }
        XCTAssertEqual(metrics.counterTotal(label: PorterMetricLabels.pluginCrashes, dimensions: [("scheme", "ptest")]), 1)
        XCTAssertEqual(metrics.counterTotal(label: PorterMetricLabels.errors, dimensions: [("scheme", "ptest"), ("error", "pluginCrashed")]), 1)
        let span = try XCTUnwrap(tracer.finished.current.first)
        XCTAssertEqual(span.operationName, "ptest")
        XCTAssertEqual(span.string("error.type"), "pluginCrashed")
        XCTAssertEqual(span.record.current.status?.code, .error)
    }

    func testDaemonQueueDepthGauge() throws {
        let metrics = TestMetrics()
        PorterMetricLabels.recordDaemonQueueDepth(3, session: "com.example.sync", factory: metrics)
        let gauge = try metrics.expectGauge(PorterMetricLabels.daemonQueueDepth, [("session", "com.example.sync")])
        XCTAssertEqual(gauge.lastValue, 3)
    }
}
