import Foundation
import HTTPTypes

// Partial content (RFC 9111 §3.3-3.4, RFC 9110 §14): the 206 responses a cache stores, the
// ranges it answers from them, and a stored part combined with a fresh remainder.

extension HTTPCacheRules {
    /// One range of bytes in a Content-Range field: "bytes 0-4/10" (`total` nil for "/*").
    public struct ByteRange: Sendable, Equatable {
        public var first: Int
        public var last: Int
        public var total: Int?
        public var count: Int { last - first + 1 }
    }

    /// The Content-Range of a 206: one range, "bytes first-last/total" (or "/*"); nil for
    /// anything else (several ranges are multipart/byteranges and have none).
    public static func contentRange(_ response: Response) -> ByteRange? {
        guard let value = response.headerFields.combined(.contentRange)?.trimmingCharacters(in: .whitespaces),
              value.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = value.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let halves = spec.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        let ends = halves[0].split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        func digits(_ t: Substring) -> Int? {
            guard !t.isEmpty, t.utf8.count <= 18, t.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            return Int(t)
        }
        guard ends.count == 2, let first = digits(ends[0]), let last = digits(ends[1]), last >= first else { return nil }
        if halves[1] == "*" { return ByteRange(first: first, last: last, total: nil) }
        guard let total = digits(halves[1]), last < total else { return nil }
        return ByteRange(first: first, last: last, total: total)
    }

    /// What a stored response holds: all of the representation (a 200 and the like:
    /// from 0, its body's size), or one part of it (a 206 whose body is its range).
    static func storedRange(_ cached: CachedResponse) -> ByteRange? {
        guard cached.response.statusCode == 206 else {
            return ByteRange(first: 0, last: cached.data.count - 1, total: cached.data.count)
        }
        guard let r = contentRange(cached.response), r.total != nil, r.count == cached.data.count else { return nil }
        return r
    }

    /// Whether the stored response is an incomplete one (§3.3): a part of the representation.
    public static func isPartial(_ cached: CachedResponse) -> Bool { cached.response.statusCode == 206 }

    /// The one range of bytes a request's Range field asks for, resolved against a
    /// representation of `total` bytes: "a-b", "a-", "-n". nil without a Range field, for
    /// several ranges or another unit; `.unsatisfiable` when it starts past the end.
    enum Requested { case range(Int, Int), unsatisfiable }
    static func requestedRange(_ request: Request, total: Int) -> Requested? {
        guard let value = request.headerFields.combined(.range)?.trimmingCharacters(in: .whitespaces),
              value.lowercased().hasPrefix("bytes="), !value.contains(",") else { return nil }
        let spec = value.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        func digits(_ t: Substring) -> Int? {
            let t = t.trimmingCharacters(in: .whitespaces)
            guard !t.isEmpty, t.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            return Int(t) ?? Int.max
        }
        if parts[0].trimmingCharacters(in: .whitespaces).isEmpty {
            guard let n = digits(parts[1]), n > 0 else { return nil }
            return total == 0 ? .unsatisfiable : .range(max(0, total - n), total - 1)
        }
        guard let a = digits(parts[0]) else { return nil }
        if a >= total { return .unsatisfiable }
        if parts[1].trimmingCharacters(in: .whitespaces).isEmpty { return .range(a, total - 1) }
        guard let b = digits(parts[1]), b >= a else { return nil }
        return .range(a, min(b, total - 1))
    }

    /// A Range request answered from what is stored (RFC 9111 §3.3-3.4, RFC 9110 §14.2):
    /// one range of bytes ("a-b", "a-", "-n") as a 206 with its Content-Range, cut from a
    /// stored full response or from a stored part that holds all of it; a 416 for a range
    /// past the end. nil when the request has no Range field, asks for several ranges (a
    /// full stored response is then the answer, as a server may give), or asks for bytes a
    /// stored part does not hold (the network answers).
    public static func rangeAnswer(for request: Request, _ cached: CachedResponse) -> (Response, Data)? {
        guard let held = storedRange(cached), let total = held.total,
              cached.response.statusCode == 200 || cached.response.statusCode == 206,
              let asked = requestedRange(request, total: total) else { return nil }
        var r = cached.response
        guard case .range(let first, let last) = asked else {
            r.statusCode = 416
            r.statusLine = "HTTP/1.1 416 Range Not Satisfiable"
            r.headerFields[.contentRange] = "bytes */\(total)"
            r.headerFields[.contentLength] = "0"
            r.expectedContentLength = 0
            return (r, Data())
        }
        guard first >= held.first, last <= held.last else { return nil }
        let body = cached.data.subdata(in: (first - held.first)..<(last - held.first + 1))
        r.statusCode = 206
        r.statusLine = "HTTP/1.1 206 Partial Content"
        r.headerFields[.contentRange] = "bytes \(first)-\(last)/\(total)"
        r.headerFields[.contentLength] = String(body.count)
        r.expectedContentLength = Int64(body.count)
        return (r, body)
    }

    /// RFC 9110 §8.8.1: the response's strong validator, if it has one: an ETag without
    /// "W/", or a Last-Modified at least a minute older than its Date (§8.8.2.2). Parts
    /// combine only when they share one (§3.4).
    public static func strongValidator(_ response: Response) -> String? {
        if let etag = response.headerFields.combined(.eTag)?.trimmingCharacters(in: .whitespaces) {
            return etag.hasPrefix("W/") || etag.isEmpty ? nil : etag
        }
        if let text = response.headerFields.combined(.lastModified), let modified = HTTPDate.parse(text),
           let date = httpDate(response.headerFields.combined(.date)), date.timeIntervalSince(modified) >= 60 {
            return text.trimmingCharacters(in: .whitespaces)
        }
        return nil
    }

    /// §3.4 / RFC 9110 §15.3.7.3: what the cache keeps when `new` arrives for a variant
    /// that holds `stored`. A full response replaces what was there. A 206 is kept only as
    /// one range whose body is its size; it is combined with a stored part of the same
    /// representation (the same strong validator and length) that it touches or
    /// overlaps, the new bytes and head fields winning, and becomes a full 200 once it
    /// holds every byte (up to `maximumBodyBytes`; past that the new part stays alone, so
    /// memory stays bounded however many parts arrive); a stored full response with the same strong validator stays (nil:
    /// keep what is stored); otherwise the part replaces it.
    public static func combine(stored: CachedResponse?, with new: CachedResponse) -> CachedResponse? {
        guard new.response.statusCode == 206 else { return new }
        guard let part = storedRange(new), let total = part.total else { return nil }
        guard let stored, let held = storedRange(stored), held.total == total,
              let validator = strongValidator(new.response), strongValidator(stored.response) == validator else {
            return part.first == 0 && part.count == total ? whole(new, total: total) : new
        }
        if stored.response.statusCode != 206 { return nil }
        guard part.first <= held.last + 1, held.first <= part.last + 1 else { return new }
        let first = min(part.first, held.first), last = max(part.last, held.last)
        guard last - first + 1 <= maximumBodyBytes else { return new }
        var data = Data(count: last - first + 1)
        data.replaceSubrange((held.first - first)..<(held.last - first + 1), with: stored.data)
        data.replaceSubrange((part.first - first)..<(part.last - first + 1), with: new.data)
        var merged = new
        merged.data = data
        if first == 0, last == total - 1 { return whole(merged, total: total) }
        merged.response.headerFields[.contentRange] = "bytes \(first)-\(last)/\(total)"
        merged.response.headerFields[.contentLength] = String(data.count)
        merged.response.expectedContentLength = Int64(data.count)
        return merged
    }

    /// A response that holds every byte, as the full 200 it stands for.
    static func whole(_ c: CachedResponse, total: Int) -> CachedResponse {
        var full = c
        full.response = completeHead(c.response, total: total)
        return full
    }

    static func completeHead(_ response: Response, total: Int) -> Response {
        var r = response
        r.statusCode = 200
        r.statusLine = "HTTP/1.1 200 OK"
        r.headerFields[.contentRange] = nil
        r.headerFields[.contentLength] = String(total)
        r.expectedContentLength = Int64(total)
        r.resumeOffset = nil
        return r
    }

    /// §3.4: the answer to a request the cache completed (the stored part from byte 0,
    /// `Range` for the rest with `If-Range`): a 206 that continues the stored part to the
    /// end, of the same representation, not content-coded, with a Content-Length that is
    /// its range's (libcurl then holds the server to it, so the whole is never short),
    /// becomes the full 200 (its head, the total length), and the stored bytes go first;
    /// nil when the 206 does not continue it.
    public static func completed(_ stored: CachedResponse, by remainder: Response) -> Response? {
        let coding = remainder.headerFields.combined(.contentEncoding)?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        guard remainder.statusCode == 206, coding.isEmpty || coding == "identity",
              let held = storedRange(stored), held.first == 0, let total = held.total,
              let rest = contentRange(remainder), rest.total == total, rest.first == held.last + 1, rest.last == total - 1,
              remainder.expectedContentLength == Int64(rest.count),
              let validator = strongValidator(stored.response), strongValidator(remainder) == validator else { return nil }
        return completeHead(remainder, total: total)
    }
}
