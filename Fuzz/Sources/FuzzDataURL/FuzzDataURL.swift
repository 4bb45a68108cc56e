// data: URLs (Sources/PorterData/DataURL.swift): the whole decoder on the text as given,
// on the bytes after a "data:" prefix, and its base64 and percent decoders against
// plain reference versions written here from the WHATWG rules.
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials
@testable import PorterData

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let text = String(decoding: bytes, as: UTF8.self)
    if let decoded = try? DataURL.decode(text) {
        _ = decoded.mimeType.description
        _ = decoded.mimeType.parameter("charset")
    }
    var prefixed = Array("data:".utf8)
    prefixed.append(contentsOf: bytes)
    _ = prefixed.withUnsafeBufferPointer { try? DataURL.decode(utf8: $0, url: nil) }

    // The fast decoders must agree with the slow, obvious ones.
    let percent = DataURL.percentDecode(bytes)
    guard percent == referencePercentDecode(bytes) else { fatalError("percentDecode differs from the reference") }
    let base64 = DataURL.forgivingBase64(raw: bytes)
    guard base64 == referenceForgivingBase64(Array(bytes)) else { fatalError("forgivingBase64 differs from the reference") }
    _ = DataURL.forgivingBase64(percentDecoding: bytes)
    _ = DataURL.base64SuffixStart(text)
    return 0
}

/// WHATWG URL "percent-decode": %XX (hex) to a byte, anything else as is.
func referencePercentDecode(_ input: UnsafeBufferPointer<UInt8>) -> Data {
    func hex(_ b: UInt8) -> UInt8? {
        switch b {
        case 0x30...0x39: return b - 0x30
        case 0x41...0x46: return b - 0x41 + 10
        case 0x61...0x66: return b - 0x61 + 10
        default: return nil
        }
    }
    var out = [UInt8]()
    var i = 0
    while i < input.count {
        if input[i] == 0x25, i + 2 < input.count, let h = hex(input[i + 1]), let l = hex(input[i + 2]) {
            out.append(h << 4 | l)
            i += 3
        } else {
            out.append(input[i])
            i += 1
        }
    }
    return Data(out)
}

/// WHATWG Infra "forgiving-base64 decode", step by step.
func referenceForgivingBase64(_ input: [UInt8]) -> Data? {
    var s = input.filter { ![0x09, 0x0A, 0x0C, 0x0D, 0x20].contains($0) }
    if s.count % 4 == 0 {
        if s.suffix(2) == [0x3D, 0x3D] { s.removeLast(2) } else if s.last == 0x3D { s.removeLast() }
    }
    if s.count % 4 == 1 { return nil }
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    var out = [UInt8]()
    var buffer: UInt32 = 0, bits = 0
    for c in s {
        guard let v = alphabet.firstIndex(of: c) else { return nil }
        buffer = buffer << 6 | UInt32(v)
        bits += 6
        if bits == 24 {
            out += [UInt8(buffer >> 16 & 0xFF), UInt8(buffer >> 8 & 0xFF), UInt8(buffer & 0xFF)]
            buffer = 0
            bits = 0
        }
    }
    if bits == 12 { out.append(UInt8(buffer >> 4 & 0xFF)) }
    if bits == 18 { out += [UInt8(buffer >> 10 & 0xFF), UInt8(buffer >> 2 & 0xFF)] }
    return Data(out)
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzDataURL_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
