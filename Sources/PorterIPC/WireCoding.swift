import Foundation

/// Writes the structured fields of the compact (binary) messages of Porter's processes (the
/// worker's hot messages, porterd's lists of tasks): numbers 8 bytes big-endian, a flag
/// one byte (0 or 1), a string its UTF-8 length (4 bytes) then its bytes, a list its
/// count (4 bytes) then its items, an optional a flag then the value.
public struct WireWriter {
    public var bytes: [UInt8] = []

    public init() { bytes.reserveCapacity(512) }

    public mutating func byte(_ b: UInt8) { bytes.append(b) }

    public mutating func u64(_ v: UInt64) { withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) } }
    public mutating func i64(_ v: Int64) { u64(UInt64(bitPattern: v)) }
    public mutating func flag(_ v: Bool) { bytes.append(v ? 1 : 0) }
    public mutating func count(_ n: Int) { withUnsafeBytes(of: UInt32(truncatingIfNeeded: n).bigEndian) { bytes.append(contentsOf: $0) } }
    public mutating func string(_ s: String) {
        var s = s
        s.withUTF8 { count($0.count); bytes.append(contentsOf: $0) }
    }
    public mutating func optional<T>(_ v: T?, _ write: (inout WireWriter, T) -> Void) {
        flag(v != nil)
        if let v { write(&self, v) }
    }
    /// Name and value pairs (anything else in the list is not a pair and is left out).
    public mutating func pairs(_ list: [[String]]) {
        let pairs = list.filter { $0.count == 2 }
        count(pairs.count)
        for p in pairs { string(p[0]); string(p[1]) }
    }
}

/// Reads what `WireWriter` wrote, every length checked against what is there: a read
/// past the end, a flag that is neither 0 nor 1 or a string that is not UTF-8 is
/// malformed.
public struct WireReader {
    private let bytes: [UInt8]
    private var at: Int
    /// Bytes not read yet.
    public var remaining: Int { bytes.count - at }

    public init(_ bytes: [UInt8], from start: Int = 0) {
        self.bytes = bytes
        self.at = start
    }

    private mutating func take(_ n: Int) throws(IPCError) -> Range<Int> {
        guard n >= 0, bytes.count - at >= n else { throw IPCError(.malformed, "a compact message cut short") }
        defer { at += n }
        return at..<(at + n)
    }

    public mutating func u64() throws(IPCError) -> UInt64 {
        let r = try take(8)
        return bytes.withUnsafeBytes { UInt64(bigEndian: $0.loadUnaligned(fromByteOffset: r.lowerBound, as: UInt64.self)) }
    }
    public mutating func i64() throws(IPCError) -> Int64 { Int64(bitPattern: try u64()) }
    public mutating func byte() throws(IPCError) -> UInt8 { bytes[try take(1).lowerBound] }
    public mutating func flag() throws(IPCError) -> Bool {
        let b = bytes[try take(1).lowerBound]
        guard b <= 1 else { throw IPCError(.malformed, "a flag of \(b)") }
        return b == 1
    }
    public mutating func count() throws(IPCError) -> Int {
        let r = try take(4)
        return Int(bytes.withUnsafeBytes { UInt32(bigEndian: $0.loadUnaligned(fromByteOffset: r.lowerBound, as: UInt32.self)) })
    }
    public mutating func string() throws(IPCError) -> String {
        let r = try take(try count())
        guard let s = String(validating: bytes[r], as: UTF8.self) else { throw IPCError(.malformed, "a string that is not UTF-8") }
        return s
    }
    public mutating func optionalString() throws(IPCError) -> String? { try flag() ? try string() : nil }
    public mutating func optionalI64() throws(IPCError) -> Int64? { try flag() ? try i64() : nil }
    public mutating func pairs() throws(IPCError) -> [[String]] {
        let n = try count()
        // Each pair takes 8 bytes at least: a count past that is a lie, not a reservation.
        guard n <= (bytes.count - at) / 8 else { throw IPCError(.malformed, "\(n) pairs in a compact message too short for them") }
        var out: [[String]] = []
        out.reserveCapacity(n)
        for _ in 0..<n { out.append([try string(), try string()]) }
        return out
    }
    /// Nothing may be left over.
    public func end() throws(IPCError) {
        guard at == bytes.count else { throw IPCError(.malformed, "\(bytes.count - at) bytes left over in a compact message") }
    }
}
