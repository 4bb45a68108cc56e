import Foundation
import HTTPTypes

/// What a handler reports before the body: the URL Loading System's URLResponse and
/// HTTPURLResponse in one value type. `statusCode` is nil for protocols without one.
public struct Response: Sendable, CustomStringConvertible {
    /// The fields, shared by copies until one changes (copy-on-write, as `Request`): a
    /// response passes from the handler through the engine, the driver, the task and the
    /// delegate, each hop a copy. Written only through `writable()`, which first makes the
    /// box unique to this value; the fields skip the run-time exclusivity check of class
    /// properties, as every access comes through a `Response` value the compiler checks.
    private struct Fields {
        var url: URL
        var mimeType: String?
        var expectedContentLength: Int64
        var textEncodingName: String?
        var statusCode: Int?
        var headerFields: HTTPFields
        var resumeOffset: Int64?
        var validator: String?
        var statusLine: String?
        var isInternalRedirect: Bool
        var explicitFilename: String?
    }

    /// The box the fields live in; copying a box copies the fields whole (no list of
    /// fields to keep in step when one is added).
    private final class Storage: @unchecked Sendable {
        @exclusivity(unchecked) var f: Fields
        init(_ f: Fields) { self.f = f }
        func copy() -> Storage { Storage(f) }
    }

    private var storage: Storage

    /// The box, made unique to this value first (copied when another value shares it).
    private mutating func writable() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        return storage
    }

    public var url: URL {
        get { storage.f.url }
        _modify { yield &writable().f.url }
    }
    public var mimeType: String? {
        get { storage.f.mimeType }
        _modify { yield &writable().f.mimeType }
    }
    /// -1 when unknown. For HTTP with a content coding, the length of the *encoded*
    /// body as the server sent it (as with URLResponse).
    public var expectedContentLength: Int64 {
        get { storage.f.expectedContentLength }
        _modify { yield &writable().f.expectedContentLength }
    }
    public var textEncodingName: String? {
        get { storage.f.textEncodingName }
        _modify { yield &writable().f.textEncodingName }
    }
    public var statusCode: Int? {
        get { storage.f.statusCode }
        _modify { yield &writable().f.statusCode }
    }
    public var headerFields: HTTPFields {
        get { storage.f.headerFields }
        _modify { yield &writable().f.headerFields }
    }
    /// Set when the body starts at this offset of the resource (a resumed download).
    public var resumeOffset: Int64? {
        get { storage.f.resumeOffset }
        _modify { yield &writable().f.resumeOffset }
    }
    /// A value that changes when the resource changes (for resume data).
    public var validator: String? {
        get { storage.f.validator }
        _modify { yield &writable().f.validator }
    }
    /// The status line as the server sent it ("HTTP/1.1 200 OK", "HTTP/2 200"), for
    /// protocols that have one; nil otherwise.
    public var statusLine: String? {
        get { storage.f.statusLine }
        _modify { yield &writable().f.statusLine }
    }
    /// A redirect the handler made up without the network, as a browser's "307 Internal
    /// Redirect": today the HSTS upgrade of `http://` to `https://`. The session follows
    /// it with the request's fields kept (the same host, now over TLS) and without
    /// counting it against `maximumRedirects`; the delegate still hears of it. Never set
    /// from anything a server sent.
    public var isInternalRedirect: Bool {
        get { storage.f.isInternalRedirect }
        _modify { yield &writable().f.isInternalRedirect }
    }
    private var explicitFilename: String? {
        get { storage.f.explicitFilename }
        _modify { yield &writable().f.explicitFilename }
    }

    public init(url: URL, mimeType: String?, expectedContentLength: Int64, textEncodingName: String? = nil,
                statusCode: Int? = nil, headerFields: HTTPFields = [:], suggestedFilename: String? = nil) {
        storage = Storage(Fields(url: url, mimeType: mimeType, expectedContentLength: expectedContentLength,
                          textEncodingName: textEncodingName, statusCode: statusCode, headerFields: headerFields,
                          resumeOffset: nil, validator: nil, statusLine: nil, isInternalRedirect: false,
                          explicitFilename: suggestedFilename))
    }

    /// A name to save the body under: the handler's suggestion, a Content-Disposition
    /// filename, the URL's last path component, or "Unknown" — each through
    /// `PathText.fileName(from:)` (the last component only, control characters replaced),
    /// and never through Foundation's path methods, which trap on some names.
    public var suggestedFilename: String {
        if let explicitFilename, let name = PathText.fileName(from: explicitFilename) { return name }
        if let cd = headerFields.combined(.contentDisposition), let name = Response.filename(fromContentDisposition: cd) {
            return name
        }
        return PathText.fileName(from: url.path) ?? "Unknown"
    }

    /// `length + offset` for lengths a server announced: -1 (unknown) when the sum does
    /// not fit, instead of a trap on a hostile Content-Length or Content-Range.
    public static func total(_ length: Int64, plus offset: Int64) -> Int64 {
        let (sum, overflow) = length.addingReportingOverflow(offset)
        return overflow || sum < 0 ? -1 : sum
    }

    public func value(forHeader name: String) -> String? {
        guard let n = HTTPField.Name(name) else { return nil }
        return headerFields.combined(n)
    }

    /// The file name a Content-Disposition value gives, through `PathText.fileName(from:)`:
    /// `filename*=UTF-8''…` (RFC 6266, percent-encoded) before `filename=` (a token or a
    /// quoted-string, whose backslash escapes are undone); nil when it names none.
    public static func filename(fromContentDisposition value: String) -> String? {
        var plain: String?
        var extended: String?
        for (name, v) in dispositionParameters(value) {
            if name == "filename*", extended == nil {
                // charset'language'percent-encoded; only UTF-8 (and ASCII) are read.
                let parts = v.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
                if parts.count == 3, ["utf-8", "us-ascii"].contains(parts[0].lowercased()) {
                    extended = String(parts[2]).removingPercentEncoding
                }
            } else if name == "filename", plain == nil {
                plain = v
            }
        }
        return (extended.flatMap(PathText.fileName(from:))) ?? plain.flatMap(PathText.fileName(from:))
    }

    /// The `name=value` parameters after the disposition type, names lower-cased, quoted
    /// values unquoted (a `;` inside quotes does not end one).
    static func dispositionParameters(_ value: String) -> [(String, String)] {
        var result: [(String, String)] = []
        var chars = Substring(value)
        guard let first = chars.firstIndex(of: ";") else { return [] }
        chars = chars[chars.index(after: first)...]
        while !chars.isEmpty {
            chars = chars.drop { $0 == " " || $0 == "\t" || $0 == ";" }
            let name = chars.prefix { $0 != "=" && $0 != ";" }
            chars = chars[name.endIndex...]
            guard chars.first == "=" else { continue }
            chars = chars.dropFirst().drop { $0 == " " || $0 == "\t" }
            var v = ""
            if chars.first == "\"" {
                chars = chars.dropFirst()
                var escaped = false
                while let c = chars.first {
                    chars = chars.dropFirst()
                    if escaped { v.append(c); escaped = false } else if c == "\\" { escaped = true } else if c == "\"" { break } else { v.append(c) }
                }
                chars = chars.drop { $0 != ";" }
            } else {
                let token = chars.prefix { $0 != ";" }
                v = token.trimmingCharacters(in: .whitespaces)
                chars = chars[token.endIndex...]
            }
            result.append((name.trimmingCharacters(in: .whitespaces).lowercased(), v))
        }
        return result
    }

    public var description: String {
        var s = url.maskingPassword
        if let statusCode { s += " \(statusCode)" }
        if let mimeType { s += " \(mimeType)" }
        return s + " (\(expectedContentLength) bytes)"
    }
}

/// Whether a response may be stored in the cache.
public enum CacheStoragePolicy: Int, Sendable {
    case allowed
    case allowedInMemoryOnly
    case notAllowed
}

/// A response and its body as held by a cache.
public struct CachedResponse: Sendable {
    public var response: Response
    public var data: Data
    public var storagePolicy: CacheStoragePolicy
    /// When the response was received (for its age); set by the cache when it stores it.
    public var storedDate: Date?
    public init(response: Response, data: Data, storagePolicy: CacheStoragePolicy = .allowed, storedDate: Date? = nil) {
        self.response = response
        self.data = data
        self.storagePolicy = storagePolicy
        self.storedDate = storedDate
    }
}

extension HTTPFields {
    /// The value of `name` as `self[name]` gives it (several fields joined), without its
    /// cost in the usual cases of none or one: the subscript joins through a lazy map even
    /// for one field (~4k instructions per lookup, three or four lookups per response).
    @inlinable
    public func combined(_ name: HTTPField.Name) -> String? {
        var found: String?
        for field in self where field.name == name {
            if found != nil { return self[name] }
            found = field.value
        }
        return found
    }
}
