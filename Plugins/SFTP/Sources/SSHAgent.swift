import CSSH2
import Foundation
import PorterPluginKit

/// A client of the ssh agent protocol (draft-miller-ssh-agent) over a connection the host
/// made and handed over (`PluginClient.connect(to: .sshAgent)`, ABI 1.3): the plugin never
/// opens the agent's socket itself — isolated, it could not (its sandbox refuses
/// `socket(AF_UNIX)`), and it never learns where the agent is. One code path in process
/// and isolated. Messages are a 4-byte big-endian length, then a type byte and its body;
/// every length the agent sends is bounded before it is used.
final class SSHAgentConnection {
    static let requestIdentities: UInt8 = 11   // SSH2_AGENTC_REQUEST_IDENTITIES
    static let identitiesAnswer: UInt8 = 12    // SSH2_AGENT_IDENTITIES_ANSWER
    static let signRequest: UInt8 = 13         // SSH2_AGENTC_SIGN_REQUEST
    static let signResponse: UInt8 = 14        // SSH2_AGENT_SIGN_RESPONSE
    /// OpenSSH's own limit on an agent message.
    static let maximumMessage = 256 * 1024
    /// Keys offered to a server at most (sshd's MaxAuthTries is 6 by default).
    static let maximumIdentities = 32

    struct Identity {
        var blob: [UInt8]
        var comment: String
    }

    private let fd: Int32

    /// Takes ownership of `fd`; a read or write that stalls longer than `timeout` seconds
    /// fails.
    init(fd: Int32, timeout: Double) {
        self.fd = fd
        let seconds = timeout > 0 ? min(timeout, 120) : 30
        var t = timeval(tv_sec: Int(seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { Glibc.close(fd) }

    private func failure(_ what: String) -> PluginError {
        PluginError(Int32(PORTER_ERR_AUTHENTICATION_FAILED), "ssh agent: \(what)", causeDomain: "ssh-agent")
    }

    /// The keys the agent holds (at most `maximumIdentities`).
    func identities() throws(PluginError) -> [Identity] {
        var reply = Reader(try transact([Self.requestIdentities]))
        guard reply.byte() == Self.identitiesAnswer, let count = reply.uint32() else { throw failure("no list of keys") }
        var list: [Identity] = []
        for _ in 0..<min(Int(count), Self.maximumIdentities) {
            guard let blob = reply.string(), let comment = reply.string() else { throw failure("a malformed list of keys") }
            list.append(Identity(blob: blob, comment: String(decoding: comment, as: UTF8.self)))
        }
        return list
    }

    /// The agent's signature of `data` with the key `blob`: the signature blob alone, as
    /// libssh2's sign callback returns it (libssh2 adds the algorithm name).
    func sign(_ data: UnsafeRawBufferPointer, key blob: [UInt8]) throws(PluginError) -> [UInt8] {
        var request: [UInt8] = [Self.signRequest]
        Self.appendString(blob, to: &request)
        Self.appendString(Array(data), to: &request)
        Self.appendUInt32(0, to: &request)   // flags: the key's own algorithm
        var reply = Reader(try transact(request))
        guard reply.byte() == Self.signResponse, let signature = reply.string() else { throw failure("it did not sign") }
        var inner = Reader(signature)
        guard inner.string() != nil, let sig = inner.string(), !sig.isEmpty else { throw failure("a malformed signature") }
        return sig
    }

    /// One request and its answer.
    private func transact(_ message: [UInt8]) throws(PluginError) -> [UInt8] {
        var framed: [UInt8] = []
        Self.appendUInt32(UInt32(message.count), to: &framed)
        framed += message
        var sent = 0
        while sent < framed.count {
            let n = framed.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw failure("cannot write to it: \(String(cString: strerror(errno)))") }
            sent += n
        }
        let head = try read(4)
        let length = head.reduce(0) { $0 << 8 | Int($1) }
        guard length >= 1, length <= Self.maximumMessage else { throw failure("an answer of \(length) bytes") }
        return try read(length)
    }

    private func read(_ count: Int) throws(PluginError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var got = 0
        while got < count {
            let n = out.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress! + got, count - got, 0) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw failure(n == 0 ? "it closed the connection" : "cannot read from it: \(String(cString: strerror(errno)))") }
            got += n
        }
        return out
    }

    static func appendUInt32(_ v: UInt32, to out: inout [UInt8]) {
        out += [UInt8(truncatingIfNeeded: v >> 24), UInt8(truncatingIfNeeded: v >> 16), UInt8(truncatingIfNeeded: v >> 8),
                UInt8(truncatingIfNeeded: v)]
    }

    static func appendString(_ bytes: [UInt8], to out: inout [UInt8]) {
        appendUInt32(UInt32(truncatingIfNeeded: bytes.count), to: &out)
        out += bytes
    }

    /// Reads SSH wire values; nil past the end.
    struct Reader {
        private let bytes: [UInt8]
        private var at = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }

        mutating func byte() -> UInt8? {
            guard at < bytes.count else { return nil }
            defer { at += 1 }
            return bytes[at]
        }

        mutating func uint32() -> UInt32? {
            guard bytes.count - at >= 4 else { return nil }
            defer { at += 4 }
            return bytes[at..<(at + 4)].reduce(0) { $0 << 8 | UInt32($1) }
        }

        mutating func string() -> [UInt8]? {
            guard let n = uint32(), Int(n) <= bytes.count - at else { return nil }
            defer { at += Int(n) }
            return Array(bytes[at..<(at + Int(n))])
        }
    }
}

/// What libssh2's sign callback needs: the agent and the key being offered; the first
/// failure is kept for the log.
final class SSHAgentSigner {
    let agent: SSHAgentConnection
    let blob: [UInt8]
    var failure: PluginError?

    init(agent: SSHAgentConnection, blob: [UInt8]) {
        self.agent = agent
        self.blob = blob
    }

    /// libssh2_userauth_publickey's callback (LIBSSH2_USERAUTH_PUBLICKEY_SIGN_FUNC): signs
    /// `data` through the agent. The signature is allocated with the session's allocator,
    /// which is malloc (the session is made with libssh2's default allocators, and
    /// libssh2 frees the signature with them).
    static let callback: @convention(c) (OpaquePointer?, UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?,
                                         UnsafeMutablePointer<Int>?, UnsafePointer<UInt8>?, Int,
                                         UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32 = {
        _, sig, sigLength, data, dataLength, abstract in
        guard let sig, let sigLength, let abstract, let context = abstract.pointee, dataLength >= 0,
              data != nil || dataLength == 0 else { return -1 }
        let signer = Unmanaged<SSHAgentSigner>.fromOpaque(context).takeUnretainedValue()
        do throws(PluginError) {
            let signature = try signer.agent.sign(UnsafeRawBufferPointer(start: data, count: dataLength), key: signer.blob)
            guard let out = malloc(signature.count)?.assumingMemoryBound(to: UInt8.self) else { return -1 }
            out.initialize(from: signature, count: signature.count)
            sig.pointee = out
            sigLength.pointee = signature.count
            return 0
        } catch {
            signer.failure = error
            return -1
        }
    }
}
