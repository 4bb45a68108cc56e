import Foundation
import PorterCore
import HTTPTypes

/// What a download needs to continue where it stopped. Encoded as JSON `Data`, as an
/// application stores it; the partial file stays where `partialFilePath` says until
/// the resumed task adopts it (or the application deletes it).
///
/// It holds the URL as the application gave it, the method, the request's header fields
/// without `Authorization`, `Proxy-Authorization` and `Cookie`, the validator, byte
/// counts, the partial file's path and the request's string properties. The resumed
/// task asks the cookie store and the credential store (or the delegate's challenge
/// answers) again, so it never replays credentials or cookies frozen when it stopped. A
/// password written into the URL itself (`ftp://user:pw@host/`) stays in it, as the
/// application wrote it: keep such resume data private, or use the credential store.
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

    /// Header fields that never go into resume data.
    public static let secretFields: Set<String> = ["authorization", "proxy-authorization", "cookie"]

    /// Name/value pairs less the secret fields (and anything that is not a pair).
    public static func withoutSecrets(_ pairs: [[String]]) -> [[String]] {
        pairs.filter { $0.count == 2 && !secretFields.contains($0[0].lowercased()) }
    }

    /// The request's header fields less the secret ones, as name/value pairs.
    static func shareableHeaders(_ fields: HTTPFields) -> [[String]] {
        fields.filter { !secretFields.contains($0.name.canonicalName) }.map { [$0.name.rawName, $0.value] }
    }

    public func encoded() -> Data {
        (try? JSONEncoder().encode(self)) ?? Data()
    }
}
