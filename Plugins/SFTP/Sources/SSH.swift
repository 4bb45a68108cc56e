import CSSH2
import Foundation
import PorterPluginKit

/// One SSH connection of one load: TCP, handshake, host-key check, login.
final class SSHConnection {
    let load: SFTPLoad
    let session: OpaquePointer
    let socket: Int32
    var target: SFTPTarget { load.target }
    private var user: String

    init(load: SFTPLoad) throws(PluginError) {
        self.load = load
        let target = load.target
        user = target.user ?? ProcessInfo.processInfo.environment["USER"] ?? String(cString: getpwuid(geteuid()).pointee.pw_name)
        socket = try Self.connect(host: target.host, port: target.port)
        guard load.registerSocket(socket) else {
            load.closeSocket(socket)
            throw PluginError(Int32(PORTER_ERR_CANCELLED), "stopped")
        }
        guard let s = libssh2_session_init_ex(nil, nil, nil, nil) else {
            load.closeSocket(socket)
            throw PluginError(Int32(PORTER_ERR_RESOURCE_UNAVAILABLE), "libssh2 could not make a session")
        }
        session = s
        libssh2_session_set_blocking(session, 1)
        let timeout = load.request.timeoutInterval
        if timeout > 0 { libssh2_session_set_timeout(session, Int(timeout * 1000)) }
        let rc = libssh2_session_handshake(session, libssh2_socket_t(socket))
        if rc != 0 {
            let e = error(Int32(PORTER_ERR_SECURE_CONNECTION_FAILED), "SSH handshake with \(endpoint) failed")
            close()
            throw e
        }
        do { try checkHostKey() } catch { close(); throw error }
    }

    var endpoint: String { target.port == 22 ? target.host : "[\(target.host)]:\(target.port)" }

    private var sftp: OpaquePointer?

    func close() {
        if let sftp { libssh2_sftp_shutdown(sftp) }
        sftp = nil
        libssh2_session_disconnect_ex(session, SSH_DISCONNECT_BY_APPLICATION, "done", "")
        libssh2_session_free(session)
        load.closeSocket(socket)
    }

    /// A PluginError from the session's last error; the code says what kind of failure
    /// this step is, except that timeouts and lost connections say so themselves.
    func error(_ fallback: Int32, _ what: String) -> PluginError {
        var message: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        let rc = libssh2_session_last_error(session, &message, &length, 0)
        let text = message.map { String(cString: $0) } ?? "error \(rc)"
        let kind: Int32
        switch rc {
        case LIBSSH2_ERROR_TIMEOUT: kind = Int32(PORTER_ERR_TIMED_OUT)
        case LIBSSH2_ERROR_SOCKET_SEND, LIBSSH2_ERROR_SOCKET_RECV, LIBSSH2_ERROR_SOCKET_DISCONNECT:
            kind = load.isStopped ? Int32(PORTER_ERR_CANCELLED) : Int32(PORTER_ERR_NETWORK_CONNECTION_LOST)
        default: kind = fallback
        }
        return PluginError(kind, "\(what): \(text)", causeDomain: "libssh2", causeCode: Int64(rc))
    }

    private static func connect(host: String, port: Int32) throws(PluginError) -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let gai = getaddrinfo(host, String(port), &hints, &list)
        guard gai == 0, let first = list else {
            throw PluginError(Int32(PORTER_ERR_CANNOT_FIND_HOST), "cannot find host \(host): \(String(cString: gai_strerror(gai)))",
                              causeDomain: "getaddrinfo", causeCode: Int64(gai))
        }
        defer { freeaddrinfo(list) }
        var lastErrno: Int32 = 0
        var node: UnsafeMutablePointer<addrinfo>? = first
        while let a = node {
            let fd = Glibc.socket(a.pointee.ai_family, a.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), a.pointee.ai_protocol)
            if fd >= 0 {
                if Glibc.connect(fd, a.pointee.ai_addr, a.pointee.ai_addrlen) == 0 { return fd }
                lastErrno = errno
                Glibc.close(fd)
            } else {
                lastErrno = errno
            }
            node = a.pointee.ai_next
        }
        throw PluginError(Int32(PORTER_ERR_CANNOT_CONNECT_TO_HOST),
                          "cannot connect to \(host) port \(port): \(String(cString: strerror(lastErrno)))",
                          causeDomain: "errno", causeCode: Int64(lastErrno))
    }

    // MARK: - host key

    private func checkHostKey() throws(PluginError) {
        var length = 0
        var type: Int32 = 0
        guard let key = libssh2_session_hostkey(session, &length, &type), length > 0 else {
            throw error(Int32(PORTER_ERR_SECURE_CONNECTION_FAILED), "no host key from \(endpoint)")
        }
        let blob = [UInt8](UnsafeRawBufferPointer(start: key, count: length))
        let keyType: Int32
        let typeName: String
        switch type {
        case LIBSSH2_HOSTKEY_TYPE_RSA: keyType = LIBSSH2_KNOWNHOST_KEY_SSHRSA; typeName = "ssh-rsa"
        case LIBSSH2_HOSTKEY_TYPE_DSS: keyType = LIBSSH2_KNOWNHOST_KEY_SSHDSS; typeName = "ssh-dss"
        case LIBSSH2_HOSTKEY_TYPE_ECDSA_256: keyType = LIBSSH2_KNOWNHOST_KEY_ECDSA_256; typeName = "ecdsa-sha2-nistp256"
        case LIBSSH2_HOSTKEY_TYPE_ECDSA_384: keyType = LIBSSH2_KNOWNHOST_KEY_ECDSA_384; typeName = "ecdsa-sha2-nistp384"
        case LIBSSH2_HOSTKEY_TYPE_ECDSA_521: keyType = LIBSSH2_KNOWNHOST_KEY_ECDSA_521; typeName = "ecdsa-sha2-nistp521"
        case LIBSSH2_HOSTKEY_TYPE_ED25519: keyType = LIBSSH2_KNOWNHOST_KEY_ED25519; typeName = "ssh-ed25519"
        default: keyType = LIBSSH2_KNOWNHOST_KEY_UNKNOWN; typeName = "unknown"
        }
        var fingerprint = "?"
        if let hash = libssh2_hostkey_hash(session, LIBSSH2_HOSTKEY_HASH_SHA256) {
            let bytes = Data(bytes: hash, count: 32)
            fingerprint = "SHA256:" + bytes.base64EncodedString().replacingOccurrences(of: "=", with: "")
        }
        let file = load.request.properties["sftp.knownHostsFile"]
            ?? (ProcessInfo.processInfo.environment["HOME"].map { $0 + "/.ssh/known_hosts" } ?? "")
        guard let hosts = libssh2_knownhost_init(session) else {
            throw PluginError(Int32(PORTER_ERR_RESOURCE_UNAVAILABLE), "libssh2 could not read known hosts")
        }
        defer { libssh2_knownhost_free(hosts) }
        if !file.isEmpty, FileManager.default.isReadableFile(atPath: file) {
            _ = libssh2_knownhost_readfile(hosts, file, LIBSSH2_KNOWNHOST_FILE_OPENSSH)
        }
        let check = libssh2_knownhost_checkp(hosts, target.host, target.port, key, length,
                                             LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | keyType, nil)
        switch check {
        case LIBSSH2_KNOWNHOST_CHECK_MATCH:
            return
        case LIBSSH2_KNOWNHOST_CHECK_MISMATCH:
            // Never accepted, not even with --insecure: this is what an attack looks like.
            throw PluginError(Int32(PORTER_ERR_SERVER_IDENTITY_CHANGED),
                              "the host key of \(endpoint) has CHANGED (now \(typeName) \(fingerprint)); it does not match \(file). "
                              + "If the change is expected, remove the old key from that file",
                              causeDomain: "libssh2", causeCode: Int64(check))
        default:
            if load.request.insecure {
                load.client.log(Int32(PORTER_LOG_WARNING), "accepting the unknown host key of \(endpoint) (\(typeName) \(fingerprint)): insecure")
                return
            }
            let reason = "unknown host key for \(endpoint) (\(typeName) \(fingerprint))"
            let reply = load.client.challengeAndWait(
                PluginChallenge(method: .serverTrust, host: target.host, port: target.port, identity: [blob],
                                failureReason: reason),
                isCancelled: { load.isStopped })
            switch reply {
            case .trust?: return
            case .cancel?:
                throw PluginError(Int32(PORTER_ERR_USER_CANCELLED_AUTHENTICATION), "the host key of \(endpoint) was not accepted")
            default:
                throw PluginError(Int32(PORTER_ERR_SERVER_CERTIFICATE_UNTRUSTED),
                                  "\(reason) is not in \(file.isEmpty ? "known_hosts" : file)")
            }
        }
    }

    // MARK: - login

    private func methods() -> Set<String> {
        guard let list = user.withCString({ libssh2_userauth_list(session, $0, UInt32(strlen($0))) }) else { return [] }
        return Set(String(cString: list).split(separator: ",").map(String.init))
    }

    private var authenticated: Bool { libssh2_userauth_authenticated(session) != 0 }

    private func tryPassword(_ user: String, _ password: String) -> Bool {
        user.withCString { u in
            password.withCString { p in
                libssh2_userauth_password_ex(session, u, UInt32(strlen(u)), p, UInt32(strlen(p)), nil) == 0
            }
        }
    }

    private func tryKey(_ user: String, publicKey: String?, privateKey: String, passphrase: String?) -> Bool {
        user.withCString { u in
            libssh2_userauth_publickey_fromfile_ex(session, u, UInt32(strlen(u)), publicKey, privateKey, passphrase) == 0
        }
    }

    /// The keys of the user's ssh agent, through a connection the host makes and hands
    /// over (`connect_service`, ABI 1.3; the plugin declares PORTER_NEED_SSH_AGENT): the
    /// same path in process and isolated, where the sandbox would refuse the agent's
    /// socket. Each key the server accepts is signed for by the agent
    /// (`libssh2_userauth_publickey` with `SSHAgentSigner.callback`).
    private func tryAgent(_ user: String) -> Bool {
        let fd: Int32
        do {
            fd = try load.client.connect(to: .sshAgent)
        } catch {
            load.client.log(Int32(PORTER_LOG_DEBUG), "no ssh agent: \(error.message)")
            return false
        }
        let agent = SSHAgentConnection(fd: fd, timeout: load.request.timeoutInterval)
        let identities: [SSHAgentConnection.Identity]
        do {
            identities = try agent.identities()
        } catch {
            load.client.log(Int32(PORTER_LOG_WARNING), error.message)
            return false
        }
        for identity in identities where !identity.blob.isEmpty {
            if load.isStopped { return false }
            let signer = SSHAgentSigner(agent: agent, blob: identity.blob)
            var abstract: UnsafeMutableRawPointer? = Unmanaged.passUnretained(signer).toOpaque()
            let rc = withExtendedLifetime(signer) {
                user.withCString { u in
                    identity.blob.withUnsafeBufferPointer { key in
                        libssh2_userauth_publickey(session, u, key.baseAddress, key.count, SSHAgentSigner.callback, &abstract)
                    }
                }
            }
            if rc == 0 { return true }
            if let failure = signer.failure { load.client.log(Int32(PORTER_LOG_WARNING), failure.message) }
        }
        return false
    }

    /// Password from the URL, then keys (the request's, the agent's, the user's
    /// defaults), then password challenges to the application.
    func authenticate() throws(PluginError) {
        let offered = methods()
        if authenticated { return }   // "none" was accepted
        if load.isStopped { throw PluginError(Int32(PORTER_ERR_CANCELLED), "stopped") }
        var failures: Int32 = 0
        if let password = target.password, offered.contains("password") {
            if tryPassword(user, password) { return }
            failures += 1
        }
        if offered.contains("publickey") {
            if let key = load.request.properties["sftp.identityFile"] {
                if tryKey(user, publicKey: nil, privateKey: key, passphrase: nil) { return }
                failures += 1
            }
            if tryAgent(user) { return }
            if let home = ProcessInfo.processInfo.environment["HOME"] {
                for name in ["id_ed25519", "id_ecdsa", "id_rsa"] {
                    let path = "\(home)/.ssh/\(name)"
                    guard FileManager.default.isReadableFile(atPath: path) else { continue }
                    if tryKey(user, publicKey: nil, privateKey: path, passphrase: nil) { return }
                }
            }
        }
        // Ask the application, at most three times.
        var asked: Int32 = 0
        while asked < 3 {
            if load.isStopped { throw PluginError(Int32(PORTER_ERR_CANCELLED), "stopped") }
            let reply = load.client.challengeAndWait(
                PluginChallenge(method: .password, host: target.host, port: target.port, realm: "ssh",
                                previousFailureCount: failures, proposedUser: user),
                isCancelled: { load.isStopped })
            asked += 1
            switch reply {
            case .password(let u, let p)?:
                if tryPassword(u.isEmpty ? user : u, p) { return }
            case .key(let pub, let key, let passphrase)?:
                if tryKey(user, publicKey: pub, privateKey: key, passphrase: passphrase) { return }
            case .cancel?:
                throw PluginError(Int32(PORTER_ERR_USER_CANCELLED_AUTHENTICATION), "login to \(endpoint) cancelled")
            case nil where load.isStopped:
                throw PluginError(Int32(PORTER_ERR_CANCELLED), "stopped")
            default:
                if failures == 0 {
                    throw PluginError(Int32(PORTER_ERR_USER_AUTHENTICATION_REQUIRED),
                                      "\(user)@\(endpoint) needs a password or a key (server offers: \(offered.sorted().joined(separator: ", ")))")
                }
                throw error(Int32(PORTER_ERR_AUTHENTICATION_FAILED), "authentication as \(user) at \(endpoint) failed")
            }
            failures += 1
        }
        throw error(Int32(PORTER_ERR_AUTHENTICATION_FAILED), "authentication as \(user) at \(endpoint) failed")
    }

    /// An scp download channel for `path` (libssh2_scp_recv2).
    func scpReceive(_ path: String) throws(PluginError) -> SCPChannel {
        var st = libssh2_struct_stat()
        guard let channel = path.withCString({ libssh2_scp_recv2(session, $0, &st) }) else {
            throw scpError("cannot fetch \(path) over scp", writing: false)
        }
        if st.st_mode & S_IFMT == S_IFDIR {
            libssh2_channel_free(channel)
            throw PluginError(Int32(PORTER_ERR_FILE_IS_DIRECTORY), "\(path) is a folder")
        }
        return SCPChannel(connection: self, channel: channel, size: Int64(st.st_size), modified: Int64(st.st_mtim.tv_sec))
    }

    /// An scp upload channel for `path`, `size` bytes long (libssh2_scp_send64).
    func scpSend(_ path: String, mode: Int32, size: Int64) throws(PluginError) -> SCPChannel {
        guard let channel = path.withCString({ libssh2_scp_send64(session, $0, mode, size, 0, 0) }) else {
            throw scpError("cannot write \(path) over scp", writing: true)
        }
        return SCPChannel(connection: self, channel: channel, size: size, modified: 0)
    }

    /// The remote scp's complaint ("scp: /x: No such file or directory") as Porter's code.
    func scpError(_ what: String, writing: Bool) -> PluginError {
        var message: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        let rc = libssh2_session_last_error(session, &message, &length, 0)
        let text = message.map { String(cString: $0) } ?? "error \(rc)"
        let lower = text.lowercased()
        let code: Int32
        if rc == LIBSSH2_ERROR_TIMEOUT {
            code = Int32(PORTER_ERR_TIMED_OUT)
        } else if lower.contains("no such file") {
            code = Int32(PORTER_ERR_FILE_DOES_NOT_EXIST)
        } else if lower.contains("permission denied") {
            code = writing ? Int32(PORTER_ERR_CANNOT_WRITE_TO_FILE) : Int32(PORTER_ERR_NO_PERMISSIONS_TO_READ_FILE)
        } else if lower.contains("not a regular file") || lower.contains("is a directory") {
            code = Int32(PORTER_ERR_FILE_IS_DIRECTORY)
        } else if rc == LIBSSH2_ERROR_SCP_PROTOCOL && !writing {
            // libssh2 does not pass the remote scp's reason on: say what it can mean.
            return PluginError(Int32(PORTER_ERR_RESOURCE_UNAVAILABLE),
                               "\(what): the server's scp refused it (no such file, or not readable)",
                               causeDomain: "libssh2", causeCode: Int64(rc))
        } else {
            code = writing ? Int32(PORTER_ERR_CANNOT_WRITE_TO_FILE) : Int32(PORTER_ERR_RESOURCE_UNAVAILABLE)
        }
        return PluginError(code, "\(what): \(text)", causeDomain: "libssh2", causeCode: Int64(rc))
    }

    func openSFTP() throws(PluginError) -> SFTPSession {
        guard let sftp = libssh2_sftp_init(session) else {
            throw error(Int32(PORTER_ERR_RESOURCE_UNAVAILABLE), "the SFTP subsystem of \(endpoint) did not start")
        }
        self.sftp = sftp
        return SFTPSession(connection: self, sftp: sftp)
    }
}

struct SFTPAttributes {
    var size: Int64?
    var modified: Int64?
    var permissions: UInt?
    var isDirectory: Bool
    var kind: PluginListing.Kind

    init(_ a: LIBSSH2_SFTP_ATTRIBUTES) {
        let flags = a.flags
        size = flags & UInt(LIBSSH2_SFTP_ATTR_SIZE) != 0 ? Int64(a.filesize) : nil
        modified = flags & UInt(LIBSSH2_SFTP_ATTR_ACMODTIME) != 0 ? Int64(a.mtime) : nil
        let hasMode = flags & UInt(LIBSSH2_SFTP_ATTR_PERMISSIONS) != 0
        permissions = hasMode ? a.permissions : nil
        let type = a.permissions & UInt(LIBSSH2_SFTP_S_IFMT)
        isDirectory = hasMode && type == UInt(LIBSSH2_SFTP_S_IFDIR)
        if !hasMode { kind = .other } else if type == UInt(LIBSSH2_SFTP_S_IFDIR) { kind = .directory } else if type == UInt(LIBSSH2_SFTP_S_IFREG) {
            kind = .file
        } else if type == UInt(LIBSSH2_SFTP_S_IFLNK) { kind = .symlink } else { kind = .other }
    }
}

/// The SFTP channel of a connection.
final class SFTPSession {
    let connection: SSHConnection
    let sftp: OpaquePointer

    init(connection: SSHConnection, sftp: OpaquePointer) {
        self.connection = connection
        self.sftp = sftp
    }

    /// The error of the last SFTP call, mapped to Porter's codes.
    func error(_ what: String, _ path: String, writing: Bool = false) -> PluginError {
        var message: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        let rc = libssh2_session_last_error(connection.session, &message, &length, 0)
        guard rc == LIBSSH2_ERROR_SFTP_PROTOCOL else {
            return connection.error(Int32(PORTER_ERR_NETWORK_CONNECTION_LOST), "\(what) \(path)")
        }
        let status = libssh2_sftp_last_error(sftp)
        let code: Int32
        let text: String
        switch status {
        case UInt(LIBSSH2_FX_NO_SUCH_FILE), UInt(LIBSSH2_FX_NO_SUCH_PATH):
            code = Int32(PORTER_ERR_FILE_DOES_NOT_EXIST); text = "no such file"
        case UInt(LIBSSH2_FX_PERMISSION_DENIED), UInt(LIBSSH2_FX_WRITE_PROTECT):
            code = Int32(PORTER_ERR_NO_PERMISSIONS_TO_READ_FILE); text = "permission denied"
        case 24:   // SSH_FX_FILE_IS_A_DIRECTORY (draft-ietf-secsh-filexfer-13), not named in libssh2 1.10
            code = Int32(PORTER_ERR_FILE_IS_DIRECTORY); text = "is a folder"
        case UInt(LIBSSH2_FX_NOT_A_DIRECTORY):
            code = Int32(PORTER_ERR_FILE_DOES_NOT_EXIST); text = "a part of the path is not a folder"
        case UInt(LIBSSH2_FX_NO_SPACE_ON_FILESYSTEM), UInt(LIBSSH2_FX_QUOTA_EXCEEDED):
            code = Int32(PORTER_ERR_CANNOT_WRITE_TO_FILE); text = "no space left"
        default:
            code = writing ? Int32(PORTER_ERR_CANNOT_WRITE_TO_FILE) : Int32(PORTER_ERR_RESOURCE_UNAVAILABLE)
            text = "SFTP status \(status)"
        }
        return PluginError(code, "\(what) \(path): \(text)", causeDomain: "sftp", causeCode: Int64(status))
    }

    func stat(_ path: String) throws(PluginError) -> SFTPAttributes {
        var attrs = LIBSSH2_SFTP_ATTRIBUTES()
        let rc = path.withCString { libssh2_sftp_stat_ex(sftp, $0, UInt32(strlen($0)), LIBSSH2_SFTP_STAT, &attrs) }
        guard rc == 0 else { throw error("cannot open", path) }
        return SFTPAttributes(attrs)
    }

    func open(_ path: String, flags: UInt, mode: Int) throws(PluginError) -> SFTPFile {
        let handle = path.withCString {
            libssh2_sftp_open_ex(sftp, $0, UInt32(strlen($0)), flags, mode, LIBSSH2_SFTP_OPENFILE)
        }
        guard let handle else {
            throw error(flags & UInt(LIBSSH2_FXF_WRITE) != 0 ? "cannot create" : "cannot open", path,
                        writing: flags & UInt(LIBSSH2_FXF_WRITE) != 0)
        }
        return SFTPFile(session: self, handle: handle, path: path)
    }

    func list(_ path: String) throws(PluginError) -> PluginListing {
        let handle = path.withCString {
            libssh2_sftp_open_ex(sftp, $0, UInt32(strlen($0)), 0, 0, LIBSSH2_SFTP_OPENDIR)
        }
        guard let handle else { throw error("cannot list", path) }
        defer { libssh2_sftp_close_handle(handle) }
        var listing = PluginListing()
        var name = [CChar](repeating: 0, count: 1024)
        while true {
            var attrs = LIBSSH2_SFTP_ATTRIBUTES()
            let n = libssh2_sftp_readdir_ex(handle, &name, name.count, nil, 0, &attrs)
            if n == 0 { break }
            if n < 0 { throw error("cannot list", path) }
            let entry = String(decoding: name.prefix(Int(n)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if entry == "." || entry == ".." { continue }
            let a = SFTPAttributes(attrs)
            listing.entries.append(PluginListing.Entry(name: entry, kind: a.kind, size: a.kind == .directory ? nil : a.size,
                                                       modified: a.modified))
        }
        return listing
    }

    func rename(_ from: String, to: String) throws(PluginError) {
        func attempt() -> Int32 {
            from.withCString { f in
                to.withCString { t in
                    libssh2_sftp_rename_ex(sftp, f, UInt32(strlen(f)), t, UInt32(strlen(t)),
                                           Int(LIBSSH2_SFTP_RENAME_OVERWRITE | LIBSSH2_SFTP_RENAME_ATOMIC | LIBSSH2_SFTP_RENAME_NATIVE))
                }
            }
        }
        if attempt() == 0 { return }
        // SFTP v3 servers refuse to rename over an existing file: replace it.
        if (try? stat(to)) != nil {
            remove(to)
            if attempt() == 0 { return }
        }
        throw error("cannot move the upload into place at", to, writing: true)
    }

    func remove(_ path: String) {
        _ = path.withCString { libssh2_sftp_unlink_ex(sftp, $0, UInt32(strlen($0))) }
    }
}

final class SFTPFile {
    let session: SFTPSession
    let handle: OpaquePointer
    let path: String
    private var closed = false

    init(session: SFTPSession, handle: OpaquePointer, path: String) {
        self.session = session
        self.handle = handle
        self.path = path
    }

    func seek(to offset: Int64) { libssh2_sftp_seek64(handle, UInt64(offset)) }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(PluginError) -> Int {
        let n = libssh2_sftp_read(handle, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count)
        if n < 0 { throw session.error("cannot read", path) }
        return n
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(PluginError) {
        var done = 0
        while done < bytes.count {
            let n = libssh2_sftp_write(handle, bytes.baseAddress!.advanced(by: done).assumingMemoryBound(to: CChar.self),
                                       bytes.count - done)
            if n < 0 { throw session.error("cannot write", path, writing: true) }
            done += n
        }
    }

    func closeChecked() throws(PluginError) {
        guard !closed else { return }
        closed = true
        if libssh2_sftp_close_handle(handle) != 0 { throw session.error("cannot finish writing", path, writing: true) }
    }

    func close() {
        guard !closed else { return }
        closed = true
        libssh2_sftp_close_handle(handle)
    }
}

/// An scp channel: the file's bytes one way.
final class SCPChannel {
    let connection: SSHConnection
    let channel: OpaquePointer
    let size: Int64
    let modified: Int64
    private var freed = false

    init(connection: SSHConnection, channel: OpaquePointer, size: Int64, modified: Int64) {
        self.connection = connection
        self.channel = channel
        self.size = size
        self.modified = modified
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(PluginError) -> Int {
        let n = libssh2_channel_read_ex(channel, 0, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count)
        if n < 0 { throw connection.error(Int32(PORTER_ERR_NETWORK_CONNECTION_LOST), "reading over scp") }
        return n
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws(PluginError) {
        var offset = 0
        while offset < bytes.count {
            let n = libssh2_channel_write_ex(channel, 0, bytes.baseAddress!.assumingMemoryBound(to: CChar.self) + offset,
                                             bytes.count - offset)
            if n < 0 { throw connection.error(Int32(PORTER_ERR_CANNOT_WRITE_TO_FILE), "writing over scp") }
            offset += n
        }
    }

    /// The end of an upload: EOF, then the remote scp's acknowledgement.
    func finishSending() throws(PluginError) {
        if libssh2_channel_send_eof(channel) != 0 || libssh2_channel_wait_eof(channel) != 0 {
            throw connection.error(Int32(PORTER_ERR_CANNOT_WRITE_TO_FILE), "finishing the scp upload")
        }
        libssh2_channel_wait_closed(channel)
    }

    func free() {
        guard !freed else { return }
        freed = true
        libssh2_channel_free(channel)
    }
}
