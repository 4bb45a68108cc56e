import Foundation
import PorterCore
import HTTPTypes
import PorterStorage

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

/// The partial files resume data may name. Resume data is input an application stored
/// (or was handed), so a forged blob could name `~/.bashrc` with its size: a download only
/// continues into a file Porter made itself — a download task's private file
/// (`.porter-download-XXXXXX` in the session's download folder or the temporary folder)
/// or one porterd handed back (`task-N.part.resume` in its partial folder) — opened
/// without following a link, a regular file of this user's with one name.
public enum PartialFile {
    /// The folders a session's resume data may name (resolved).
    static func folders(downloadDirectory: String?) -> [String] {
        var list = [downloadDirectory, Session.temporaryDirectory].compactMap { $0 }
        if let state = XDG.porterStateFolder() { list.append(state + "/partial") }
        return list.compactMap { realpath($0, nil).map { p in defer { free(p) }; return String(cString: p) } }
    }

    /// Whether `name` is one Porter gives its partial files.
    public static func isPortersName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        let temp = Array(".porter-download-".utf8)
        if bytes.count == temp.count + 6, Array(bytes.prefix(temp.count)) == temp {
            return bytes.suffix(6).allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) }
        }
        return isDaemonsName(name)
    }

    /// Whether `name` is one porterd gives the partial files it hands back with resume
    /// data: `task-<digits>.part.resume` (porterd adopts no other).
    public static func isDaemonsName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        let prefix = Array("task-".utf8), suffix = Array(".part.resume".utf8)
        guard bytes.count > prefix.count + suffix.count, Array(bytes.prefix(prefix.count)) == prefix,
              Array(bytes.suffix(suffix.count)) == suffix else { return false }
        return bytes[prefix.count..<(bytes.count - suffix.count)].allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }

    /// Opens `path` for writing (appending, or from empty with `truncate`) when it is a
    /// partial file of Porter's in one of `folders` holding `size` bytes (any size when
    /// truncating); -1 otherwise, with the reason.
    static func open(_ path: String, size: Int64?, truncate: Bool, folders: [String]) -> (fd: Int32, refusal: String?) {
        guard isPortersName(PathText.lastComponent(of: path)) else {
            return (-1, "\(path) is not a partial file Porter made")
        }
        guard let parent = realpath(PathText.parent(of: path), nil) else { return (-1, "\(path) is not there") }
        let folder = String(cString: parent)
        free(parent)
        guard folders.contains(folder) else { return (-1, "\(path) is not in a folder Porter keeps partial files in") }
        // Never O_TRUNC here: the file is checked before anything in it changes.
        let fd = Glibc.open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_APPEND)
        guard fd >= 0 else { return (-1, "cannot open \(path): \(String(cString: strerror(errno)))") }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == geteuid(), st.st_nlink == 1,
              size.map({ Int64(st.st_size) == $0 }) ?? true else {
            close(fd)
            return (-1, "\(path) is not this user's partial file of the size the resume data says")
        }
        if truncate, ftruncate(fd, 0) != 0 {
            let e = errno
            close(fd)
            return (-1, "cannot empty \(path): \(String(cString: strerror(e)))")
        }
        return (fd, nil)
    }

    /// Whether resume data's file may be continued (checked when the task is made).
    static func usable(_ path: String, size: Int64, folders: [String]) -> Bool {
        guard size > 0 else { return false }
        let (fd, _) = open(path, size: size, truncate: false, folders: folders)
        if fd >= 0 { close(fd) }
        return fd >= 0
    }
}
