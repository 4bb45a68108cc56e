import CoreMetrics
import PorterCore

/// The metrics Porter reports through swift-metrics, recorded when each task ends.
///
/// | label | kind | dimensions |
/// |---|---|---|
/// | `porter_requests_total` | counter | `scheme`, `status_class` |
/// | `porter_request_duration` | timer (ns) | `scheme`, `status_class` |
/// | `porter_request_errors_total` | counter | `scheme`, `error` |
/// | `porter_bytes_sent_total` | counter | `scheme` |
/// | `porter_bytes_received_total` | counter | `scheme` |
/// | `porter_plugin_crashes_total` | counter | `scheme` |
/// | `porter_daemon_queue_depth` | gauge | `session` (a background session's tasks resumed at porterd and not completed) |
///
/// `scheme` is the scheme of the task's first request ("https", "ftp", a plugin's);
/// `status_class` the final response's status class ("2xx" … "5xx", "none" for a task
/// without one: non-HTTP, or failed before an answer); `error` the `PorterError.Code`
/// name ("timedOut", "cancelled"). An HTTP error status is not an error here: it is
/// counted under its status class. `porter_plugin_crashes_total` counts the tasks a
/// plugin's crash ended (`PorterError.Code.pluginCrashed`, from any of the places that
/// report it). The duration runs from the first request's start to the task's end.
public enum PorterMetricLabels {
    public static let requests = "porter_requests_total"
    public static let duration = "porter_request_duration"
    public static let errors = "porter_request_errors_total"
    public static let bytesSent = "porter_bytes_sent_total"
    public static let bytesReceived = "porter_bytes_received_total"
    public static let pluginCrashes = "porter_plugin_crashes_total"
    public static let daemonQueueDepth = "porter_daemon_queue_depth"

    /// "2xx" for 204; "none" without a status.
    public static func statusClass(_ status: Int?) -> String {
        guard let status, (100..<600).contains(status) else { return "none" }
        return "\(status / 100)xx"
    }

    /// porterd's number of queued and running jobs of one background session, as a
    /// gauge. Recorded in the app: the session's link to porterd keeps the count from
    /// porterd's reports (attach, each task resumed, suspended or completed) and hands it
    /// to the configuration's `taskObserver` (`PorterInstrumentation`), which records it
    /// here with its metrics backend.
    public static func recordDaemonQueueDepth(_ depth: Int, session: String, factory: any MetricsFactory = MetricsSystem.factory) {
        Gauge(label: daemonQueueDepth, dimensions: [("session", session)], factory: factory).record(depth)
    }

    static func record(scheme: String, status: Int?, error: PorterError?, bytesSent: Int64, bytesReceived: Int64,
                       nanoseconds: UInt64, factory: any MetricsFactory) {
        let scheme = scheme.isEmpty ? "none" : scheme
        let byOutcome = [("scheme", scheme), ("status_class", statusClass(status))]
        Counter(label: requests, dimensions: byOutcome, factory: factory).increment()
        CoreMetrics.Timer(label: duration, dimensions: byOutcome, factory: factory).recordNanoseconds(nanoseconds)
        if bytesSent > 0 { Counter(label: Self.bytesSent, dimensions: [("scheme", scheme)], factory: factory).increment(by: bytesSent) }
        if bytesReceived > 0 {
            Counter(label: Self.bytesReceived, dimensions: [("scheme", scheme)], factory: factory).increment(by: bytesReceived)
        }
        if let error {
            Counter(label: errors, dimensions: [("scheme", scheme), ("error", error.code.description)], factory: factory).increment()
            if error.code == .pluginCrashed {
                Counter(label: pluginCrashes, dimensions: [("scheme", scheme)], factory: factory).increment()
            }
        }
    }
}
