// The plugin worker protocol (Sources/PorterPlugins/WorkerProtocol.swift): what a worker
// (a plugin's process, which may be hostile) sends the host, and what the host sends a
// worker, as JSON messages and binary data frames. Whatever arrives, decoding and turning
// the values into Porter's own (responses, challenges, task events, the load a data frame
// is for) never traps; a message that decodes encodes and decodes the same way. The bytes
// are also read as the host reads a worker's stream (Channel.receive): a large frame's head
// taken out of the decoder and the rest read straight into its payload gives the same
// frames, or the same error, as the decoder alone.
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

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let fallback = URL(string: "ptest://h/x")!
    _ = WorkerWire.load(ofData: bytes)
    let step = Int(bytes.first ?? 1) % 29 + 1
    let plain = frames(of: bytes, step: step, direct: nil)
    let direct = frames(of: bytes, step: step, direct: Int(bytes.last ?? 0) % 64 + 1)
    guard plain.0 == direct.0, plain.1 == direct.1 else { fatalError("reading large frames straight into their payload changed the frames") }
    for frame in plain.0 where frame.kind == .data { _ = WorkerWire.load(ofData: frame.payload) }
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
