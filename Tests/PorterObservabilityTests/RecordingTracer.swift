import Foundation
import PorterCore
import Tracing

/// A tracer that keeps every span in memory and propagates contexts as W3C Trace
/// Context (`traceparent`, `tracestate`), as an OpenTelemetry tracer does: the test
/// sees exactly the header fields a real backend would make Porter send.
/// (swift-distributed-tracing's InMemoryTracer propagates its own field names.)
final class RecordingTracer: Tracer, Sendable {
    struct IDs: Sendable, Hashable {
        var traceID: String
        var spanID: String
    }
    enum IDsKey: ServiceContextKey { typealias Value = IDs }
    enum TraceStateKey: ServiceContextKey { typealias Value = String }

    final class Span: Tracing.Span, Sendable {
        struct Record: Sendable {
            var operationName: String
            var attributes: SpanAttributes = [:]
            var status: SpanStatus?
            var errors: [String] = []
            var ended = false
        }
        let context: ServiceContext
        let kind: SpanKind
        let parentSpanID: String?
        let record: Locked<Record>
        private let tracer: RecordingTracer

        init(name: String, context: ServiceContext, kind: SpanKind, parentSpanID: String?, tracer: RecordingTracer) {
            self.context = context
            self.kind = kind
            self.parentSpanID = parentSpanID
            self.record = Locked(Record(operationName: name))
            self.tracer = tracer
        }
        var ids: IDs { context[IDsKey.self]! }
        var operationName: String {
            get { record.current.operationName }
            set { record.withLock { $0.operationName = newValue } }
        }
        var attributes: SpanAttributes {
            get { record.current.attributes }
            set { record.withLock { $0.attributes = newValue } }
        }
        var isRecording: Bool { !record.current.ended }
        func setStatus(_ status: SpanStatus) { record.withLock { $0.status = status } }
        func addEvent(_ event: SpanEvent) {}
        func addLink(_ link: SpanLink) {}
        func recordError<Instant: TracerInstant>(_ error: Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant) {
            record.withLock { $0.errors.append(String(describing: error)) }
        }
        func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
            let first = record.withLock { r -> Bool in
                defer { r.ended = true }
                return !r.ended
            }
            if first { tracer.finished.withLock { $0.append(self) } }
        }
        /// A string attribute, for assertions.
        func string(_ key: String) -> String? {
            if case .string(let s)? = attributes[key]?.toSpanAttribute() { return s }
            return nil
        }
        func int(_ key: String) -> Int64? {
            switch attributes[key]?.toSpanAttribute() {
            case .int64(let i)?: return i
            case .int32(let i)?: return Int64(i)
            default: return nil
            }
        }
    }

    let started = Locked<[Span]>([])
    let finished = Locked<[Span]>([])
    private let counter = Locked<UInt64>(0)

    private func nextID(_ hexDigits: Int) -> String {
        let n = counter.withLock { $0 += 1; return $0 }
        let hex = String(n, radix: 16)
        return String(repeating: "0", count: hexDigits - hex.count) + hex
    }

    func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> ServiceContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> Span {
        var context = context()
        let parent = context[IDsKey.self]
        context[IDsKey.self] = IDs(traceID: parent?.traceID ?? nextID(32), spanID: nextID(16))
        let span = Span(name: operationName, context: context, kind: kind, parentSpanID: parent?.spanID, tracer: self)
        started.withLock { $0.append(span) }
        return span
    }

    func activeSpan(identifiedBy context: ServiceContext) -> Span? { nil }
    func forceFlush() {}

    func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier, using injector: Inject)
    where Inject.Carrier == Carrier {
        guard let ids = context[IDsKey.self] else { return }
        injector.inject("00-\(ids.traceID)-\(ids.spanID)-01", forKey: "traceparent", into: &carrier)
        if let state = context[TraceStateKey.self] { injector.inject(state, forKey: "tracestate", into: &carrier) }
    }

    func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract)
    where Extract.Carrier == Carrier {
        guard let parent = extractor.extract(key: "traceparent", from: carrier) else { return }
        let parts = parent.split(separator: "-")
        guard parts.count == 4 else { return }
        context[IDsKey.self] = IDs(traceID: String(parts[1]), spanID: String(parts[2]))
        if let state = extractor.extract(key: "tracestate", from: carrier) { context[TraceStateKey.self] = state }
    }
}
