import Foundation
import PorterCore
import PorterSession

/// The client's side: messages encoded (compressed when agreed and smaller), masked in
/// one copy, written in the order asked (the machine holds sends asked before the opening).
/// A large message sent plain is masked and written a piece at a time from the app's own
/// bytes, so it is never held a second time whole; frames asked meanwhile (pongs, pings,
/// the close, the next messages) wait for its last piece, since nothing may come between
/// the pieces of one frame.
extension WebSocketTask {
    /// Plain payloads larger than this go out a piece of this size at a time (a multiple
    /// of 4: each piece starts the mask's phase over).
    static let writePiece = 256 << 10

    func write(_ outgoing: Outgoing, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        switch outgoing {
        case .control(let frame): writeFrame(frame, completion)
        case .message(let message): writeMessage(message, completion)
        }
    }

    func writeFrame(_ frame: WebSocketFrame, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        if writingInPieces { return heldWrites.append { self.writeFrame(frame, completion) } }
        guard let stream else { return completion(connectionGone()) }
        let data = frame.payload.withUnsafeBytes {
            WebSocketFrame.encode(fin: frame.fin, opcode: frame.opcode, rsv1: frame.rsv1, payload: $0, mask: WebSocketTask.newMask())
        }
        stream.write(data, completion)
    }

    private func writeMessage(_ message: Message, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        if writingInPieces { return heldWrites.append { self.writeMessage(message, completion) } }
        guard let stream else { return completion(connectionGone()) }
        let (opcode, length): (WebSocketFrame.Opcode, Int)
        switch message {
        case .data(let d): (opcode, length) = (.binary, d.count)
        case .string(let s): (opcode, length) = (.text, s.utf8.count)
        }
        // Compressed when agreed and smaller (the compressed frame is its own buffer).
        if let deflater, let frame = withBytes(of: message, { compressedFrame(opcode, $0, deflater) }) {
            return stream.write(frame, completion)
        }
        if length > WebSocketTask.writePiece {
            let key = WebSocketTask.newMask()
            let header = WebSocketFrame.header(fin: true, opcode: opcode, rsv1: false, length: length, mask: key)
            writingInPieces = true
            return writePieces(of: message, length: length, from: 0, header: header, key: key, to: stream, completion)
        }
        let frame = withBytes(of: message) {
            WebSocketFrame.encode(fin: true, opcode: opcode, rsv1: false, payload: $0, mask: WebSocketTask.newMask())
        }
        stream.write(frame, completion)
    }

    /// The payload bytes of `message`, without a copy (a native string's UTF-8 is contiguous).
    private func withBytes<R>(of message: Message, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        switch message {
        case .data(let d): return d.withUnsafeBytes(body)
        case .string(let s):
            var text = s
            return text.withUTF8 { body(UnsafeRawBufferPointer($0)) }
        }
    }

    /// The piece of `message`'s frame from payload byte `offset` (the header with the
    /// first), then the next once the stream took it; after the last (or a failure) the
    /// held frames go, in order.
    private func writePieces(of message: Message, length: Int, from offset: Int, header: [UInt8], key: (UInt8, UInt8, UInt8, UInt8),
                             to stream: any ByteStream, _ completion: @escaping @Sendable (PorterError?) -> Void) {
        let end = min(length, offset + WebSocketTask.writePiece)
        let data = withBytes(of: message) {
            WebSocketFrame.masked(header: offset == 0 ? header : [], payload: UnsafeRawBufferPointer(rebasing: $0[offset..<end]), key: key)
        }
        stream.write(data) { error in
            self.queue.async {
                if error == nil, end < length {
                    return self.writePieces(of: message, length: length, from: end, header: header, key: key, to: stream, completion)
                }
                self.writingInPieces = false
                completion(error)
                while !self.writingInPieces, !self.heldWrites.isEmpty { self.heldWrites.removeFirst()() }
            }
        }
    }

    /// The message compressed into the frame's own buffer, after room for its header;
    /// given up (nil, the buffer freed) as soon as it would not be smaller, or when its
    /// first `writePiece` bytes did not shrink (a large incompressible message is then sent
    /// in pieces, never held whole twice).
    private func compressedFrame(_ opcode: WebSocketFrame.Opcode, _ payload: UnsafeRawBufferPointer,
                                 _ deflater: WebSocketDeflateStream) -> Data? {
        let room = WebSocketFrame.largestHeader
        var frame = Data(capacity: room + payload.count)
        frame.count = room
        guard deflater.deflate(payload, appendingTo: &frame, limit: payload.count - 1, probe: WebSocketTask.writePiece) else {
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
