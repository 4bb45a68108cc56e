import Foundation
import PorterCore
import PorterSession

/// The server's side of an open connection: reads (with back-pressure), frames into
/// messages, pings answered one pong each in order, messages handed to `receive()` in
/// order, and a protocol violation failing the connection after what came before it.
extension WebSocketTask {
    /// Reads while someone waits for a message or a pong, or while little is buffered
    /// (so pings are answered and the close is seen); a consumer that stops reading
    /// stops the reads once a message's worth waits (back-pressure on the server), as do
    /// pongs the server does not read.
    func readMore() {
        guard phase == .open || phase == .closing, !reading, let stream, pendingFailure == nil,
              pongsInFlight < WebSocketTask.pongWindow else { return }
        let limit = lock.withLock { $0.maximumMessageSize }
        guard receivers.count > 0 || phase == .closing || messageBytes < limit else { return }
        reading = true
        stream.read(maxLength: 64 * 1024) { result in
            self.queue.async {
                self.reading = false
                guard self.phase == .open || self.phase == .closing else { return }
                switch result {
                case .failure(let error):
                    self.finish(error, code: .abnormalClosure)
                case .success(let data):
                    if data.isEmpty {
                        if self.phase == .closing {
                            return self.finish(nil, code: nil)
                        }
                        return self.finish(PorterError(.networkConnectionLost, "the server closed the connection without a close frame",
                                                       url: self.currentRequest.url), code: .abnormalClosure)
                    }
                    self.parser.append(data)
                    self.processFrames()
                    self.readMore()
                }
            }
        }
    }

    func processFrames() {
        // The limit applies from the next frame when it changes while open.
        let limit = lock.withLock { $0.maximumMessageSize }
        parser.maximumPayload = limit
        assembler.maximumMessageSize = limit
        while (phase == .open || phase == .closing) && pendingFailure == nil && pongsInFlight < WebSocketTask.pongWindow {
            let event: WebSocketEvent?
            do {
                guard let piece = try parser.next() else { return }
                event = try assembler.take(piece)
            } catch {
                // In order: messages that came before the violation are read (and can be
                // answered) before the connection fails.
                if messages.isEmpty && !appHasTheTurn { return failConnection(error) }
                pendingFailure = error
                armFailureGrace()
                return
            }
            guard let event else { continue }
            switch event {
            case .message(let m):
                guard phase == .open else { continue }   // data after our close is dropped (§5.5.1)
                messages.append(m)
                messageBytes += WebSocketTask.size(m)
                serveReceivers()
            case .ping(let payload):
                if !closeSent { answerPing(payload) }
            case .pong(let payload):
                if let i = pongHandlers.firstIndex(where: { $0.payload == payload }) {
                    let handler = pongHandlers.remove(at: i)
                    deliver { handler.done(nil) }
                }
            case .close(let code, let reason):
                lock.withLock { s in
                    s.closeCode = code ?? .noStatusReceived
                    s.closeReason = reason
                }
                if !closeSent {
                    closeSent = true
                    var body: [UInt8] = []
                    if let code { body = [UInt8(code.rawValue >> 8), UInt8(code.rawValue & 0xFF)] }
                    writeFrame(WebSocketFrame(fin: true, opcode: .close, payload: body)) { _ in
                        self.queue.async { self.finish(nil, code: nil) }
                    }
                    phase = .closing
                    armCloseTimer()
                } else {
                    finish(nil, code: nil)
                }
                return
            }
        }
    }

    /// Every ping gets its own pong, in order (RFC 6455 §5.5.3 would allow answering
    /// only the latest; peers and test suites expect one each). A server that pings
    /// without reading cannot grow the write queue: past `pongWindow` unsent pongs, no
    /// more frames are read until they leave.
    func answerPing(_ payload: [UInt8]) {
        pongsInFlight += 1
        writeFrame(WebSocketFrame(fin: true, opcode: .pong, payload: payload)) { _ in
            self.queue.async {
                self.pongsInFlight -= 1
                if self.pongsInFlight == WebSocketTask.pongWindow - 1 {
                    self.processFrames()
                    self.readMore()
                }
            }
        }
    }

    /// What a queued message costs: its bytes, and at least 64 (an empty message is not
    /// free to keep, so a flood of them also stops the reads).
    static func size(_ m: Message) -> Int {
        switch m {
        case .data(let d): return max(64, d.count)
        case .string(let s): return max(64, s.utf8.count)
        }
    }

    func serveReceivers() {
        while !receivers.isEmpty && !messages.isEmpty {
            let r = receivers.removeFirst()
            let m = messages.removeFirst()
            messageBytes -= WebSocketTask.size(m)
            deliver { r(.success(m)) }
            appHasTheTurn = receivers.isEmpty
        }
        // The app asks past the last message before a violation: the connection fails now.
        if !receivers.isEmpty, messages.isEmpty, let failure = pendingFailure, phase == .open {
            pendingFailure = nil
            failureGrace?.cancel()
            failConnection(failure)
        }
        if phase == .closed && messages.isEmpty && !receivers.isEmpty {
            let error = notOpen()
            let waiting = receivers
            receivers = []
            for r in waiting { deliver { r(.failure(error)) } }
        }
    }

    /// An app that does not ask for the messages before a violation does not keep the
    /// connection open: it fails 5 s later all the same.
    private func armFailureGrace() {
        let timer = DispatchWorkItem { [weak self] in
            guard let self, let failure = self.pendingFailure, self.phase == .open else { return }
            self.pendingFailure = nil
            self.failConnection(failure)
        }
        failureGrace = timer
        queue.asyncAfter(deadline: .now() + 5, execute: timer)
    }
}
