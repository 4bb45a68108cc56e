import Foundation
import PorterCore
import PorterSession

/// The end of a connection: the closing handshake, a failure with the close code the
/// RFC names, and the one place the task ends.
extension WebSocketTask {
    /// The server broke the protocol: send the close code the RFC names, then end.
    func failConnection(_ error: WebSocketProtocolError) {
        let failure = PorterError(error.code == .messageTooBig ? .dataLengthExceedsMaximum : .badServerResponse,
                                  "the WebSocket server broke the protocol: \(error.message) (close code \(error.code))",
                                  url: currentRequest.url)
        lock.withLock { s in
            s.closeCode = error.code
            if s.error == nil { s.error = failure }
        }
        if !closeSent {
            closeSent = true
            let body = [UInt8(error.code.rawValue >> 8), UInt8(error.code.rawValue & 0xFF)]
            writeFrame(WebSocketFrame(fin: true, opcode: .close, payload: body)) { _ in
                self.queue.async { self.finish(failure, code: error.code) }
            }
            phase = .closing
            armCloseTimer()
        } else {
            finish(failure, code: error.code)
        }
    }

    func startClose(_ code: CloseCode, _ reason: Data) {
        switch phase {
        case .open:
            // The server already broke the protocol: the close says so.
            if let failure = pendingFailure {
                pendingFailure = nil
                failureGrace?.cancel()
                return failConnection(failure)
            }
            guard CloseCode.maySend(code.rawValue) || code == .invalid else {
                return finish(PorterError(.unsupportedConfiguration, "the close code \(code) may not be sent", url: currentRequest.url), code: nil)
            }
            closeSent = true
            phase = .closing
            lock.withLock { s in
                s.closeCode = code == .invalid ? .noStatusReceived : code
                s.closeReason = reason
            }
            var body: [UInt8] = []
            if code != .invalid {
                body = [UInt8(code.rawValue >> 8), UInt8(code.rawValue & 0xFF)] + WebSocketTask.closeReason(reason)
            }
            writeFrame(WebSocketFrame(fin: true, opcode: .close, payload: body)) { _ in }
            armCloseTimer()
            readMore()
        case .closing, .closed:
            return
        case .idle, .connecting, .handshaking:
            finish(PorterError(.cancelled, "the WebSocket task was cancelled", url: currentRequest.url), code: nil)
        }
    }

    /// A closing handshake gets 5 s: a peer that neither answers nor reads (so our close
    /// frame never leaves) cannot hold the task open.
    func armCloseTimer() {
        guard closeTimer == nil else { return }
        let timer = DispatchWorkItem { [weak self] in
            guard let self else { return }
            let failure = self.lock.withLock { $0.error }
            self.finish(failure, code: nil)
        }
        closeTimer = timer
        queue.asyncAfter(deadline: .now() + 5, execute: timer)
    }

    /// At most 123 bytes of the reason, cut at a UTF-8 character boundary (§5.5.1).
    static func closeReason(_ reason: Data) -> [UInt8] {
        var bytes = Array(reason.prefix(123))
        while !bytes.isEmpty, String(validating: bytes, as: UTF8.self) == nil { bytes.removeLast() }
        return bytes
    }

    /// Ends the task: with `error` (nil: a clean close), reporting `code` as the close
    /// code when none was set (1006 for a lost connection).
    func finish(_ error: PorterError?, code: CloseCode?) {
        guard phase != .closed else { return }
        phase = .closed
        closeTimer?.cancel()
        openTimer?.cancel()
        failureGrace?.cancel()
        stream?.close()
        stream = nil
        let (closeCode, reason) = lock.withLock { s -> (CloseCode, Data?) in
            s.state = .completed
            if s.error == nil { s.error = error }
            if s.closeCode == .invalid, let code { s.closeCode = code }
            return (s.closeCode, s.closeReason)
        }
        let failure = error ?? notOpen()
        let sends = waitingSends
        waitingSends = []
        for (_, done) in sends { done(failure) }
        let pongs = pongHandlers
        pongHandlers = []
        for p in pongs { deliver { p.done(failure) } }
        serveReceivers()
        if let delegate {
            if closeCode != .invalid { deliver { delegate.webSocketTask(self, didCloseWith: closeCode, reason: reason) } }
            let ended = lock.withLock { $0.error }
            deliver { delegate.webSocketTask(self, didCompleteWithError: ended) }
        }
    }
}
