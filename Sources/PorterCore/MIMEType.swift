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

    static func isHTTPWhitespace(_ s: Unicode.Scalar) -> Bool { s == " " || s == "\t" || s == "\n" || s == "\r" }

    /// Parses `text`; nil when it is not a valid MIME type.
    public init?(parsing text: String) {
        let scalars = Array(text.unicodeScalars)
        var start = 0, end = scalars.count
        while start < end, MIMEType.isHTTPWhitespace(scalars[start]) { start += 1 }
        while end > start, MIMEType.isHTTPWhitespace(scalars[end - 1]) { end -= 1 }
        var pos = start
        func collect(until stop: (Unicode.Scalar) -> Bool) -> String {
            var out = String.UnicodeScalarView()
            while pos < end, !stop(scalars[pos]) { out.append(scalars[pos]); pos += 1 }
            return String(out)
        }
        func isToken(_ s: String) -> Bool { !s.isEmpty && s.utf8.allSatisfy(MIMEType.isTokenByte) }

        let type = collect { $0 == "/" }
        guard isToken(type), pos < end else { return nil }
        pos += 1
        var subtype = collect { $0 == ";" }
        while let last = subtype.unicodeScalars.last, MIMEType.isHTTPWhitespace(last) { subtype.unicodeScalars.removeLast() }
        guard isToken(subtype) else { return nil }
        var params: [(name: String, value: String)] = []
        while pos < end {
            pos += 1  // ";"
            while pos < end, MIMEType.isHTTPWhitespace(scalars[pos]) { pos += 1 }
            let name = collect { $0 == ";" || $0 == "=" }.lowercased()
            if pos < end {
                if scalars[pos] == ";" { continue }
                pos += 1  // "="
            }
            if pos >= end { break }
            var value: String
            if scalars[pos] == "\"" {
                pos += 1
                var out = String.UnicodeScalarView()
                while pos < end {
                    let c = scalars[pos]
                    if c == "\"" { pos += 1; break }
                    if c == "\\" {
                        pos += 1
                        if pos >= end { out.append("\\"); break }
                    }
                    out.append(scalars[pos])
                    pos += 1
                }
                value = String(out)
                _ = collect { $0 == ";" }
            } else {
                value = collect { $0 == ";" }
                while let last = value.unicodeScalars.last, MIMEType.isHTTPWhitespace(last) { value.unicodeScalars.removeLast() }
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
