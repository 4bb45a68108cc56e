// The checks a plugin's descriptor passes before Porter registers it
// (Sources/PorterPlugins/PluginLoader.swift: PluginLoader.check and isValidScheme), on a
// porter_plugin_descriptor (Sources/CPorterPlugin/include/porter_plugin.h) built from
// fuzzed bytes: name and version strings (or NULL), the scheme list (count, names, flags),
// and the handler table (its struct_size, which functions are NULL). The rest of the
// input is also a scheme for isValidScheme and an event signature for
// PluginEvents.parse (what a plugin's subscribe passes).
//
// The handler table is allocated at the size it claims (at least its struct_size field),
// as a plugin built against an older header would have it: reading past that is a bug
// AddressSanitizer reports. PORTER_FUZZ_FULL_VTABLE=1 allocates the whole struct instead.
import CPorterPlugin
import Foundation
import FuzzDriver
@testable import PorterPlugins

/// Reads the input front to back; zeros once it runs out.
struct Reader {
    var bytes: UnsafeBufferPointer<UInt8>
    var offset = 0
    mutating func byte() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }
    mutating func uint32() -> UInt32 {
        (0..<4).reduce(UInt32(0)) { acc, _ in acc << 8 | UInt32(byte()) }
    }
    /// A NUL-terminated copy of the next length-prefixed bytes, or nil (length 255).
    mutating func cString(into owned: inout [UnsafeMutableRawPointer]) -> UnsafePointer<CChar>? {
        let length = Int(byte())
        if length == 255 { return nil }
        let p = UnsafeMutablePointer<CChar>.allocate(capacity: length + 1)
        for i in 0..<length { p[i] = CChar(bitPattern: byte()) }
        p[length] = 0
        owned.append(UnsafeMutableRawPointer(p))
        return UnsafePointer(p)
    }
}

let fullVTable = ProcessInfo.processInfo.environment["PORTER_FUZZ_FULL_VTABLE"] == "1"

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = Reader(bytes: UnsafeBufferPointer(start: data, count: size))
    var owned: [UnsafeMutableRawPointer] = []
    defer { owned.forEach { $0.deallocate() } }

    let nulls = input.byte()       // bit n: leave function n of the table NULL
    let structure = input.byte()   // bit 0: no scheme list, bit 1: no table
    let sizeChoice = input.byte()
    let fullSize = MemoryLayout<porter_handler_vtable>.size
    // Mostly the right size or near it; sometimes any 32-bit value.
    let claimed: UInt32 = switch sizeChoice % 4 {
    case 0, 1: UInt32(fullSize)
    case 2: UInt32(Int(sizeChoice >> 2) % (fullSize + 8))
    default: input.uint32()
    }
    let schemeCount = Int(input.byte())

    var d = porter_plugin_descriptor()
    d.struct_size = UInt32(MemoryLayout<porter_plugin_descriptor>.size)
    d.abi_major = UInt16(PORTER_PLUGIN_ABI_MAJOR)
    d.abi_minor = UInt16(PORTER_PLUGIN_ABI_MINOR)
    d.name = input.cString(into: &owned)
    d.version = input.cString(into: &owned)
    d.scheme_count = schemeCount
    if structure & 1 == 0 {
        let list = UnsafeMutablePointer<porter_scheme>.allocate(capacity: max(schemeCount, 1))
        owned.append(UnsafeMutableRawPointer(list))
        for i in 0..<schemeCount {
            let flags = UInt32(input.byte())
            let port = UInt16(input.byte()) << 8 | UInt16(input.byte())
            list[i] = porter_scheme(name: input.cString(into: &owned), flags: flags, default_port: port, reserved: 0)
        }
        d.schemes = UnsafePointer(list)
    }

    var table = porter_handler_vtable()
    table.struct_size = claimed
    if nulls & 1 == 0 { table.can_handle = { _, _ in 1 } }
    if nulls & 2 == 0 { table.start = { _, _, _, _, _, _ in 0 } }
    if nulls & 4 == 0 { table.stop = { _ in } }
    if nulls & 8 == 0 { table.destroy = { _ in } }
    if nulls & 16 == 0 { table.pause = { _ in } }
    if nulls & 32 == 0 { table.resume = { _ in } }
    if structure & 2 == 0 {
        let bytes = fullVTable ? fullSize : max(MemoryLayout<UInt32>.size, min(Int(claimed), fullSize))
        let memory = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: MemoryLayout<porter_handler_vtable>.alignment)
        owned.append(memory)
        withUnsafeBytes(of: &table) { memory.copyMemory(from: $0.baseAddress!, byteCount: bytes) }
        d.handler = UnsafePointer(memory.assumingMemoryBound(to: porter_handler_vtable.self))
    }

    switch PluginLoader.check(d) {
    case .success(let schemes):
        guard !schemes.isEmpty, schemes.count == schemeCount, schemeCount <= 64 else { fatalError("\(schemes.count) schemes accepted") }
        guard schemes.allSatisfy({ PluginLoader.isValidScheme($0.name) }) else { fatalError("an invalid scheme accepted") }
        guard table.start != nil, table.stop != nil, table.destroy != nil, Int(claimed) >= fullSize else {
            fatalError("an incomplete handler table accepted")
        }
        _ = schemes.map(\.flagNames)
    case .failure(let refusal):
        guard !refusal.message.isEmpty else { fatalError("a refusal without a reason") }
    }
    // The scheme syntax check on its own, on the rest of the input.
    let rest = UnsafeBufferPointer(rebasing: input.bytes[min(input.offset, input.bytes.count)...])
    let scheme = String(decoding: rest, as: UTF8.self)
    if PluginLoader.isValidScheme(scheme) {
        guard scheme.utf8.count <= 64, scheme == scheme.lowercased() else { fatalError("'\(scheme)' is not a valid scheme") }
    }
    if let (result, arguments) = PluginEvents.parse(scheme) {
        guard scheme.utf8.count == arguments.count + 3, result != UInt8(ascii: "(") else { fatalError("signature '\(scheme)'") }
    }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzPluginDescriptor_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
