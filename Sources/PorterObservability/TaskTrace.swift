import CoreMetrics
import Dispatch
import Foundation
import PorterCore
import Tracing

/// One task's spans and measurements (`PorterInstrumentation` makes it when the task
/// is created). The task span starts with the first request and ends with the task;
/// it stands for that first request too, so its context is the one the first request
/// carries. Each later request (a redirect, a retry) gets a child span that ends when
/// the next request starts or the task ends.
///
/// Calls come one at a time from the task's executor; the lock only makes the state
/// safe to read from whichever thread that is. Tracer and metrics code runs outside it.
final class TaskTrace: TaskObservation {
    private let request: Request
    private let tracer: (any Tracer)?
    private let parent: ServiceContext
    private let metrics: (any MetricsFactory)?
    private let state = Locked(State())

    private struct State {
        var taskSpan: (any Span)?
        var hopSpan: (any Span)?
        var requestsSent = 0
        var response: Response?
        var startNanos: UInt64?
        var completed = false
    }

    init(request: Request, tracer: (any Tracer)?, parent: ServiceContext, metrics: (any MetricsFactory)?) {
        self.request = request
        self.tracer = tracer
        self.parent = parent
        self.metrics = metrics
    }

    func willLoad(_ request: inout Request) {
        let (sent, taskSpan, previousHop) = state.withLock { s -> (Int, (any Span)?, (any Span)?) in
            if s.startNanos == nil { s.startNanos = DispatchTime.now().uptimeNanoseconds }
            let previous = s.hopSpan
            s.hopSpan = nil
            s.requestsSent += 1
            return (s.requestsSent - 1, s.taskSpan, previous)
        }
        guard let tracer else { return }
        previousHop?.end()
        let span: any Span
        if let taskSpan {
            span = tracer.startSpan(HTTPSpanAttributes.spanName(for: request), context: taskSpan.context, ofKind: .client)
            HTTPSpanAttributes.describe(request, on: span)
            span.attributes["http.request.resend_count"] = sent
            state.withLock { $0.hopSpan = span }
        } else {
            span = startTaskSpan(tracer, for: request)
        }
        HTTPSpanAttributes.inject(span.context, into: &request, using: tracer)
    }

    func didReceive(_ response: Response) {
        let span = state.withLock { s -> (any Span)? in
            s.response = response
            return s.hopSpan ?? s.taskSpan
        }
        if let span { HTTPSpanAttributes.describe(response, on: span) }
    }

    func didComplete(error: PorterError?, bytesSent: Int64, bytesReceived: Int64) {
        let now = DispatchTime.now().uptimeNanoseconds
        let s = state.withLock { s -> State? in
            guard !s.completed else { return nil }
            let ended = s
            s.completed = true
            s.taskSpan = nil
            s.hopSpan = nil
            return ended
        }
        guard let s else { return }
        if let tracer {
            // A task that failed before sending anything still gets its span.
            let taskSpan = s.taskSpan ?? startTaskSpan(tracer, for: request)
            if let hop = s.hopSpan {
                if let error { HTTPSpanAttributes.record(error, on: hop) }
                hop.end()
                // The task's outcome is the last response's, not the first one's redirect.
                if let last = s.response { HTTPSpanAttributes.describe(last, on: taskSpan) }
            }
            if let error { HTTPSpanAttributes.record(error, on: taskSpan) }
            taskSpan.end()
        }
        if let metrics {
            PorterMetricLabels.record(scheme: request.scheme, status: s.response?.statusCode, error: error,
                                      bytesSent: bytesSent, bytesReceived: bytesReceived,
                                      nanoseconds: now - min(now, s.startNanos ?? now), factory: metrics)
        }
    }

    private func startTaskSpan(_ tracer: any Tracer, for request: Request) -> any Span {
        let span = tracer.startSpan(HTTPSpanAttributes.spanName(for: request), context: parent, ofKind: .client)
        HTTPSpanAttributes.describe(request, on: span)
        state.withLock { $0.taskSpan = span }
        return span
    }

    deinit {
        // A task dropped without completing (never resumed, or its session went away):
        // its span must not stay open in the tracer for ever.
        let s = state.current
        guard !s.completed else { return }
        s.hopSpan?.end()
        s.taskSpan?.end()
    }
}
