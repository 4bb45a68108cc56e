import CPorterIPC
import Foundation
import PorterCore
import PorterIPC
import PorterStorage

/// What a background session and `porterd` say to each other over PorterIPC (service
/// "porterd", versions 1 and 2): JSON messages in message frames; from version 2, lists of
/// tasks in `.compact` frames (`BackgroundTaskList`). The daemon runs the transfers; the
/// session shows them as tasks and delivers their events.
public enum BackgroundProtocol {
    public static let service = "porterd"
    public static let version: UInt16 = 2
    /// The oldest version still spoken (a porterd or client from before compact lists).
    public static let minimumVersion: UInt16 = 1
    public static var hello: Hello { Hello(service: service, minimumVersion: minimumVersion, maximumVersion: version) }

    /// Sends a daemon message: a list of tasks compact when the connection agreed on
    /// version 2, anything else as JSON.
    public static func send(_ message: BackgroundDaemonMessage, on c: Channel) throws(IPCError) {
        if c.version >= 2, let compact = BackgroundTaskList.encode(message) {
            try c.send(Frame(kind: .compact, payload: compact))
        } else {
            try c.send(message: message)
        }
    }

    /// The next daemon message, from a JSON or a compact frame; any other frame is `.malformed`.
    public static func receive(on c: Channel) throws(IPCError) -> BackgroundDaemonMessage {
        let frame = try c.receive()
        switch frame.kind {
        case .message: return try Channel.decode(BackgroundDaemonMessage.self, from: frame.payload)
        case .compact: return try BackgroundTaskList.decode(frame.payload)
        default: throw IPCError(.malformed, "expected a message from porterd, got a frame of kind \(frame.kind)")
        }
    }

    /// `$XDG_RUNTIME_DIR/porter`, else `run` in the state folder (`~/.local/state/porter/run`).
    /// Never under /tmp: a sandboxed plugin may write /tmp, and whoever makes the folder
    /// first there can bind the socket and be "porterd" to every client (and name files
    /// for it to delete). Made 0700 and checked to be this user's own real folder (not a
    /// link) before use. Nil when neither XDG_RUNTIME_DIR, XDG_STATE_HOME nor HOME is an
    /// absolute path.
    public static func runtimeFolder(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        if let run = XDG.runtimeDirectory(environment: environment) { return run + "/porter" }
        return stateFolder(environment: environment).map { $0 + "/run" }
    }

    public static func socketPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        runtimeFolder(environment: environment).map { $0 + "/porterd.sock" }
    }

    /// The folder porterd keeps session `session`'s finished downloads in until its
    /// delegate took them: `finished/<safe name>-<hash>` in the state folder. The
    /// identifier is the application's: only a safe file name of it is used (ASCII letters,
    /// digits, - and _, at most 64 bytes) and a hash of it that is the same in every run
    /// (FNV-1a: Hasher is seeded per process).
    public static func finishedFolder(stateFolder: String, session: String) -> String {
        let safe = String(session.unicodeScalars.prefix(64).map { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_") ? Character($0) : "_" })
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in session.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return stateFolder + "/finished/" + safe + "-" + String(h, radix: 16)
    }

    /// The name porterd gives a finished download in that folder.
    public static func finishedFileName(task: Int) -> String { "task-\(task)" }

    /// `file` when it is a finished download porterd made for `session`: a regular file
    /// (not a link) named `task-<task>` directly in the session's finished folder, which
    /// is this user's own real folder (0700); the folder is compared resolved, so no link
    /// anywhere leads elsewhere. Anything else (a daemon that lies, an impostor at the
    /// socket) is nil: such a path is never handed to a delegate nor deleted.
    public static func acceptFinishedFile(_ file: String, session: String, task: Int,
                                          environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        guard let state = stateFolder(environment: environment) else { return nil }
        let folder = finishedFolder(stateFolder: state, session: session)
        guard file == folder + "/" + finishedFileName(task: task), (try? PrivateFiles.checkOwnFolder(folder)) != nil,
              let real = realpath(folder, nil) else { return nil }
        defer { free(real) }
        let resolved = String(cString: real)
        // The state folder above may be reached through a link of the user's own (a home on
        // another disk): what counts is that the folder itself and the file are no links.
        var st = stat()
        guard lstat(resolved + "/" + finishedFileName(task: task), &st) == 0, st.st_mode & S_IFMT == S_IFREG,
              st.st_uid == geteuid(), st.st_nlink == 1 else { return nil }
        return resolved + "/" + finishedFileName(task: task)
    }

    /// A connection to this user's porterd, after the handshake; the daemon is started
    /// (detached, in its own session) when none listens.
    public static func connectToDaemon() throws -> Channel {
        guard let folder = BackgroundProtocol.runtimeFolder(), let path = BackgroundProtocol.socketPath() else {
            throw PorterError(.unsupportedConfiguration, "porterd: neither XDG_RUNTIME_DIR, XDG_STATE_HOME nor HOME is an absolute path")
        }
        try PrivateFiles.makeFolder(folder)
        if let c = try? Channel.connect(path: path) {
            try greet(c)
            return c
        }
        guard let daemon = daemonExecutable() else {
            throw PorterError(.unsupportedConfiguration, "porterd was not found (next to this program, in $PORTERD_PATH or on PATH)")
        }
        try spawn(daemon)
        // Waits for the socket (the event); the bound only ends the wait for a daemon that
        // never listens, and is generous: a loaded machine starts a program slowly.
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if let c = try? Channel.connect(path: path) {
                try greet(c)
                return c
            }
            usleep(20_000)
        }
        throw PorterError(.timedOut, "porterd (\(daemon)) did not start listening at \(path)")
    }

    /// The handshake, bounded in time (a daemon that accepts and never answers does not
    /// hang the app), after checking who listens: a process of this user that is not
    /// sandboxed code (which could have bound the socket first to pose as porterd, hear
    /// the app's logins and name files for it to hand over).
    static func greet(_ c: Channel) throws {
        guard let peer = c.peer, peer.uid == geteuid() else {
            throw PorterError(.unsupportedConfiguration, "the process listening at porterd's socket is not this user's")
        }
        switch PeerProcess.of(c) {
        case .failure(let refusal):
            throw PorterError(.unsupportedConfiguration, "porterd's socket: \(refusal.reason)")
        case .success(let process):
            if let reason = process.sandboxReason() {
                throw PorterError(.unsupportedConfiguration, "the process listening at porterd's socket is not porterd: \(reason)")
            }
        }
        c.setReceiveTimeout(10)
        try c.greet(hello)
        c.setReceiveTimeout(0)
    }

    /// `$PORTERD_PATH`, else `porterd` beside this program, else on PATH.
    public static func daemonExecutable() -> String? { HelperProgram.find("porterd", override: "PORTERD_PATH") }

    static func spawn(_ path: String) throws {
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup(path), nil]
        defer { for p in argv { free(p) } }
        guard porter_ipc_spawn_detached(path, &argv) == 0 else {
            throw PorterError(.unsupportedConfiguration, "cannot start \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// An error as it travels: its code's stable raw value, and its message.
    public static func error(code: String?, message: String?, url: URL?) -> PorterError? {
        guard let code else { return nil }
        let c = Int(code).flatMap { PorterError.Code(rawValue: $0) } ?? .unknown
        return PorterError(c, message ?? "\(c)", url: url)
    }

    public static func wire(_ error: PorterError?) -> (code: String?, message: String?) {
        guard let error else { return (nil, nil) }
        return (String(error.code.rawValue), error.message)
    }

    /// `$XDG_STATE_HOME/porter` (else `~/.local/state/porter`): the journal, partial and
    /// finished files.
    public static func stateFolder(environment: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        XDG.porterStateFolder(environment: environment)
    }
}
