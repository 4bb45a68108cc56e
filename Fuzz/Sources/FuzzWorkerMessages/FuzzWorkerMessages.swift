// The plugin worker protocol (Sources/PorterPlugins/WorkerProtocol.swift): what a worker
// (a plugin's process, which may be hostile) sends the host, and what the host sends a
// worker, as JSON messages and data frames. Whatever arrives, decoding and turning the
// values into Porter's own (responses, challenges, task events, the load a data frame is
// for) never traps; a message that decodes encodes and decodes the same way.
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterPlugins

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let fallback = URL(string: "ptest://h/x")!
    _ = WorkerWire.load(ofData: bytes)
    if let m = try? JSONDecoder().decode(FromWorker.self, from: Data(bytes)) {
        switch m {
        case .response(_, let head), .redirect(_, _, let head):
            _ = head.response(fallback: fallback).suggestedFilename
        case .challenge(_, let wire):
            // The host builds the challenge of its own load from what the worker may choose.
            let c = wire.request.challenge(loading: fallback) { _ in }
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
