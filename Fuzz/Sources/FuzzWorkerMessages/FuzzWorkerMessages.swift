// The plugin worker protocol (Sources/PorterPlugins/WorkerProtocol.swift): what a worker
// (a plugin's process, which may be hostile) sends the host, and what the host sends a
// worker, as JSON messages, compact binary messages (WorkerCodec) and tagged data frames.
// Whatever arrives, decoding and turning the values into Porter's own (responses,
// challenges, task events, the load a data frame is for) never traps; a message that
// decodes encodes and decodes the same way, and a compact one encodes to the very bytes it
// came from. The bytes are also read as the host and the worker read each other's stream
// (Channel.receiveIncoming): a large frame's head taken out of the decoder and the rest read
// straight into its payload, and a data frame split into its tag and its body, give the
// same frames, or the same error, as the decoder alone.
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterIPC
@testable import PorterPlugins

/// The frames of `bytes` fed in pieces of `step`; with `direct`, large frames (from
/// `direct` bytes of payload) are completed from the stream as Channel.receive does.
/// A stream that ends inside a frame ends with "mid-frame".
func frames(of bytes: [UInt8], step: Int, direct: Int?) -> ([Frame], IPCError?) {
    var decoder = FrameDecoder(maximumPayload: 1 << 16)
    var out: [Frame] = []
    var i = 0
    do {
        while true {
            while let f = try decoder.next() { out.append(f) }
            if let direct, let large = try decoder.takeLargeFrameHead(minimum: direct) {
                guard large.head.count < large.length else { fatalError("a whole frame was handed out as a large head") }
                let take = min(large.length - large.head.count, bytes.count - i)
                let payload = large.head + bytes[i..<(i + take)]
                i += take
                guard payload.count == large.length else { return (out, IPCError(.closed, "mid-frame")) }
                out.append(Frame(kind: large.kind, payload: payload))
                continue
            }
            guard i < bytes.count else { break }
            decoder.append(bytes[i..<min(bytes.count, i + step)])
            i += step
        }
    } catch {
        return (out, error)
    }
    return (out, decoder.bufferedCount > 0 ? IPCError(.closed, "mid-frame") : nil)
}

/// The frames of `bytes` read as `Channel.receiveIncoming` reads them: data frames by
/// their tagged head, then what the decoder holds of the body, then the stream; put back
/// together as frames to compare with the decoder's. A data frame too short for its tag
/// is an error here (and must be one for the decoder too, or be cut short).
func incomingFrames(of bytes: [UInt8], step: Int) -> ([Frame], IPCError?) {
    var decoder = FrameDecoder(maximumPayload: 1 << 16)
    var out: [Frame] = []
    var i = 0
    do {
        while true {
            if let head = try decoder.takeTaggedDataHead() {
                var body = [UInt8](repeating: 0, count: head.bodyLength)
                var filled = body.withUnsafeMutableBytes { decoder.takeBuffered(into: $0) }
                let take = min(head.bodyLength - filled, bytes.count - i)
                body.replaceSubrange(filled..<(filled + take), with: bytes[i..<(i + take)])
                i += take
                filled += take
                guard filled == head.bodyLength else { return (out, IPCError(.closed, "mid-frame")) }
                let tag = (0..<8).map { UInt8(truncatingIfNeeded: head.tag >> (56 - 8 * UInt64($0))) }
                out.append(Frame(kind: .data, payload: tag + body))
                continue
            }
            if let f = try decoder.next() { out.append(f); continue }
            guard i < bytes.count else { break }
            decoder.append(bytes[i..<min(bytes.count, i + step)])
            i += step
        }
    } catch {
        return (out, error)
    }
    return (out, decoder.bufferedCount > 0 ? IPCError(.closed, "mid-frame") : nil)
}

/// A compact message decodes (or is refused) without trapping, and one that decodes
/// encodes to the bytes it came from.
func checkCompact(_ payload: [UInt8]) {
    let frame = Frame(kind: .compact, payload: payload)
    if let m = try? WorkerCodec.decode(FromWorker.self, from: frame) {
        guard WorkerCodec.encoded(m) == frame.encoded() else { fatalError("a compact worker message changed in a round trip") }
    }
    if let m = try? WorkerCodec.decode(ToWorker.self, from: frame) {
        guard WorkerCodec.encoded(m) == frame.encoded() else { fatalError("a compact host message changed in a round trip") }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let fallback = URL(string: "ptest://h/x")!
    checkCompact(bytes)
    let step = Int(bytes.first ?? 1) % 29 + 1
    let plain = frames(of: bytes, step: step, direct: nil)
    let direct = frames(of: bytes, step: step, direct: Int(bytes.last ?? 0) % 64 + 1)
    guard plain.0 == direct.0, plain.1 == direct.1 else { fatalError("reading large frames straight into their payload changed the frames") }
    // Split data frames: the same frames, unless a data frame too short for its tag comes
    // (refused in its place, where the plain decoder hands it out or waits for the rest).
    let incoming = incomingFrames(of: bytes, step: step)
    if let e = incoming.1, e.code == .malformed, e.message.hasSuffix("too short for its tag") {
        let k = incoming.0.count
        let shortNext = plain.0.count > k && plain.0[k].kind == .data && plain.0[k].payload.count < FrameDecoder.tagLength
        guard Array(plain.0.prefix(k)) == incoming.0, shortNext || (plain.0.count == k && plain.1 != nil) else {
            fatalError("a data frame was refused as too short for its tag where it was not")
        }
    } else {
        guard incoming.0 == plain.0, incoming.1 == plain.1 else { fatalError("splitting data frames changed the frames") }
    }
    for frame in plain.0 {
        switch frame.kind {
        case .compact: checkCompact(frame.payload)
        case .message:
            _ = try? WorkerCodec.decode(FromWorker.self, from: frame)
            _ = try? WorkerCodec.decode(ToWorker.self, from: frame)
        default: break
        }
    }
    if let m = try? JSONDecoder().decode(FromWorker.self, from: Data(bytes)) {
        switch m {
        case .response(_, let head), .redirect(_, _, let head):
            _ = head.response(fallback: fallback).suggestedFilename
        case .challenge(_, let wire):
            // The host builds the challenge of its own load from what the worker may choose.
            let c = wire.request.challenge(loading: fallback, configuration: .ephemeral) { _ in }
            guard c.protectionSpace.isOrigin(of: fallback) else { fatalError("a worker chose the protection space's origin") }
            _ = WireChallenge(c)
            for answer in [WireDisposition.trust, .cancel, .password(user: "u", password: "p")] {
                _ = answer.disposition(for: c)
            }
        default:
            break
        }
        let again = try! JSONEncoder().encode(m)
        guard (try? JSONDecoder().decode(FromWorker.self, from: again)) != nil else {
            fatalError("a worker message does not survive encoding")
        }
    }
    if let m = try? JSONDecoder().decode(ToWorker.self, from: Data(bytes)) {
        switch m {
        case .event(let e): _ = e.event
        case .start(_, let r): _ = r.cached?.response(fallback: fallback)
        default: break
        }
        let again = try! JSONEncoder().encode(m)
        guard (try? JSONDecoder().decode(ToWorker.self, from: again)) != nil else {
            fatalError("a host message does not survive encoding")
        }
    }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzWorkerMessages_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
