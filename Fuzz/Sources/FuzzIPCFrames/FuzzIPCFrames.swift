// PorterIPC's decoder (Sources/PorterIPC/Frame.swift: FrameDecoder, Hello(frame:)) and
// porterd's messages (BackgroundClientMessage / BackgroundDaemonMessage as JSON, and lists
// of tasks in their compact layout, BackgroundTaskList): bytes
// from a peer process. Whatever arrives, in whatever pieces, the decoder hands out the
// same frames or one error and stays failed; a frame that decodes encodes to the same
// bytes; a message that decodes encodes and decodes to the same value.
import Foundation
import FuzzDriver
@testable import PorterIPC
import PorterBackground

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // Whole, then in pieces of a size taken from the first byte: the same outcome.
    func decodeAll(step: Int) -> ([Frame], IPCError?) {
        var d = FrameDecoder(maximumPayload: 4096)
        var frames: [Frame] = []
        var i = 0
        while i < bytes.count {
            d.append(bytes[i..<min(bytes.count, i + step)])
            i += step
            do {
                while let f = try d.next() { frames.append(f) }
            } catch {
                return (frames, error)
            }
        }
        return (frames, nil)
    }
    let whole = decodeAll(step: max(1, bytes.count))
    let pieces = decodeAll(step: Int(bytes.first ?? 1) % 17 + 1)
    guard whole.0 == pieces.0, whole.1 == pieces.1 else { fatalError("the frames depend on how the bytes were cut") }
    for frame in whole.0 {
        var again = FrameDecoder(maximumPayload: 4096)
        again.append(frame.encoded())
        guard (try? again.next()) == frame else { fatalError("a decoded frame does not survive encoding") }
        if frame.kind == .hello, let hello = try? Hello(frame: frame) {
            guard (try? Hello(frame: hello.frame)) == hello else { fatalError("a hello does not survive encoding") }
            _ = try? Hello(service: "porterd", minimumVersion: 1, maximumVersion: 1).agree(with: hello)
        }
        if frame.kind == .compact, let m = try? BackgroundTaskList.decode(frame.payload) {
            guard let encoded = BackgroundTaskList.encode(m), (try? BackgroundTaskList.decode(encoded)) == m else {
                fatalError("a compact list of tasks changed through encode and decode")
            }
        }
        if frame.kind == .message {
            if let m = try? Channel.decode(BackgroundClientMessage.self, from: frame.payload) {
                let encoded = try! JSONEncoder().encode(m)
                guard (try? JSONDecoder().decode(BackgroundClientMessage.self, from: encoded)) == m else {
                    fatalError("a client message changed through encode and decode")
                }
            }
            if let m = try? Channel.decode(BackgroundDaemonMessage.self, from: frame.payload) {
                let encoded = try! JSONEncoder().encode(m)
                guard (try? JSONDecoder().decode(BackgroundDaemonMessage.self, from: encoded)) == m else {
                    fatalError("a daemon message changed through encode and decode")
                }
            }
        }
    }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzIPCFrames_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
