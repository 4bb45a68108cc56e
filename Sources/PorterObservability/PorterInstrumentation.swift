import CoreMetrics
import Foundation
import PorterCore
import Tracing

/// Spans (swift-distributed-tracing) and metrics (swift-metrics) for every task of the
/// sessions it observes, as AsyncHTTPClient offers them.
///
/// `Porter.bootstrap()` installs one as every new configuration's `taskObserver`. It
/// costs nothing until the program bootstraps a backend (`InstrumentationSystem`,
/// `MetricsSystem`), or names one here:
///
/// - **Tracing**: a client span per task, a child of the `ServiceContext` that is
///   current where the task is created (`ServiceContext.current`), named after the
///   method; each redirect or retry adds a child span with `http.request.resend_count`.
///   HTTP requests carry the span's context as the tracer writes it (W3C `traceparent`
///   and `tracestate` with an OpenTelemetry tracer). Attributes follow the OpenTelemetry
///   HTTP client conventions; credentials in URLs are redacted; a failure is recorded
///   (`recordError`, error status, `error.type`), as is a status of 400 or more.
/// - **Metrics**: see `PorterMetricLabels` for the names and dimensions.
public struct PorterInstrumentation: TaskObserver {
    private let tracer: (any Tracer)?
    private let metricsFactory: (any MetricsFactory)?

    /// - Parameters:
    ///   - tracer: the tracer to use; nil: the one active where each task is created
    ///     (`InstrumentationSystem.tracer`: a `withTracer` scope's, or the bootstrapped one).
    ///   - metricsFactory: the metrics backend; nil: `MetricsSystem.factory`, read when
    ///     each task is created.
    public init(tracer: (any Tracer)? = nil, metricsFactory: (any MetricsFactory)? = nil) {
        self.tracer = tracer
        self.metricsFactory = metricsFactory
    }

    public func observeTask(_ request: Request) -> (any TaskObservation)? {
        let tracer = self.tracer ?? InstrumentationSystem.activeTracer
        let factory = self.metricsFactory ?? MetricsSystem.factory
        let tracing = tracer.map { !($0 is NoOpTracer) } ?? false
        let measuring = !(factory is NOOPMetricsHandler)
        guard tracing || measuring else { return nil }
        return TaskTrace(request: request, tracer: tracing ? tracer : nil, parent: ServiceContext.current ?? .topLevel,
                         metrics: measuring ? factory : nil)
    }

    /// `porter_daemon_queue_depth` for a background session, as porterd reported it to
    /// the session's link (the app's view of porterd's queue: porterd has no backend).
    public func backgroundQueueDepth(_ depth: Int, session identifier: String) {
        let factory = metricsFactory ?? MetricsSystem.factory
        guard !(factory is NOOPMetricsHandler) else { return }
        PorterMetricLabels.recordDaemonQueueDepth(depth, session: identifier, factory: factory)
    }
}

extension InstrumentationSystem {
    /// `tracer`, nil when no instrument is active at all (nothing bootstrapped and no
    /// `withTracer` scope), the case of nearly every task: one look at the active
    /// instrument instead of `tracer`'s search with its dynamic casts (~2,000 instructions
    /// per task). A scope or a bootstrapped instrument is searched as `tracer` does.
    static var activeTracer: (any Tracer)? {
        if InstrumentationSystem.instrument is NoOpInstrument { return nil }
        return InstrumentationSystem.tracer
    }
}
