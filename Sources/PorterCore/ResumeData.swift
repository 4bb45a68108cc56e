import Foundation

/// What a download needs to continue where it stopped. Encoded as JSON `Data`, as an
/// application stores it; the partial file stays where `partialFilePath` says until
/// the resumed task adopts it (or the application deletes it).
public struct ResumeData: Codable, Sendable, Equatable {
    public var url: URL
    public var method: String
    /// Request headers to send again, as name/value pairs.
    public var headers: [[String]]
    /// An ETag, a Last-Modified date, or a handler's own validator.
    public var validator: String?
    public var bytesReceived: Int64
    public var expectedTotalBytes: Int64
    public var partialFilePath: String
    /// The request's string-valued properties (handler options such as an sftp
    /// known_hosts file), so the resumed load is made the same way.
    public var properties: [String: String]?
    public var version: Int = 1

    public init(url: URL, method: String, headers: [[String]], validator: String?, bytesReceived: Int64,
                expectedTotalBytes: Int64, partialFilePath: String, properties: [String: String]? = nil) {
        self.url = url
        self.method = method
        self.headers = headers
        self.validator = validator
        self.bytesReceived = bytesReceived
        self.expectedTotalBytes = expectedTotalBytes
        self.partialFilePath = partialFilePath
        self.properties = properties
    }

    public init(data: Data) throws {
        do {
            self = try JSONDecoder().decode(ResumeData.self, from: data)
        } catch {
            throw PorterError(.resumeFailed, "resume data is not valid: \(error)")
        }
    }

    public func encoded() -> Data {
        (try? JSONEncoder().encode(self)) ?? Data()
    }
}
