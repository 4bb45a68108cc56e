import HTTPTypes

/// The byte-level parser of an HTTP response head, fed one line at a time as libcurl
/// hands them over: a status line, header fields, and the empty line that ends a block.
/// A new status line (after a 1xx, or a proxy's reply to CONNECT) starts a new block.
///
/// It runs for every header line of every response, so it works on the bytes and makes
/// a `String` only of what it keeps (Foundation's trimming, through NSString, was a
/// quarter of a small request's cost). It never traps, whatever the bytes.
struct ResponseHeadParser {
    enum LineKind: Equatable, Sendable {
        /// A line starting "HTTP/": the parser was reset to a new block with this status.
        case statusLine
        /// A header field, appended to `fields`.
        case field
        /// The empty line (CR and LF only) that ends a block.
        case end
        /// Skipped: a line without a colon, a field whose name is not a token, or a
        /// field past `maximumFieldCount`.
        case ignored
    }

    /// Fields past this many in one block are dropped: `HTTPFields` traps at 65,535,
    /// and a server could send that many in well under libcurl's header size limit.
    static let maximumFieldCount = 10_000

    /// The three-digit status code, 0 when the status line had none (or no status line came).
    var status = 0
    /// "HTTP/1.1", "HTTP/2", ...
    var version = ""
    /// The status line as sent, without the line break and trailing spaces.
    var statusLine = ""
    var fields = HTTPFields()

    init() {}

    /// Continues from a block parsed so far (`fields` can be moved in with `swap`).
    init(status: Int, version: String, statusLine: String) {
        self.status = status
        self.version = version
        self.statusLine = statusLine
    }

    /// True when an `.end` line ends the head of the final response rather than the
    /// interim block of a 1xx (also when no status line came at all).
    var isFinal: Bool { status >= 200 || status == 0 }

    /// No control character but HTAB, and valid UTF-8.
    static func isCleanCookieValue(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var ascii = true
        for b in bytes {
            if (b < 0x20 && b != 0x09) || b == 0x7F { return false }
            if b >= 0x80 { ascii = false }
        }
        return ascii || String(validating: bytes, as: UTF8.self) != nil
    }

    /// The names (nearly) every response carries, spelt as servers send them over
    /// HTTP/1.1 and in HTTP/2's lower case: a name equal byte for byte to one of them
    /// takes it ready-made, without the `String`, token check and lower-casing of
    /// `HTTPField.Name.init` — the same name that init would make of those bytes.
    private static let commonNames: [(bytes: [UInt8], name: HTTPField.Name)] = {
        let spellings = ["Server", "Date", "Content-Type", "Content-Length", "Last-Modified", "Connection", "ETag",
                         "Accept-Ranges", "Cache-Control", "Expires", "Vary", "Location", "Transfer-Encoding",
                         "Content-Encoding", "Keep-Alive", "Set-Cookie", "Age", "Alt-Svc", "Strict-Transport-Security"]
        return (spellings + spellings.map { $0.lowercased() }).compactMap { text in
            HTTPField.Name(text).map { (Array(text.utf8), $0) }
        }
    }()

    static func commonName(_ bytes: UnsafeRawBufferPointer) -> HTTPField.Name? {
        let count = bytes.count
        search: for entry in commonNames where entry.bytes.count == count {
            for i in 0..<count where entry.bytes[i] != bytes[i] { continue search }
            return entry.name
        }
        return nil
    }

    /// Parses one line (with or without its CR LF).
    mutating func feed(line raw: UnsafeRawBufferPointer) -> LineKind {
        var end = raw.count
        while end > 0, raw[end - 1] == 0x0A || raw[end - 1] == 0x0D { end -= 1 }
        if end == 0 { return .end }
        if end >= 5, raw[0] == UInt8(ascii: "H"), raw[1] == UInt8(ascii: "T"), raw[2] == UInt8(ascii: "T"),
           raw[3] == UInt8(ascii: "P"), raw[4] == UInt8(ascii: "/") {
            self = ResponseHeadParser()
            var i = 5
            while i < end, raw[i] != 0x20 { i += 1 }
            version = String(decoding: UnsafeRawBufferPointer(rebasing: raw[0..<i]), as: UTF8.self)
            while i < end, raw[i] == 0x20 { i += 1 }
            var code = 0, digits = 0
            while i < end, digits < 3, raw[i] >= 0x30, raw[i] <= 0x39 {
                code = code * 10 + Int(raw[i] - 0x30)
                digits += 1
                i += 1
            }
            status = digits == 3 ? code : 0
            var lineEnd = end
            while lineEnd > 0, raw[lineEnd - 1] == 0x0D || raw[lineEnd - 1] == 0x0A || raw[lineEnd - 1] == 0x20 { lineEnd -= 1 }
            statusLine = String(decoding: UnsafeRawBufferPointer(rebasing: raw[0..<lineEnd]), as: UTF8.self)
            return .statusLine
        }
        guard let colon = UnsafeRawBufferPointer(rebasing: raw[0..<end]).firstIndex(of: UInt8(ascii: ":")) else {
            return .ignored  // tolerate junk lines
        }
        guard fields.count < Self.maximumFieldCount else { return .ignored }
        @inline(__always) func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 }
        var nameEnd = colon
        while nameEnd > 0, isSpace(raw[nameEnd - 1]) { nameEnd -= 1 }
        var valueStart = colon + 1
        while valueStart < end, isSpace(raw[valueStart]) { valueStart += 1 }
        var valueEnd = end
        while valueEnd > valueStart, isSpace(raw[valueEnd - 1]) { valueEnd -= 1 }
        let nameBytes = UnsafeRawBufferPointer(rebasing: raw[0..<nameEnd])
        guard let n = Self.commonName(nameBytes) ?? HTTPField.Name(String(decoding: nameBytes, as: UTF8.self)) else {
            return .ignored
        }
        let valueBytes = UnsafeRawBufferPointer(rebasing: raw[valueStart..<valueEnd])
        // A cookie with a control character or bytes that are not UTF-8 is ignored whole
        // (RFC 6265bis §5.6): HTTPField would turn a NUL into a space and String would
        // turn bad bytes into U+FFFD, and the cookie would be stored and sent back mangled.
        if n == .setCookie, !Self.isCleanCookieValue(valueBytes) { return .ignored }
        let value = String(decoding: valueBytes, as: UTF8.self)
        // Room for a usual head at once: grown one by one (1, 2, 4, 8) it was three
        // reallocations per response.
        if fields.isEmpty { fields.reserveCapacity(12) }
        fields.append(HTTPField(name: n, value: value))
        return .field
    }
}
