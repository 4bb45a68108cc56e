import Foundation
import PorterCore
import PorterSession

/// The server's side of an open connection: reads (with back-pressure), frames into
/// messages, pings answered one pong each in order, messages handed to `receive()` in
/// order, and a protocol violation reported to the machine after what came before it.
extension WebSocketTask {
    /// Reads while someone waits for a message or a pong, or while little is buffered
    /// (so pings are answered and the close is seen); a consumer that stops reading
    /// stops the reads once a message's worth waits (back-pressure on the server), as do
    /// pongs the server does not read. After a violation the connection is read only once
    /// the machine closes it (for the end of the stream).
    func readMore() {
        guard let mode, !reading, let stream, pongsInFlight < WebSocketTask.pongWindow else { return }
        guard !(parserFailed && mode == .open) else { return }
        let limit = lock.withLock { $0.maximumMessageSize }
        guard receivers.count > 0 || mode == .closing || messageBytes < limit else { return }
        reading = true
        stream.read(maxLength: 64 * 1024) { result in
            self.queue.async {
                self.reading = false
                guard self.stream === stream else { return }
                switch result {
                case .failure(let error):
                    self.finish(error, code: .abnormalClosure)
                case .success(let data):
                    if data.isEmpty { return self.handle(.peerClosed) }
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
        while let mode, stream != nil, !parserFailed, pongsInFlight < WebSocketTask.pongWindow {
            let event: WebSocketEvent?
            do {
                guard let piece = try parser.next() else { return }
                event = try assembler.take(piece)
            } catch {
                // In order: messages that came before the violation are read (and can be
                // answered) before the connection fails.
                return violation(error)
            }
            guard let event else { continue }
            switch event {
            case .message(let m):
                guard mode == .open else { continue }   // data after our close is dropped (§5.5.1)
                messages.append(m)
                messageBytes += WebSocketTask.size(m)
                serveReceivers()
            case .ping(let payload):
                if mode == .open { answerPing(payload) }
            case .pong(let payload):
                if let i = pings.firstIndex(where: { $0.payload == payload }) {
                    let id = pings.remove(at: i).id
                    handle(.answered(id: id))
                }
            case .close(let code, let reason):
                return handle(.closeFrameReceived(code: code?.rawValue, reason: reason))
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
            let id = receivers.removeFirst()
            let m = messages.removeFirst()
            messageBytes -= WebSocketTask.size(m)
            answers[id] = m
            handle(.answered(id: id))
            appHasTheTurn = receivers.isEmpty
        }
        // The app asks past the last message (before a violation, the connection fails now).
        if !receivers.isEmpty, messages.isEmpty { handle(.appWaits) }
    }
}
