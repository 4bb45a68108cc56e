/// The handshake both sides send first: which service they speak for and the range of
/// protocol versions they know. The accepting side answers with one version (the highest
/// both know) or a goodbye saying why not.
///
/// Payload: "PORTER-IPC", the lowest and highest version (2 bytes each, big-endian), then
/// the service name's length (1 byte) and its UTF-8 bytes.
public struct Hello: Sendable, Equatable {
    static let magic = Array("PORTER-IPC".utf8)

    public var service: String
    public var minimumVersion: UInt16
    public var maximumVersion: UInt16

    public init(service: String, minimumVersion: UInt16, maximumVersion: UInt16) {
        self.service = service
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
    }

    public var frame: Frame {
        var p = Hello.magic
        p += [UInt8(minimumVersion >> 8), UInt8(minimumVersion & 0xFF), UInt8(maximumVersion >> 8), UInt8(maximumVersion & 0xFF)]
        let name = Array(service.utf8.prefix(255))
        p.append(UInt8(name.count))
        p += name
        return Frame(kind: .hello, payload: p)
    }

    public init(frame: Frame) throws(IPCError) {
        guard frame.kind == .hello else {
            throw IPCError(.malformed, "expected the handshake, got a frame of kind \(frame.kind)")
        }
        let p = frame.payload
        let m = Hello.magic.count
        guard p.count >= m + 5, Array(p[0..<m]) == Hello.magic else {
            throw IPCError(.malformed, "not a PorterIPC handshake")
        }
        let low = UInt16(p[m]) << 8 | UInt16(p[m + 1])
        let high = UInt16(p[m + 2]) << 8 | UInt16(p[m + 3])
        let n = Int(p[m + 4])
        guard p.count == m + 5 + n, low <= high, let name = String(validating: p[(m + 5)...], as: UTF8.self) else {
            throw IPCError(.malformed, "a handshake with a bad version range or service name")
        }
        self.init(service: name, minimumVersion: low, maximumVersion: high)
    }

    /// The version an acceptor speaking `self` picks for `peer`, or why there is none.
    public func agree(with peer: Hello) throws(IPCError) -> UInt16 {
        guard peer.service == service else {
            throw IPCError(.versionMismatch, "this is \(service), not \(peer.service)")
        }
        let version = min(maximumVersion, peer.maximumVersion)
        guard version >= max(minimumVersion, peer.minimumVersion) else {
            throw IPCError(.versionMismatch,
                "\(service) speaks versions \(minimumVersion)–\(maximumVersion), the peer \(peer.minimumVersion)–\(peer.maximumVersion)")
        }
        return version
    }
}
