import CPorterIPC
import Foundation

/// The process at the other end of a Unix socket, held by a pidfd: what is read of it
/// (its confinement, its program) is about that process and not another that got its
/// pid after it exited — each read is followed by a check that the pidfd still names a
/// live process. porterd uses it on its clients, and a client on the daemon it reached.
public final class PeerProcess: @unchecked Sendable {
    public let pidfd: Int32
    public let pid: pid_t

    private init(pidfd: Int32, pid: pid_t) {
        self.pidfd = pidfd
        self.pid = pid
    }

    deinit { close(pidfd) }

    public struct Refusal: Error, Sendable { public let reason: String }

    /// The peer of `channel`, or why it cannot be known (it is gone, or in a pid
    /// namespace this process cannot see into): such a peer is refused.
    public static func of(_ channel: Channel) -> Result<PeerProcess, Refusal> {
        var pid: pid_t = 0
        let fd = porter_ipc_peer_pidfd(channel.fd, &pid)
        guard fd >= 0 else {
            return .failure(Refusal(reason: "cannot identify the process at the other end of the socket (\(String(cString: strerror(errno))))"))
        }
        return .success(PeerProcess(pidfd: fd, pid: pid))
    }

    /// This process's own confinement, read once: what it inherited from the process that
    /// started it (a container's filter, say) is not a reason to refuse a peer.
    static let own: porter_ipc_confinement = {
        var c = porter_ipc_confinement()
        if porter_ipc_self_confinement(&c) != 0 { c = porter_ipc_confinement(seccomp: 0, seccomp_filters: 0, no_new_privs: 0) }
        return c
    }()

    /// Why this peer counts as sandboxed code, or nil. porterd refuses such a client; a
    /// client refuses such a "daemon" (sandboxed code that bound the socket first).
    ///
    /// The marker: a seccomp *filter* (`Seccomp: 2`) together with `NoNewPrivs: 1`, with more
    /// filters stacked than this process itself runs under. That is what `porter-plugin-worker`
    /// puts on itself before any plugin code runs (the kernel requires no_new_privs to
    /// install a filter without CAP_SYS_ADMIN, and neither can ever be undone, nor shed
    /// by exec: a sandboxed plugin cannot start an unconfined program to connect for it).
    /// Other sandboxes (Flatpak's bubblewrap, a systemd unit with SystemCallFilter= and
    /// NoNewPrivileges=) carry the same marker and are refused alike: code someone chose
    /// to confine must not have porterd, which runs outside every sandbox, fetch, upload
    /// or run programs for it. The worker's filter also refuses socket(AF_UNIX) itself;
    /// this is the second wall. Comparing with this process's own filters keeps a daemon
    /// and its clients that all run inside one confined container serving each other.
    /// A process whose state cannot be read (gone, another pid namespace) counts too.
    public func sandboxReason() -> String? {
        var c = porter_ipc_confinement()
        guard porter_ipc_pidfd_confinement(pidfd, &c) == 0 else {
            return "cannot read the state of pid \(pid) (\(String(cString: strerror(errno))))"
        }
        guard c.seccomp == 2, c.no_new_privs == 1 else { return nil }
        let own = PeerProcess.own
        let ownFilters = own.seccomp == 2 ? own.seccomp_filters : 0
        // A kernel that does not count filters (before 5.9): any filter beyond none.
        let confinedBeyondUs = c.seccomp_filters == 0 ? own.seccomp != 2 : c.seccomp_filters > ownFilters
        guard confinedBeyondUs else { return nil }
        return "pid \(pid) runs sandboxed (a seccomp filter with no_new_privs, as a plugin worker does)"
    }

    /// The program the peer runs, as the kernel resolved it (/proc/PID/exe), or nil.
    public func executable() -> String? {
        var buffer = [CChar](repeating: 0, count: 4097)
        guard porter_ipc_pidfd_exe(pidfd, &buffer, buffer.count) == 0 else { return nil }
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }
}
