import Foundation
import PorterCore

/// The life cycle of a task on a connection of its own — a stream task or a WebSocket
/// task — as a value: an event goes in, the actions to perform come out, in order; no I/O,
/// no locks, no clocks. The shells (PorterWebSocket's `StreamTask` and `WebSocketTask`)
/// hold one on their queue, perform its actions and feed back what happened; they keep
/// the data path (bytes, frames, messages), never the decision to end.
///
/// Guarantees, by construction:
/// - one end at most (`finish`, carrying the error and the close code), and nothing after
///   it but the answer to an operation asked after the end;
/// - every operation (a send, a receive, a ping, a read, a write) is answered exactly once:
///   by the shell's report (`succeed`), its own timeout or failure, or the end (`fail`);
/// - every timer scheduled is cancelled or has fired by the end;
/// - a WebSocket opens at most once, sends asked before the opening go out after it in
///   the order asked, and a close frame goes out at most once;
/// - a report of an earlier connection attempt (before a redirect or a challenge) is
///   dropped by its attempt number.
package struct ConnectionTaskMachine: Sendable {
    package enum Kind: Sendable, Equatable {
        /// Bytes both ways; the end of the stream is data, not the end of the task.
        case stream
        /// RFC 6455: connect, opening handshake, messages, the closing handshake.
        case webSocket
    }

    package enum Timer: Hashable, Sendable {
        /// Until the WebSocket is open (the request timeout, over every attempt).
        case opening
        /// The closing handshake's time (5 s): a peer that neither answers nor reads
        /// cannot hold the task open.
        case closing
        /// A protocol violation waits this long for the app to read what came before it.
        case violationGrace
        /// An operation's own timeout.
        case operation(Int)

        /// A fixed order, so the end cancels timers in the same order every time.
        package var rank: Int {
            switch self {
            case .opening: return -3
            case .closing: return -2
            case .violationGrace: return -1
            case .operation(let id): return id
            }
        }
    }

    /// What the shell's reader does with frames, pushed by the machine.
    package enum Mode: Sendable, Equatable {
        /// Messages are kept, pings answered.
        case open
        /// A close frame went (or goes) out: frames are read only for the peer's close;
        /// messages and pings are dropped (RFC 6455 §5.5.1).
        case closing
    }

    /// Something the app asked of the connection; the shell keeps its callback by `id`.
    package struct Operation: Sendable {
        package var id: Int
        /// It goes out only once the connection is open (a WebSocket send or ping asked
        /// before the handshake); it fails when asked during the closing handshake.
        package var waitsForOpen: Bool
        /// The error it fails with when its own timer (`.operation(id)`) fires; nil: no timer.
        package var timeoutError: PorterError?
        package init(id: Int, waitsForOpen: Bool = false, timeoutError: PorterError? = nil) {
            self.id = id
            self.waitsForOpen = waitsForOpen
            self.timeoutError = timeoutError
        }
    }

    /// The end, with everything the shell reports of it.
    package struct End: Sendable {
        /// nil: a clean close.
        package var error: PorterError?
        /// The close code (the peer's, ours, or the one the failure names); nil: none.
        package var closeCode: Int?
        package var closeReason: Data?
        /// What operations failed at the end, or asked after it, fail with.
        package var operationError: PorterError
    }

    package enum Event: Sendable {
        case resume
        /// Ends the task at once, without a close handshake.
        case cancel
        /// The app closes the WebSocket with `code` (0: no code) and `reason`.
        case close(code: Int, reason: Data)
        /// The connection of `attempt` is up (the handshake goes out next).
        case connected(attempt: Int)
        /// The handshake of `attempt` (sent) led elsewhere (a redirect, or a challenge
        /// answered): a new connection to `url`.
        case retry(attempt: Int, url: URL)
        /// The handshake of `attempt` was accepted.
        case opened(attempt: Int)
        /// The connection or the handshake failed; `closeCode` for the report (1006 when
        /// an open connection was lost); `attempt`: the connection it happened on (nil: the
        /// current one).
        case failed(PorterError, closeCode: Int?, attempt: Int?)
        /// The peer ended the stream (a read returned no bytes).
        case peerClosed
        /// The peer's close frame.
        case closeFrameReceived(code: Int?, reason: Data?)
        /// Our close frame was written (or could not be).
        case closeFrameWritten
        /// The peer broke the protocol; `deferred`: messages before the violation are still
        /// to be read, so the connection fails once they were (or after a grace time).
        case violation(PorterError, closeCode: Int, deferred: Bool)
        /// The app waits for a message and none is left.
        case appWaits
        case timerFired(Timer)
        case asked(Operation)
        /// The shell answered operation `id` (a message handed over, bytes written, a pong).
        case answered(id: Int)
        case operationFailed(id: Int, PorterError)
    }

    package enum Action: Sendable {
        /// Show this state (the public `state`).
        case publishState(TaskState)
        /// Check the request, open a connection for `attempt` and report `connected`.
        case connect(attempt: Int)
        /// Send the opening handshake for `attempt` and read its answer.
        case sendHandshake(attempt: Int)
        /// Close the connection (outstanding I/O on it is dropped).
        case closeConnection
        case schedule(Timer)
        case cancelTimer(Timer)
        /// Tell the delegate the WebSocket is open.
        case reportOpen
        /// Read frames this way from now on (and read on).
        case enter(Mode)
        /// Write a close frame with this body; report `closeFrameWritten`.
        case writeClose(payload: [UInt8])
        /// Go ahead with operation `id` (write it, or keep it to be answered).
        case perform(id: Int)
        /// Answer operation `id` with what the shell has for it.
        case succeed(id: Int)
        /// Answer operation `id` with this error.
        case fail(id: Int, PorterError)
        /// The end, to show: `.completed`, the error, the close code and reason. Comes
        /// before the operations still waiting are failed, then `finish`.
        case publishEnd(End)
        /// The end, to report: the close and the completion to the delegate; the task
        /// leaves the session's list. The last action the task performs (after it, only
        /// `fail` for operations asked later).
        case finish(End)
    }

    enum State: Sendable {
        case idle
        /// A WebSocket connecting or in its opening handshake.
        case opening(attempt: Int, handshakeSent: Bool)
        /// `violation`: the peer broke the protocol after messages the app has not read.
        case open(violation: Violation?)
        case closing(Closing)
        case ended(End)
    }

    struct Violation: Sendable {
        var error: PorterError
        var code: Int
    }

    struct Closing: Sendable {
        /// Why, when the close is a failure's.
        var error: PorterError?
        var code: Int
        var reason: Data?
        /// Our close frame answers the peer's (or a violation): the task ends once it is
        /// written. Otherwise we wait for the peer's close frame or the end of the stream.
        var endsWhenWritten: Bool
    }

    package let kind: Kind
    private(set) var state = State.idle
    /// Errors name the URL the task is on now (after a redirect, where it led).
    private var url: URL?
    private let openingTimeout: Double
    /// Operations asked and not answered, in the order asked.
    private var pending: [Operation] = []
    /// Of those, the ones waiting for the connection to open, in order.
    private var waiting: [Int] = []
    private var timers: Set<Timer> = []
    /// The connection attempt now (the last one once open).
    private var attempt = 0

    package init(kind: Kind, url: URL? = nil, openingTimeout: Double = 60) {
        self.kind = kind
        self.url = url
        self.openingTimeout = openingTimeout
    }

    package var hasEnded: Bool {
        if case .ended = state { return true }
        return false
    }

    /// Whether a close frame with `code` may be sent (1005, 1006 and 1015 are only
    /// reported; 3000–4999 belong to libraries and applications).
    package static func maySend(closeCode code: Int) -> Bool {
        switch code {
        case 1000...1003, 1007...1014, 3000...4999: return true
        default: return false
        }
    }

    /// A close frame's body: the code, then at most 123 bytes of the reason cut at a
    /// UTF-8 character boundary (RFC 6455 §5.5.1); empty for no code.
    package static func closePayload(code: Int?, reason: Data?) -> [UInt8] {
        guard let code, code != 0 else { return [] }
        var bytes = Array((reason ?? Data()).prefix(123))
        while !bytes.isEmpty, String(validating: bytes, as: UTF8.self) == nil { bytes.removeLast() }
        return [UInt8((code >> 8) & 0xFF), UInt8(code & 0xFF)] + bytes
    }

    package mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .resume:
            guard case .idle = state else { return [] }
            switch kind {
            case .stream:
                state = .open(violation: nil)
                return [.publishState(.running), .connect(attempt: 0)]
            case .webSocket:
                state = .opening(attempt: 0, handshakeSent: false)
                return [.publishState(.running)] + schedule(.opening) + [.connect(attempt: 0)]
            }

        case .cancel:
            guard !hasEnded else { return [] }
            return end(error: cancelled(), code: nil)

        case .close(let code, let reason):
            guard kind == .webSocket else { return [] }
            switch state {
            case .idle, .opening:
                return end(error: cancelled(), code: nil)
            case .open(let violation?):
                return failConnection(violation)
            case .open(nil):
                guard code == 0 || Self.maySend(closeCode: code) else {
                    return end(error: PorterError(.unsupportedConfiguration, "the close code \(code) may not be sent", url: url),
                               code: nil)
                }
                let closing = Closing(error: nil, code: code == 0 ? 1005 : code, reason: reason, endsWhenWritten: false)
                return startClosing(closing, payload: Self.closePayload(code: code, reason: reason))
            case .closing, .ended:
                return []
            }

        case .connected(let attempt):
            guard case .opening(attempt, false) = state else { return [] }
            state = .opening(attempt: attempt, handshakeSent: true)
            return [.sendHandshake(attempt: attempt)]

        case .retry(let attempt, let next):
            // Only an answer to a handshake sent leads elsewhere: a challenge's completion
            // called twice does not open two connections.
            guard case .opening(attempt, true) = state else { return [] }
            state = .opening(attempt: attempt + 1, handshakeSent: false)
            self.attempt = attempt + 1
            url = next
            return [.closeConnection, .connect(attempt: attempt + 1)]

        case .opened(let attempt):
            guard case .opening(attempt, true) = state else { return [] }
            state = .open(violation: nil)
            var actions = cancel(.opening) + [.enter(.open), .reportOpen]
            for id in waiting { actions.append(.perform(id: id)) }
            waiting = []
            return actions

        case .failed(let error, let code, let on):
            // A failure of a connection given up for another (a redirect, a challenge).
            if let on, on != attempt { return [] }
            switch state {
            case .ended:
                return []
            case .closing(let c):
                return end(error: c.error ?? error, code: c.code, reason: c.reason)
            default:
                return end(error: error, code: code)
            }

        case .peerClosed:
            switch state {
            case .opening(_, true):
                return end(error: PorterError(.networkConnectionLost, "the server closed the connection during the handshake", url: url),
                           code: nil)
            case .open where kind == .webSocket:
                return end(error: PorterError(.networkConnectionLost, "the server closed the connection without a close frame", url: url),
                           code: 1006)
            case .closing(let c):
                return end(error: c.error, code: c.code, reason: c.reason)
            default:
                return []
            }

        case .closeFrameReceived(let code, let reason):
            switch state {
            case .open:
                let closing = Closing(error: nil, code: code ?? 1005, reason: reason, endsWhenWritten: true)
                return cancel(.violationGrace) + startClosing(closing, payload: Self.closePayload(code: code, reason: nil))
            case .closing(let c):
                return end(error: c.error, code: code ?? 1005, reason: reason)
            default:
                return []
            }

        case .closeFrameWritten:
            guard case .closing(let c) = state, c.endsWhenWritten else { return [] }
            return end(error: c.error, code: c.code, reason: c.reason)

        case .violation(let error, let code, let deferred):
            switch state {
            case .open(nil):
                guard deferred else { return failConnection(Violation(error: error, code: code)) }
                state = .open(violation: Violation(error: error, code: code))
                return schedule(.violationGrace)
            case .closing(let c):
                return end(error: c.error ?? error, code: code, reason: c.reason)
            default:
                return []
            }

        case .appWaits:
            guard case .open(let violation?) = state else { return [] }
            return failConnection(violation)

        case .timerFired(let timer):
            guard timers.remove(timer) != nil else { return [] }
            switch timer {
            case .opening:
                return end(error: PorterError(.timedOut, "the WebSocket did not open within \(openingTimeout) s", url: url),
                           code: nil)
            case .closing:
                guard case .closing(let c) = state else { return [] }
                return end(error: c.error, code: c.code, reason: c.reason)
            case .violationGrace:
                guard case .open(let violation?) = state else { return [] }
                return failConnection(violation)
            case .operation(let id):
                guard let i = pending.firstIndex(where: { $0.id == id }) else { return [] }
                let op = pending.remove(at: i)
                waiting.removeAll { $0 == id }
                return [.fail(id: id, op.timeoutError ?? PorterError(.timedOut, "the operation timed out", url: url))]
            }

        case .asked(let op):
            guard !pending.contains(where: { $0.id == op.id }) else { return [] }
            switch state {
            case .ended(let e):
                return [.fail(id: op.id, e.operationError)]
            case .closing(let c) where op.waitsForOpen:
                return [.fail(id: op.id, closedError(code: c.code))]
            default:
                break
            }
            pending.append(op)
            let timer = op.timeoutError == nil ? [] : schedule(.operation(op.id))
            switch state {
            case .idle, .opening:
                if op.waitsForOpen {
                    waiting.append(op.id)
                    return timer
                }
            default:
                break
            }
            return timer + [.perform(id: op.id)]

        case .answered(let id):
            // Only an operation that went ahead can be answered by the shell.
            guard let i = pending.firstIndex(where: { $0.id == id }), !waiting.contains(id) else { return [] }
            pending.remove(at: i)
            return cancel(.operation(id)) + [.succeed(id: id)]

        case .operationFailed(let id, let error):
            // Only an operation that went ahead can be answered by the shell.
            guard let i = pending.firstIndex(where: { $0.id == id }), !waiting.contains(id) else { return [] }
            pending.remove(at: i)
            return cancel(.operation(id)) + [.fail(id: id, error)]
        }
    }

    // MARK: - the paths every event shares

    /// The server broke the protocol: send the close code the RFC names, end once written.
    private mutating func failConnection(_ violation: Violation) -> [Action] {
        let closing = Closing(error: violation.error, code: violation.code, reason: nil, endsWhenWritten: true)
        return cancel(.violationGrace) + startClosing(closing, payload: Self.closePayload(code: violation.code, reason: nil))
    }

    private mutating func startClosing(_ closing: Closing, payload: [UInt8]) -> [Action] {
        state = .closing(closing)
        var actions: [Action] = [.enter(.closing), .writeClose(payload: payload)]
        // Sends waiting for an opening that will not come fail now (none wait once open).
        let error = closedError(code: closing.code)
        for id in waiting {
            pending.removeAll { $0.id == id }
            actions += cancel(.operation(id)) + [.fail(id: id, error)]
        }
        waiting = []
        return actions + schedule(.closing)
    }

    /// The one place a task ends.
    private mutating func end(error: PorterError?, code: Int?, reason: Data? = nil) -> [Action] {
        var actions = timers.sorted { $0.rank < $1.rank }.map { Action.cancelTimer($0) }
        timers = []
        actions.append(.closeConnection)
        let operationError: PorterError
        switch kind {
        case .stream: operationError = error ?? PorterError(.cancelled, "the stream task ended", url: url)
        case .webSocket: operationError = error ?? closedError(code: code ?? 0)
        }
        // A stream has no close codes.
        let end = kind == .stream ? End(error: error, closeCode: nil, closeReason: nil, operationError: operationError)
            : End(error: error, closeCode: code, closeReason: reason, operationError: operationError)
        // Shown before any answer goes out: an app woken by one sees the task ended, with
        // its error and close code.
        actions.append(.publishEnd(end))
        for op in pending { actions.append(.fail(id: op.id, operationError)) }
        pending = []
        waiting = []
        state = .ended(end)
        actions.append(.finish(end))
        return actions
    }

    private mutating func schedule(_ timer: Timer) -> [Action] {
        guard timers.insert(timer).inserted else { return [] }
        return [.schedule(timer)]
    }

    private mutating func cancel(_ timer: Timer) -> [Action] {
        guard timers.remove(timer) != nil else { return [] }
        return [.cancelTimer(timer)]
    }

    private func cancelled() -> PorterError {
        PorterError(.cancelled, kind == .stream ? "the stream task was cancelled" : "the WebSocket task was cancelled", url: url)
    }

    private func closedError(code: Int) -> PorterError {
        PorterError(.networkConnectionLost, "the WebSocket is closed (code \(code))", url: url)
    }
}
