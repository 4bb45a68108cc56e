import Foundation
import PorterCore

/// A decoded `data:` URL (RFC 2397, processed as the WHATWG Fetch standard's data: URL
/// processor does, so that sloppy real-world URLs decode as browsers decode them).
public struct DataURL: Sendable {
    public var mimeType: MIMEType
    public var body: Data

    /// `text/plain;charset=US-ASCII`, RFC 2397's default.
    public static let defaultMIMEType = MIMEType(type: "text", subtype: "plain", parameters: [("charset", "US-ASCII")])

    /// Decodes a `data:` URL given as text (a fragment, if any, is ignored).
    /// Throws `PorterError` `.badURL` (not a data: URL, no comma) or
    /// `.cannotDecodeRawData` (invalid base64).
    public static func decode(_ text: String, url: URL? = nil) throws -> DataURL {
        var text = text
        return try text.withUTF8 { try decode(utf8: $0, url: url) }
    }

    public static func decode(_ url: URL) throws -> DataURL {
        try decode(url.absoluteString, url: url)
    }

    static func decode(utf8 input: UnsafeBufferPointer<UInt8>, url: URL?) throws -> DataURL {
        // "data:" in any case.
        guard input.count >= 5,
              input[0] | 0x20 == UInt8(ascii: "d"), input[1] | 0x20 == UInt8(ascii: "a"),
              input[2] | 0x20 == UInt8(ascii: "t"), input[3] | 0x20 == UInt8(ascii: "a"),
              input[4] == UInt8(ascii: ":") else {
            throw PorterError(.badURL, "not a data: URL", url: url)
        }
        var end = input.count
        if let hash = DataURL.find(UInt8(ascii: "#"), in: input, from: 5) { end = hash }
        guard let comma = input[5..<end].firstIndex(of: UInt8(ascii: ",")) else {
            throw PorterError(.badURL, "a data: URL needs a comma between the media type and the data", url: url)
        }
        var header = String(decoding: UnsafeBufferPointer(rebasing: input[5..<comma]), as: UTF8.self)
        // Strip leading and trailing ASCII whitespace.
        header = String(header.unicodeScalars.drop { isASCIIWhitespace($0) }.reversed().drop { isASCIIWhitespace($0) }.reversed()
            .map(Character.init))
        let bodyBytes = UnsafeBufferPointer(rebasing: input[(comma + 1)..<end])

        var isBase64 = false
        if let cut = base64SuffixStart(header) {
            isBase64 = true
            header = String(header[..<cut])
        }
        var body: Data
        if isBase64 {
            guard let decoded = forgivingBase64(percentDecoding: bodyBytes) else {
                throw PorterError(.cannotDecodeRawData, "the data: URL's base64 data is not valid", url: url,
                                  cause: PorterError.Cause(domain: "data", code: 1, message: "invalid base64"))
            }
            body = decoded
        } else {
            body = percentDecode(bodyBytes)
        }
        if header.hasPrefix(";") { header = "text/plain" + header }
        let mime = MIMEType(parsing: header) ?? defaultMIMEType
        _ = body.count
        return DataURL(mimeType: mime, body: body)
    }

    /// The first index of `byte` at or after `from` (memchr: this runs over the whole URL).
    static func find(_ byte: UInt8, in input: UnsafeBufferPointer<UInt8>, from: Int) -> Int? {
        guard from < input.count, let base = input.baseAddress else { return nil }
        guard let hit = memchr(base + from, Int32(byte), input.count - from) else { return nil }
        return base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
    }

    static func isASCIIWhitespace(_ s: Unicode.Scalar) -> Bool {
        s == " " || s == "\t" || s == "\n" || s == "\r" || s == "\u{0C}"
    }

    /// Where ";base64" (";" + spaces + "base64", any case) starts when the header ends with it.
    static func base64SuffixStart(_ header: String) -> String.Index? {
        guard header.count >= 6 else { return nil }
        let tailStart = header.index(header.endIndex, offsetBy: -6)
        guard header[tailStart...].lowercased() == "base64" else { return nil }
        var i = tailStart
        while i > header.startIndex {
            let prev = header.index(before: i)
            if header[prev] == " " { i = prev; continue }
            if header[prev] == ";" { return prev }
            return nil
        }
        return nil
    }

    @inline(__always) static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// WHATWG percent-decode: "%XX" becomes a byte, anything else (a lone "%") stays.
    static func percentDecode(_ input: UnsafeBufferPointer<UInt8>) -> Data {
        guard find(UInt8(ascii: "%"), in: input, from: 0) != nil else { return Data(input) }
        var out = Data(count: input.count)
        let written = out.withUnsafeMutableBytes { (dst: UnsafeMutableRawBufferPointer) -> Int in
            var o = 0, i = 0
            let n = input.count
            while i < n {
                let b = input[i]
                if b == UInt8(ascii: "%"), i + 2 < n, let h = hexValue(input[i + 1]), let l = hexValue(input[i + 2]) {
                    dst[o] = h << 4 | l
                    i += 3
                } else {
                    dst[o] = b
                    i += 1
                }
                o += 1
            }
            return o
        }
        out.count = written
        return out
    }

    /// 0–63 for base64 characters, 0xFE for ASCII whitespace, 0xFF otherwise.
    static let base64Table: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        for (i, c) in alphabet.enumerated() { t[Int(c)] = UInt8(i) }
        for w in [0x09, 0x0A, 0x0C, 0x0D, 0x20] { t[w] = 0xFE }
        return t
    }()

    /// Percent-decodes, then decodes "forgiving-base64" (WHATWG Infra): ASCII whitespace
    /// is skipped; one or two trailing "=" are allowed when the length is a multiple of
    /// four; a length of 1 mod 4 or any other character fails. One pass, no copies.
    static func forgivingBase64(percentDecoding input: UnsafeBufferPointer<UInt8>) -> Data? {
        if find(UInt8(ascii: "%"), in: input, from: 0) != nil {
            let plain = percentDecode(input)
            return plain.withUnsafeBytes { forgivingBase64(raw: $0.bindMemory(to: UInt8.self)) }
        }
        return forgivingBase64(raw: input)
    }

    static func forgivingBase64(raw input: UnsafeBufferPointer<UInt8>) -> Data? {
        var out = Data(count: input.count / 4 * 3 + 8)
        let result: Int? = base64Table.withUnsafeBufferPointer { table in
            out.withUnsafeMutableBytes { (dst: UnsafeMutableRawBufferPointer) -> Int? in
                var acc: UInt32 = 0
                var bits = 0  // count of sextets in acc
                var o = 0
                var i = 0
                var padding = 0
                var significant = 0
                let n = input.count
                let d = dst.baseAddress!.assumingMemoryBound(to: UInt8.self)
                // Fast path: eight characters (six bytes) per step while no whitespace,
                // padding or stray character shows up; two 4-byte stores (the buffer has slack).
                let t = table.baseAddress!
                let src = input.baseAddress!
                while i + 8 <= n {
                    let a = t[Int(src[i])], b = t[Int(src[i + 1])], c = t[Int(src[i + 2])], e = t[Int(src[i + 3])]
                    let f = t[Int(src[i + 4])], g = t[Int(src[i + 5])], h = t[Int(src[i + 6])], k = t[Int(src[i + 7])]
                    if (a | b | c | e | f | g | h | k) & 0xC0 != 0 { break }
                    let v1 = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(e)
                    let v2 = UInt32(f) << 18 | UInt32(g) << 12 | UInt32(h) << 6 | UInt32(k)
                    UnsafeMutableRawPointer(d + o).storeBytes(of: (v1 << 8).bigEndian, as: UInt32.self)
                    UnsafeMutableRawPointer(d + o + 3).storeBytes(of: (v2 << 8).bigEndian, as: UInt32.self)
                    o += 6
                    i += 8
                    significant += 8
                }
                while i < n {
                    let ch = input[i]
                    i += 1
                    let v = table[Int(ch)]
                    if v == 0xFE { continue }
                    if ch == UInt8(ascii: "=") {
                        padding += 1
                        if padding > 2 { return nil }
                        continue
                    }
                    if v == 0xFF || padding > 0 { return nil }
                    acc = acc << 6 | UInt32(v)
                    bits += 1
                    significant += 1
                    if bits == 4 {
                        d[o] = UInt8(truncatingIfNeeded: acc >> 16)
                        d[o + 1] = UInt8(truncatingIfNeeded: acc >> 8)
                        d[o + 2] = UInt8(truncatingIfNeeded: acc)
                        o += 3
                        acc = 0
                        bits = 0
                    }
                }
                if padding > 0 && (significant + padding) % 4 != 0 { return nil }
                switch bits {
                case 0: break
                case 1: return nil
                case 2:
                    d[o] = UInt8(truncatingIfNeeded: acc >> 4)
                    o += 1
                case 3:
                    d[o] = UInt8(truncatingIfNeeded: acc >> 10)
                    d[o + 1] = UInt8(truncatingIfNeeded: acc >> 2)
                    o += 2
                default: break
                }
                return o
            }
        }
        guard let result else { return nil }
        out.count = result
        return out
    }
}

/// The handler for `data:` URLs. Decodes off the caller's thread and delivers the
/// body in chunks, honouring back-pressure.
public final class DataHandler: ProtocolHandler, @unchecked Sendable {
    public static var schemes: Set<String> { ["data"] }
    public static let chunkSize = 1 << 20

    private let request: Request
    private let client: any ProtocolClient
    private let queue = DispatchQueue(label: "porter.data")
    private let flow = FlowControl()
    private var body = Data()
    private var offset = 0

    public init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }

    public func startLoading() {
        queue.async { [self] in
            do {
                let decoded = try DataURL.decode(request.url)
                body = decoded.body
                var response = Response(url: request.url, mimeType: decoded.mimeType.essence,
                                        expectedContentLength: Int64(decoded.body.count),
                                        textEncodingName: decoded.mimeType.parameter("charset"))
                response.headerFields[.contentType] = decoded.mimeType.description
                client.didReceive(response, cacheStoragePolicy: .notAllowed)
                pump()
            } catch let error as PorterError {
                client.didFail(with: error)
            } catch {
                client.didFail(with: PorterError(.unknown, "\(error)", url: request.url))
            }
        }
    }

    /// Delivers chunks until paused or done (on `queue`).
    private func pump() {
        while offset < body.count {
            if flow.isStopped || flow.isPaused { return }
            let end = min(body.count, offset + DataHandler.chunkSize)
            client.didLoad(body.subdata(in: offset..<end))  // zero-based chunks: safe to index for any consumer
            offset = end
        }
        if !flow.isStopped {
            flow.stop()
            client.didFinishLoading()
        }
    }

    public func stopLoading() { flow.stop() }
    public func pauseDelivery() { flow.pause() }
    public func resumeDelivery() {
        flow.resume()
        queue.async { [self] in pump() }
    }
}
