/// A parsed MIME type (WHATWG MIME Sniffing "parse a MIME type"): lower-cased type
/// and subtype, parameters in order with lower-cased names and the first of each name
/// kept.
public struct MIMEType: Sendable, Equatable, CustomStringConvertible {
    public var type: String
    public var subtype: String
    public var parameters: [(name: String, value: String)]

    public init(type: String, subtype: String, parameters: [(name: String, value: String)] = []) {
        self.type = type
        self.subtype = subtype
        self.parameters = parameters
    }

    public static func == (a: MIMEType, b: MIMEType) -> Bool {
        a.type == b.type && a.subtype == b.subtype && a.parameters.elementsEqual(b.parameters) { $0 == $1 }
    }

    /// "type/subtype".
    public var essence: String { type + "/" + subtype }

    public func parameter(_ name: String) -> String? {
        let n = name.lowercased()
        return parameters.first { $0.name == n }?.value
    }

    /// Serialized form; values that are not all token characters are quoted.
    public var description: String {
        var s = essence
        for (name, value) in parameters {
            s += ";" + name + "="
            if !value.isEmpty && value.utf8.allSatisfy(MIMEType.isTokenByte) {
                s += value
            } else {
                var quoted = "\""
                for ch in value {
                    if ch == "\"" || ch == "\\" { quoted.append("\\") }
                    quoted.append(ch)
                }
                s += quoted + "\""
            }
        }
        return s
    }

    static func isTokenByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
             UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
             UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"):
            return true
        default:
            return false
        }
    }

    /// Characters allowed in a quoted-string: tab, 0x20–0x7E, 0x80–0xFF.
    static func isQuotedStringScalar(_ s: Unicode.Scalar) -> Bool {
        s == "\t" || (s.value >= 0x20 && s.value <= 0x7E) || (s.value >= 0x80 && s.value <= 0xFF)
    }


    /// The essence of `text` when `text` is nothing but a lower-case "type/subtype" of
    /// token bytes (what `MIMEType(parsing: text)?.essence` gives then, with no
    /// parameters); nil for anything else, which the full parse handles. Most responses
    /// carry such a Content-Type, and the parse costs a few thousand instructions.
    public static func bareEssence(_ text: String) -> String? {
        // On the bytes in place (a native string's are contiguous; any other goes to the parse).
        let bare = text.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            var slash = -1
            for i in 0..<bytes.count {
                let b = bytes[i]
                if b == UInt8(ascii: "/") {
                    guard slash < 0, i > 0 else { return false }
                    slash = i
                } else if !isTokenByte(b) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z")) {
                    return false
                }
            }
            return slash > 0 && slash < bytes.count - 1
        }
        return bare == true ? text : nil
    }

    /// Parses `text`; nil when it is not a valid MIME type.
    public init?(parsing text: String) {
        // Every delimiter is ASCII, so the text is walked as UTF-8 bytes and cut only at
        // ASCII bytes: each piece is valid UTF-8 again (a scalar walk built every piece a
        // scalar at a time, ~11k instructions per Content-Type).
        let bytes = Array(text.utf8)
        @inline(__always) func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }
        var start = 0, end = bytes.count
        while start < end, isSpace(bytes[start]) { start += 1 }
        while end > start, isSpace(bytes[end - 1]) { end -= 1 }
        var pos = start
        func piece(_ from: Int, _ to: Int) -> String {
            bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[from..<to]), as: UTF8.self) }
        }
        func collect(until stop: (UInt8) -> Bool, trimmingTrailingSpace: Bool = false) -> String {
            let from = pos
            while pos < end, !stop(bytes[pos]) { pos += 1 }
            var to = pos
            if trimmingTrailingSpace { while to > from, isSpace(bytes[to - 1]) { to -= 1 } }
            return piece(from, to)
        }
        func isToken(_ s: String) -> Bool { !s.isEmpty && s.utf8.allSatisfy(MIMEType.isTokenByte) }

        let type = collect { $0 == UInt8(ascii: "/") }
        guard isToken(type), pos < end else { return nil }
        pos += 1
        let subtype = collect(until: { $0 == UInt8(ascii: ";") }, trimmingTrailingSpace: true)
        guard isToken(subtype) else { return nil }
        var params: [(name: String, value: String)] = []
        while pos < end {
            pos += 1  // ";"
            while pos < end, isSpace(bytes[pos]) { pos += 1 }
            let name = collect { $0 == UInt8(ascii: ";") || $0 == UInt8(ascii: "=") }.lowercased()
            if pos < end {
                if bytes[pos] == UInt8(ascii: ";") { continue }
                pos += 1  // "="
            }
            if pos >= end { break }
            var value: String
            if bytes[pos] == UInt8(ascii: "\"") {
                pos += 1
                var out: [UInt8] = []
                while pos < end {
                    let c = bytes[pos]
                    if c == UInt8(ascii: "\"") { pos += 1; break }
                    if c == UInt8(ascii: "\\") {
                        pos += 1
                        if pos >= end { out.append(c); break }
                    }
                    // A multi-byte scalar after a backslash arrives byte by byte: none of
                    // its bytes is a quote or a backslash.
                    out.append(bytes[pos])
                    pos += 1
                }
                value = String(decoding: out, as: UTF8.self)
                _ = collect { $0 == UInt8(ascii: ";") }
            } else {
                value = collect(until: { $0 == UInt8(ascii: ";") }, trimmingTrailingSpace: true)
                if value.isEmpty { continue }
            }
            if isToken(name), value.unicodeScalars.allSatisfy(MIMEType.isQuotedStringScalar),
               !params.contains(where: { $0.name == name }) {
                params.append((name, value))
            }
        }
        self.type = type.lowercased()
        self.subtype = subtype.lowercased()
        self.parameters = params
    }
}
