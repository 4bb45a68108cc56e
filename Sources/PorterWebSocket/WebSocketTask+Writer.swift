import Foundation
import PorterCore
import PorterSession

/// The client's side: messages encoded (compressed when agreed and smaller), masked in
/// one copy, written in the order asked (the machine holds sends asked before the opening).
extension WebSocketTask {
    func write(_ outgoing: Outgoing, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        switch outgoing {
        case .control(let frame): writeFrame(frame, completion)
        case .message(let message): writeMessage(message, completion)
        }
    }

    func writeFrame(_ frame: WebSocketFrame, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        guard let stream else { return completion(connectionGone()) }
        let data = frame.payload.withUnsafeBytes {
            WebSocketFrame.encode(fin: frame.fin, opcode: frame.opcode, rsv1: frame.rsv1, payload: $0, mask: WebSocketTask.newMask())
        }
        stream.write(data, completion)
    }

    private func writeMessage(_ message: Message, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        guard let stream else { return completion(connectionGone()) }
        let data: Data
        switch message {
        case .data(let d):
            data = d.withUnsafeBytes { encodeMessage(.binary, $0) }
        case .string(let s):
            var text = s
            data = text.withUTF8 { encodeMessage(.text, UnsafeRawBufferPointer($0)) }
        }
        stream.write(data, completion)
    }

    /// One frame for a whole message; compressed (RSV1) when permessage-deflate was agreed
    /// and the deflated form is smaller. A message sent plain resets the compressor, so
    /// the server's window never lacks what a later message refers to.
    private func encodeMessage(_ opcode: WebSocketFrame.Opcode, _ payload: UnsafeRawBufferPointer) -> Data {
        if let deflater, let frame = compressedFrame(opcode, payload, deflater) { return frame }
        return WebSocketFrame.encode(fin: true, opcode: opcode, rsv1: false, payload: payload, mask: WebSocketTask.newMask())
    }

    /// The message compressed into the frame's own buffer, after room for its header;
    /// given up (nil, the buffer freed) as soon as it would not be smaller.
    private func compressedFrame(_ opcode: WebSocketFrame.Opcode, _ payload: UnsafeRawBufferPointer,
                                 _ deflater: WebSocketDeflateStream) -> Data? {
        let room = WebSocketFrame.largestHeader
        var frame = Data(capacity: room + payload.count)
        frame.count = room
        guard deflater.deflate(payload, appendingTo: &frame, limit: payload.count - 1) else {
            deflater.reset()
            return nil
        }
        if deflaterResetsPerMessage { deflater.reset() }
        WebSocketFrame.encodeInPlace(&frame, fin: true, opcode: opcode, rsv1: true, mask: WebSocketTask.newMask())
        return frame
    }

    static func newMask() -> (UInt8, UInt8, UInt8, UInt8) {
        var rng = SystemRandomNumberGenerator()
        let word: UInt32 = rng.next()
        return (UInt8(truncatingIfNeeded: word), UInt8(truncatingIfNeeded: word >> 8),
                UInt8(truncatingIfNeeded: word >> 16), UInt8(truncatingIfNeeded: word >> 24))
    }
}
