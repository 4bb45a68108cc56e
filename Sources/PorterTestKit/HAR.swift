import Foundation

/// An HTTP Archive, version 1.2 (the format browsers' developer tools import and export:
/// http://www.softwareishard.com/blog/har-12-spec/). Field names are the spec's; Porter's
/// own additions start with an underscore, as the spec asks of custom fields.
public struct HAR: Codable, Sendable {
    public var log: Log
    public init(log: Log) { self.log = log }

    public struct Log: Codable, Sendable {
        public var version: String
        public var creator: Creator
        public var pages: [Page]?
        public var entries: [Entry]
        public var comment: String?
    }
    public struct Creator: Codable, Sendable {
        public var name: String
        public var version: String
    }
    public struct Page: Codable, Sendable {
        public var startedDateTime: String
        public var id: String
        public var title: String
        public var pageTimings: [String: Double]
    }
    public struct Entry: Codable, Sendable {
        public var pageref: String?
        /// ISO 8601 with milliseconds and a zone ("2026-11-25T10:00:00.123Z").
        public var startedDateTime: String
        /// Total milliseconds: the sum of the non-negative `timings`.
        public var time: Double
        public var request: HTTPRequest
        public var response: HTTPResponse
        public var cache: Cache
        public var timings: Timings
        public var serverIPAddress: String?
        public var connection: String?
        public var comment: String?
        /// Porter: how a load that got no response ended (`PorterError.Code`'s name) and
        /// its message; replay fails the load the same way.
        public var _error: String?
        public var _errorCode: Int?
    }
    public struct NameValue: Codable, Sendable, Equatable {
        public var name: String
        public var value: String
        public init(name: String, value: String) { self.name = name; self.value = value }
    }
    public struct Cookie: Codable, Sendable {
        public var name: String
        public var value: String
        public var path: String?
        public var domain: String?
        public var expires: String?
        public var httpOnly: Bool?
        public var secure: Bool?
    }
    public struct PostData: Codable, Sendable {
        public var mimeType: String
        public var text: String
        /// Porter: "base64" when `text` is the body in base64 (a body that is not UTF-8).
        public var _encoding: String?
        public var params: [NameValue]?
    }
    public struct HTTPRequest: Codable, Sendable {
        public var method: String
        public var url: String
        public var httpVersion: String
        public var cookies: [Cookie]
        public var headers: [NameValue]
        public var queryString: [NameValue]
        public var postData: PostData?
        public var headersSize: Int
        public var bodySize: Int
    }
    public struct Content: Codable, Sendable {
        public var size: Int
        public var compression: Int?
        public var mimeType: String
        public var text: String?
        /// "base64" when `text` is base64 (bodies that are not UTF-8 text).
        public var encoding: String?
        public var comment: String?
    }
    public struct HTTPResponse: Codable, Sendable {
        public var status: Int
        public var statusText: String
        public var httpVersion: String
        public var cookies: [Cookie]
        public var headers: [NameValue]
        public var content: Content
        public var redirectURL: String
        public var headersSize: Int
        public var bodySize: Int
    }
    public struct Cache: Codable, Sendable {
        public init() {}
    }
    /// Milliseconds; -1 where the phase does not apply (blocked, dns, connect, ssl).
    public struct Timings: Codable, Sendable {
        public var blocked: Double
        public var dns: Double
        public var connect: Double
        public var send: Double
        public var wait: Double
        public var receive: Double
        public var ssl: Double
    }

    /// Reads a HAR file (from Porter or a browser).
    public static func read(from url: URL) throws -> HAR {
        do {
            return try JSONDecoder().decode(HAR.self, from: Data(contentsOf: url))
        } catch {
            throw PorterTestError("cannot read the HAR file \(url.path): \(error)")
        }
    }

    public func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    public func write(to url: URL) throws {
        try encoded().write(to: url, options: .atomic)
    }

    /// ISO 8601 with milliseconds, UTC.
    static func timestamp(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: date)
    }
}

/// An error of the test kit itself (a file it cannot read, a condition it cannot apply).
public struct PorterTestError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
