import CSSH2
import Foundation
import PorterPluginKit

/// sftp:// on libssh2, written against PorterPluginKit (so it links nothing of
/// Porter's Swift modules). Use it either way:
/// - drop libPorterSFTPPlugin.so into a plugin folder (it exports porter_plugin_entry);
/// - or import PorterSFTP and register `SFTPPlugin.entry` with
///   `PluginLoader.register(entry:name:)` — no dlopen.
///
/// URLs: sftp://[user[:password]@]host[:port]/absolute/path, `/~/path` for a path under
/// the login's home. A path ending in `/` is listed (text/x-porter-listing).
///
/// Request properties (strings):
/// - `sftp.identityFile`: a private key to log in with (before the defaults);
/// - `sftp.knownHostsFile`: known_hosts to check the host key against
///   (default ~/.ssh/known_hosts).
public enum SFTPPlugin {
    public static let version = "1.0.0"

    public static let definition = PluginDefinition(
        name: "sftp (libssh2)", version: version,
        schemes: [PluginSchemeDefinition("sftp", flags: UInt32(PORTER_SCHEME_NEEDS_NETWORK)
                                                    | UInt32(PORTER_SCHEME_CAN_UPLOAD), defaultPort: 22),
                  PluginSchemeDefinition("scp", flags: UInt32(PORTER_SCHEME_NEEDS_NETWORK)
                                                   | UInt32(PORTER_SCHEME_CAN_UPLOAD), defaultPort: 22)],
        // Keys and known_hosts (read only: an unknown host key is a challenge, never
        // written down here).
        readPaths: ["~/.ssh"],
        // The user's ssh agent, connected by the host (the plugin never opens its socket).
        needs: [.sshAgent],
        makeHandler: { request, client throws(PluginError) in
            try SFTPLoad(request: request, client: client)
        })

    /// The entry point as a C function pointer, for `PluginLoader.register(entry:name:)`
    /// in an application that links PorterSFTP in. (Use this rather than naming
    /// `porter_sftp_plugin_entry` in another module: Swift would emit a second
    /// definition of the C symbol there.)
    public static let entry: porter_plugin_entry_fn = porter_sftp_plugin_entry

    /// libssh2_init is not thread-safe: done once, before the first load.
    static let initialised: Bool = libssh2_init(0) == 0
}

/// The plugin's entry point under its own name, for applications that link PorterSFTP
/// in and register it directly.
@_cdecl("porter_sftp_plugin_entry")
public func porter_sftp_plugin_entry(_ host: UnsafePointer<porter_host>?,
                                     _ descriptor: UnsafeMutablePointer<UnsafePointer<porter_plugin_descriptor>?>?,
                                     _ error: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int32 {
    guard SFTPPlugin.initialised else {
        CErrorBuffer.write("libssh2_init failed", to: error, capacity: capacity)
        return 1
    }
    return PluginKit.export(SFTPPlugin.definition, host: host, descriptor: descriptor, error: error, capacity: capacity)
}

/// The parts of an sftp or scp URL.
struct SFTPTarget {
    /// scp:// rather than sftp://.
    var isSCP: Bool
    var host: String
    var port: Int32
    var user: String?
    var password: String?
    /// Absolute, or relative to the home folder for `/~/` URLs.
    var path: String
    var isFolder: Bool

    init(_ text: String) throws(PluginError) {
        guard let c = URLComponents(string: text), let scheme = c.scheme?.lowercased(), scheme == "sftp" || scheme == "scp",
              let host = c.host, !host.isEmpty else {
            throw PluginError(Int32(PORTER_ERR_BAD_URL), "not an sftp or scp URL with a host: \(text)")
        }
        isSCP = scheme == "scp"
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        port = Int32(c.port ?? 22)
        user = c.user.flatMap { $0.isEmpty ? nil : $0 }
        password = c.password
        var p = c.path
        if p.isEmpty { p = "/" }
        if p.contains("\0") { throw PluginError(Int32(PORTER_ERR_BAD_URL), "the path holds a NUL byte") }
        isFolder = p.hasSuffix("/")
        if p == "/~" || p.hasPrefix("/~/") { p = String(p.dropFirst(p == "/~" ? 2 : 3)); if p.isEmpty { p = "." } }
        path = p
    }
}

/// One sftp load, on a thread of its own with its own SSH session.
final class SFTPLoad: PluginLoadHandler, @unchecked Sendable {
    let request: PluginRequest
    let client: PluginClient
    let target: SFTPTarget

    private let condition = NSCondition()
    private var paused = false
    private var stopped = false
    private var socket: Int32 = -1
    private let done = DispatchSemaphore(value: 0)
    private var started = false

    init(request: PluginRequest, client: PluginClient) throws(PluginError) {
        self.request = request
        self.client = client
        self.target = try SFTPTarget(request.url)
        if request.hasBody && target.isFolder {
            throw PluginError(Int32(PORTER_ERR_BAD_URL), "an upload needs a file name, not a folder: \(request.url)")
        }
        if target.isSCP && target.isFolder && !request.hasBody {
            throw PluginError(Int32(PORTER_ERR_UNSUPPORTED_URL), "scp cannot list folders; use sftp:// for \(request.url)")
        }
        if target.isSCP && request.hasBody && request.bodyLength == nil {
            throw PluginError(Int32(PORTER_ERR_UNSUPPORTED_URL), "scp needs the upload's length before it starts (a stream of unknown length cannot go over scp; use sftp://)")
        }
    }

    func start() {
        started = true
        let thread = Thread { [self] in
            run()
            done.signal()
        }
        thread.name = "porter-sftp"
        thread.start()
    }

    func stop() {
        condition.lock()
        stopped = true
        if socket >= 0 { shutdown(socket, Int32(SHUT_RDWR)) }   // wakes libssh2's blocking calls
        condition.broadcast()
        condition.unlock()
    }

    func pause() { condition.lock(); paused = true; condition.unlock() }
    func resume() { condition.lock(); paused = false; condition.broadcast(); condition.unlock() }

    func waitUntilDone() {
        stop()
        if started { done.wait() }
    }

    var isStopped: Bool { condition.lock(); defer { condition.unlock() }; return stopped }

    private func waitWhilePaused() -> Bool {
        condition.lock(); defer { condition.unlock() }
        while paused && !stopped { condition.wait() }
        return !stopped
    }

    // MARK: - the load

    /// Reports the end only after the SSH session is closed, so that nothing of this
    /// load (libssh2, OpenSSL) still runs once the application hears it is done — a
    /// program may exit right then.
    private func run() {
        var failure: PluginError?
        do throws(PluginError) {
            let connection = try SSHConnection(load: self)
            do throws(PluginError) {
                try connection.authenticate()
                if target.isSCP {
                    if request.hasBody { try scpUpload(connection) } else { try scpDownload(connection) }
                    connection.close()
                    if isStopped { return }
                    client.finish()
                    return
                }
                let sftp = try connection.openSFTP()
                if request.hasBody {
                    try upload(sftp)
                } else if target.isFolder {
                    try list(sftp)
                } else {
                    try download(sftp)
                }
            } catch {
                failure = error
            }
            connection.close()
        } catch {
            failure = error
        }
        if isStopped { return }
        if let failure { client.fail(failure) } else { client.finish() }
    }

    func registerSocket(_ fd: Int32) -> Bool {
        condition.lock(); defer { condition.unlock() }
        socket = fd
        return !stopped
    }

    /// Closes the connection's socket. Under the lock `stop` shuts sockets down with,
    /// so a late `stop` never hits a descriptor number another load has reused.
    func closeSocket(_ fd: Int32) {
        condition.lock(); defer { condition.unlock() }
        if socket == fd { socket = -1 }
        Glibc.close(fd)
    }

    private func download(_ sftp: SFTPSession) throws(PluginError) {
        let attrs = try sftp.stat(target.path)
        if attrs.isDirectory {
            throw PluginError(Int32(PORTER_ERR_FILE_IS_DIRECTORY), "\(target.path) is a folder; end the URL with '/' to list it")
        }
        let size = attrs.size
        let validator = "\(size.map(String.init) ?? "-")-\(attrs.modified.map(String.init) ?? "-")"
        var offset: Int64 = 0
        var resumeOffset: Int64?
        if let wanted = request.resumeOffset {
            // Resume only what has not changed since; otherwise restart from byte 0.
            if (request.resumeValidator == nil || request.resumeValidator == validator), wanted <= (size ?? .max) {
                offset = wanted
                resumeOffset = wanted
            }
        }
        let file = try sftp.open(target.path, flags: UInt(LIBSSH2_FXF_READ), mode: 0)
        defer { file.close() }
        if offset > 0 { file.seek(to: offset) }
        client.receive(PluginResponse(mimeType: nil, expectedLength: size.map { $0 - offset },
                                      resumeOffset: resumeOffset, validator: validator))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        defer { buffer.deallocate() }
        while waitWhilePaused() {
            let n = try file.read(into: buffer)
            if n == 0 { return }
            client.load(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
    }

    /// scp: the file in one stream (no resume: scp has no offsets, so a resumed request
    /// starts over and says so).
    private func scpDownload(_ connection: SSHConnection) throws(PluginError) {
        let channel = try connection.scpReceive(target.path)
        defer { channel.free() }
        let size = channel.size
        client.receive(PluginResponse(mimeType: nil, expectedLength: size,
                                      resumeOffset: request.resumeOffset != nil ? -1 : nil,
                                      validator: "\(size)-\(channel.modified)"))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        defer { buffer.deallocate() }
        var remaining = size
        while remaining > 0, waitWhilePaused() {
            let n = try channel.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(Int64(buffer.count), remaining))]))
            if n == 0 { throw PluginError(Int32(PORTER_ERR_NETWORK_CONNECTION_LOST), "the scp stream of \(target.path) ended early") }
            remaining -= Int64(n)
            client.load(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
    }

    /// scp: written in place as it arrives (scp has no rename), with the length given
    /// up front.
    private func scpUpload(_ connection: SSHConnection) throws(PluginError) {
        let length = request.bodyLength ?? 0
        let channel = try connection.scpSend(target.path, mode: 0o644, size: length)
        defer { channel.free() }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 128 << 10, alignment: 16)
        defer { buffer.deallocate() }
        var total: Int64 = 0
        while total < length {
            if isStopped { return }
            let n = client.readBody(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(Int64(buffer.count), length - total))]))
            if n < 0 { throw PluginError(Int32(PORTER_ERR_CANNOT_OPEN_FILE), "cannot read the request body") }
            if n == 0 { throw PluginError(Int32(PORTER_ERR_CANNOT_OPEN_FILE), "the request body ended \(length - total) bytes early") }
            try channel.write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            total += Int64(n)
            client.sent(Int64(n), total: total, expected: length)
        }
        try channel.finishSending()
        client.receive(PluginResponse(mimeType: nil, expectedLength: 0))
    }

    private func list(_ sftp: SFTPSession) throws(PluginError) {
        let listing = try sftp.list(target.path)
        let body = listing.serialized()
        client.receive(PluginResponse(mimeType: PluginListing.contentType, textEncoding: "utf-8",
                                      expectedLength: Int64(body.count)))
        client.load(body)
    }

    private func upload(_ sftp: SFTPSession) throws(PluginError) {
        let path = target.path
        let slash = path.lastIndex(of: "/")
        let folder = slash.map { String(path[..<$0]) } ?? ""
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        let temporary = (folder.isEmpty && slash == nil ? "" : folder + "/") + ".\(name).porter-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let mode = (try? sftp.stat(path)).flatMap { $0.permissions }.map { Int($0 & 0o7777) } ?? 0o644
        let file = try sftp.open(temporary, flags: UInt(LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_TRUNC),
                                 mode: mode)
        var total: Int64 = 0
        var complete = false
        defer {
            if !complete { sftp.remove(temporary) }
        }
        do throws(PluginError) {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 128 << 10, alignment: 16)
            defer { buffer.deallocate() }
            while true {
                if isStopped { file.close(); return }
                let n = client.readBody(into: buffer)
                if n < 0 {
                    throw PluginError(Int32(PORTER_ERR_CANNOT_OPEN_FILE), "cannot read the request body")
                }
                if n == 0 { break }
                try file.write(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                total += Int64(n)
                client.sent(Int64(n), total: total, expected: request.bodyLength)
            }
            try file.closeChecked()
        } catch {
            file.close()
            throw error
        }
        try sftp.rename(temporary, to: path)
        complete = true
        client.receive(PluginResponse(mimeType: nil, expectedLength: 0))
    }
}
