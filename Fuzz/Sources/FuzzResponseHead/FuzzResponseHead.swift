// The HTTP response head as libcurl hands it over, one line at a time
// (Sources/PorterHTTP/ResponseHeadParser.swift, what HTTPHandler.header(_:) runs), and
// what the handler then reads from the head (Content-Type, Content-Length,
// Content-Range, Content-Disposition, the cache rules).
//
// Input: a response head (or several: 1xx blocks, a proxy's CONNECT reply), split at
// "\n" with the "\n" kept. Every line is also fed to a plain copy of the byte loop
// HTTPHandler had before the parser was extracted, and the two must agree.
import Foundation
import FuzzDriver
import HTTPTypes
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials
@testable import PorterHTTP

let url = URL(string: "https://example.com/dir/file.txt")!

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    var parser = ResponseHeadParser()
    var reference = ReferenceHead()
    var start = 0
    while start < bytes.count || (start == 0 && bytes.isEmpty) {
        var end = start
        while end < bytes.count, bytes[end] != 0x0A { end += 1 }
        if end < bytes.count { end += 1 }  // keep the "\n", as libcurl does
        let line = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
        let kind = parser.feed(line: line)
        let referenceKind = reference.feed(line)
        guard kind == referenceKind, parser.status == reference.status, parser.version == reference.version,
              parser.statusLine == reference.line, parser.fields == reference.fields else {
            fatalError("the parser and the reference disagree on \(Array(line)): \(kind) \(referenceKind)")
        }
        guard (0...999).contains(parser.status) else { fatalError("status \(parser.status)") }
        if kind == .end, parser.isFinal { readHead(parser) }
        if end == start { break }
        start = end
    }
    return 0
}

/// What HTTPHandler.makeResponse and endOfHead read from a head.
func readHead(_ head: ResponseHeadParser) {
    let contentType = head.fields[.contentType].flatMap { MIMEType(parsing: $0) }
    let length = head.fields[.contentLength].flatMap { Int64($0) } ?? -1
    var r = Response(url: url, mimeType: contentType?.essence, expectedContentLength: length,
                     textEncodingName: contentType?.parameter("charset"), statusCode: head.status,
                     headerFields: head.fields)
    r.validator = head.fields[.eTag] ?? head.fields[.lastModified]
    r.statusLine = head.statusLine.isEmpty ? nil : head.statusLine
    if let range = head.fields[.contentRange], let start = HTTPHandler.rangeStart(range) { r.resumeOffset = start }
    _ = r.suggestedFilename
    _ = HTTPCacheRules.isStorable(request: Request(url: url), response: r)
    _ = HTTPCacheRules.freshnessLifetime(r)
    if let challenge = head.fields[.wwwAuthenticate] { _ = HTTPHandler.parseChallenge(challenge) }
}

/// The byte loop of HTTPHandler.header(_:) before ResponseHeadParser existed, kept as
/// the reference the parser must match, with the two rules added since: at most
/// `maximumFieldCount` fields, and a Set-Cookie with a control character (but HTAB) or
/// bytes that are not UTF-8 is dropped.
struct ReferenceHead {
    var status = 0
    var fields = HTTPFields()
    var version = ""
    var line = ""

    mutating func feed(_ raw: UnsafeRawBufferPointer) -> ResponseHeadParser.LineKind {
        var end = raw.count
        while end > 0, raw[end - 1] == 0x0A || raw[end - 1] == 0x0D { end -= 1 }
        if end == 0 { return .end }
        if end >= 5, raw[0] == UInt8(ascii: "H"), raw[1] == UInt8(ascii: "T"), raw[2] == UInt8(ascii: "T"),
           raw[3] == UInt8(ascii: "P"), raw[4] == UInt8(ascii: "/") {
            self = ReferenceHead()
            var i = 5
            while i < end, raw[i] != 0x20 { i += 1 }
            version = String(decoding: UnsafeRawBufferPointer(rebasing: raw[0..<i]), as: UTF8.self)
            while i < end, raw[i] == 0x20 { i += 1 }
            var status = 0, digits = 0
            while i < end, digits < 3, raw[i] >= 0x30, raw[i] <= 0x39 {
                status = status * 10 + Int(raw[i] - 0x30)
                digits += 1
                i += 1
            }
            self.status = digits == 3 ? status : 0
            var lineEnd = end
            while lineEnd > 0, raw[lineEnd - 1] == 0x0D || raw[lineEnd - 1] == 0x0A || raw[lineEnd - 1] == 0x20 { lineEnd -= 1 }
            line = String(decoding: UnsafeRawBufferPointer(rebasing: raw[0..<lineEnd]), as: UTF8.self)
            return .statusLine
        }
        guard let colon = UnsafeRawBufferPointer(rebasing: raw[0..<end]).firstIndex(of: UInt8(ascii: ":")) else {
            return .ignored
        }
        guard fields.count < ResponseHeadParser.maximumFieldCount else { return .ignored }
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 }
        var nameEnd = colon
        while nameEnd > 0, isSpace(raw[nameEnd - 1]) { nameEnd -= 1 }
        var valueStart = colon + 1
        while valueStart < end, isSpace(raw[valueStart]) { valueStart += 1 }
        var valueEnd = end
        while valueEnd > valueStart, isSpace(raw[valueEnd - 1]) { valueEnd -= 1 }
        let name = String(decoding: UnsafeRawBufferPointer(rebasing: raw[0..<nameEnd]), as: UTF8.self)
        let value = String(decoding: UnsafeRawBufferPointer(rebasing: raw[valueStart..<valueEnd]), as: UTF8.self)
        guard let n = HTTPField.Name(name) else { return .ignored }
        if n == .setCookie {
            let bytes = Array(raw[valueStart..<valueEnd])
            if bytes.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) { return .ignored }
            if String(validating: bytes, as: UTF8.self) == nil { return .ignored }
        }
        fields.append(HTTPField(name: n, value: value))
        return .field
    }
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzResponseHead_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
