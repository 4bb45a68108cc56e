import Foundation
import PorterCore
import PorterSession
import PorterEngine

/// The shell around the task's `ConnectionTaskMachine`: every event goes through
/// `handle`, and `perform` does what the machine decided — the one place the task opens,
/// closes, ends and answers what the app asked. Queue only.
extension WebSocketTask {
    /// An event met while an earlier one's actions are performed (a read served at once,
    /// a failure found while connecting) waits for them: each event's actions are performed
    /// whole and in order, so nothing is performed after the end.
    func handle(_ event: ConnectionTaskMachine.Event) {
        inbox.append(event)
        guard inbox.count == 1 else { return }
        while let next = inbox.first {
            for action in machine.handle(next) { perform(action) }
            inbox.removeFirst()
        }
    }

    /// The connection or the handshake failed (`code`: the close code to report, 1006 for
    /// a lost connection). The machine decides whether it ends the task (not after the end,
    /// not for an attempt given up).
    func finish(_ error: PorterError, code: CloseCode?, attempt: Int? = nil) {
        handle(.failed(error, closeCode: code?.rawValue, attempt: attempt))
    }

    /// Something the app asked: kept by id until the machine answers it.
    func ask(_ operation: Pending, waitsForOpen: Bool) {
        nextOperation += 1
        let id = nextOperation
        operations[id] = operation
        handle(.asked(ConnectionTaskMachine.Operation(id: id, waitsForOpen: waitsForOpen)))
    }

    /// The server broke the protocol: nothing more is parsed; the machine fails the
    /// connection with the close code the RFC names, at once or once the messages before
    /// the violation were read.
    func violation(_ error: WebSocketProtocolError) {
        parserFailed = true
        let failure = PorterError(error.code == .messageTooBig ? .dataLengthExceedsMaximum : .badServerResponse,
                                  "the WebSocket server broke the protocol: \(error.message) (close code \(error.code))",
                                  url: currentRequest.url)
        handle(.violation(failure, closeCode: error.code.rawValue, deferred: !messages.isEmpty || appHasTheTurn))
    }

    func perform(_ action: ConnectionTaskMachine.Action) {
        switch action {
        case .publishState(let state):
            lock.withLock { $0.state = state }
        case .connect(let attempt):
            self.attempt = attempt
            connect()
        case .sendHandshake(let attempt):
            guard attempt == self.attempt, let target else { return }
            sendHandshake(target.request, host: target.host, port: target.port, secure: target.secure)
        case .closeConnection:
            stream?.close()
            stream = nil
        case .schedule(let timer):
            let item = DispatchWorkItem { [weak self] in self?.handle(.timerFired(timer)) }
            timers[timer] = item
            queue.asyncAfter(deadline: .now() + seconds(timer), execute: item)
        case .cancelTimer(let timer):
            timers.removeValue(forKey: timer)?.cancel()
        case .reportOpen:
            let agreed = lock.withLock { $0.agreedProtocol }
            if let delegate { deliver { delegate.webSocketTask(self, didOpenWithProtocol: agreed) } }
        case .enter(let mode):
            self.mode = mode
            readMore()
        case .writeClose(let payload):
            writeFrame(WebSocketFrame(fin: true, opcode: .close, payload: payload)) { _ in
                self.queue.async { self.handle(.closeFrameWritten) }
            }
        case .perform(let id):
            start(id)
        case .succeed(let id):
            switch operations.removeValue(forKey: id) {
            case .send(_, let done)?, .ping(_, let done)?:
                deliver { done(nil) }
            case .receive(let done)?:
                guard let message = answers.removeValue(forKey: id) else { return }
                deliver { done(.success(message)) }
            case nil:
                break
            }
        case .fail(let id, let error):
            receivers.removeAll { $0 == id }
            pings.removeAll { $0.id == id }
            switch operations.removeValue(forKey: id) {
            case .send(_, let done)?, .ping(_, let done)?:
                deliver { done(error) }
            case .receive(let done)?:
                deliver { done(.failure(error)) }
            case nil:
                break
            }
        case .publishEnd(let end):
            lock.withLock { s in
                s.state = .completed
                s.error = end.error
                if let code = end.closeCode { s.closeCode = CloseCode(rawValue: code) }
                if end.closeReason != nil { s.closeReason = end.closeReason }
            }
        case .finish(let end):
            // No handshake goes anywhere after the end (a challenge answered late finds none).
            target = nil
            let code = end.closeCode.map { CloseCode(rawValue: $0) }
            session?.untrack(identifier: taskIdentifier)
            if let delegate {
                if let code, code != .invalid {
                    deliver { delegate.webSocketTask(self, didCloseWith: code, reason: end.closeReason) }
                }
                deliver { delegate.webSocketTask(self, didCompleteWithError: end.error) }
            }
        }
    }

    /// An operation goes ahead: a send or ping is written, a receive waits for a message.
    private func start(_ id: Int) {
        switch operations[id] {
        case .send(let outgoing?, let done)?:
            // The message is not kept once it is handed to the writer (a large one would
            // be held twice).
            operations[id] = .send(nil, done)
            write(outgoing) { error in self.queue.async { self.written(id, error) } }
        case .send(nil, _)?:
            break
        case .ping(let payload, _)?:
            pings.append((payload, id))
            writeFrame(WebSocketFrame(fin: true, opcode: .ping, payload: payload)) { error in
                if let error { self.queue.async { self.handle(.operationFailed(id: id, error)) } }
            }
            readMore()
        case .receive?:
            receivers.append(id)
            serveReceivers()
            readMore()
        case nil:
            break
        }
    }

    private func written(_ id: Int, _ error: PorterError?) {
        if let error { handle(.operationFailed(id: id, error)) } else { handle(.answered(id: id)) }
    }

    /// How long each of the machine's timers runs.
    private func seconds(_ timer: ConnectionTaskMachine.Timer) -> Double {
        switch timer {
        case .opening: return openingTimeout
        // A closing handshake gets 5 s, and so does an app that does not read the messages
        // before a violation.
        case .closing, .violationGrace: return 5
        case .operation: return 60
        }
    }

    /// At most 123 bytes of the reason, cut at a UTF-8 character boundary (§5.5.1).
    static func closeReason(_ reason: Data) -> [UInt8] {
        Array(ConnectionTaskMachine.closePayload(code: 1000, reason: reason).dropFirst(2))
    }
}
