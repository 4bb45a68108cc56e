// Content codings (Sources/PorterHTTP/ContentDecoder.swift: gzip, deflate, br, zstd, as
// bodies from a server) and the HSTS texts (Sources/PorterStorage/HTTPStateStores.swift:
// curl's HSTS cache file and the Strict-Transport-Security value).
// Input: byte 0 picks the coding (and the ratio guard), byte 1 the chunk size libcurl
// would hand over, the rest is the body; the whole input is also read as HSTS text.
// Properties: no trap; one call never emits more than its budget plus one slice; a call
// that spent its budget, handed the same chunk again, goes on (never loops in place).
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterHTTP
@testable import PorterStorage

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    hsts(String(decoding: bytes, as: UTF8.self))
    guard size >= 2 else { return 0 }
    let codings = ["gzip", "deflate", "br", "zstd"]
    let coding = codings[Int(bytes[0] & 3)]
    let ratio: Double? = bytes[0] & 4 != 0 ? 50 : nil
    let chunk = max(1, Int(bytes[1]) * 64)
    guard let decoder = ContentDecoder(contentEncoding: coding, maximumRatio: ratio) else { fatalError("no \(coding) decoder") }
    let body = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[2...])
    let budget = 256 * 1024
    var total = 0
    var offset = 0
    outer: while offset < body.count {
        let piece = UnsafeRawBufferPointer(rebasing: body[offset..<min(body.count, offset + chunk)])
        var rounds = 0
        while true {
            var emitted = 0
            let outcome: ContentDecoder.Outcome
            do {
                outcome = try decoder.decode(piece, budget: budget) { emitted += $0.count }
            } catch {
                break outer
            }
            if emitted > budget + 64 * 1024 { fatalError("one call emitted \(emitted) bytes, budget \(budget)") }
            total += emitted
            if outcome == .consumed { break }
            if emitted == 0 { fatalError("budget spent with nothing emitted") }
            rounds += 1
            // Bodies up to 64 MiB decoded: enough to see the property, quick enough to fuzz.
            if total > 64 << 20 { break outer }
            _ = rounds
        }
        offset += piece.count
    }
    _ = decoder.isFinished
    return 0
}

private func hsts(_ text: String) {
    _ = HSTSStore.parseHeader(text)
    let entries = HSTSStore.parse(text)
    let a = Dictionary(entries.map { ($0.host, $0) }, uniquingKeysWith: { _, b in b })
    let again = HSTSStore.parse(HSTSStore.serialize(Array(a.values)))
    let b = Dictionary(again.map { ($0.host, $0) }, uniquingKeysWith: { _, b in b })
    guard a == b else { fatalError("HSTS file round trip changed \(a) into \(b)") }
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzContentDecoding_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
