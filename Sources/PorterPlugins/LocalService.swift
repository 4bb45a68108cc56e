import CPorterIPC
import CPorterPlugin
import Foundation
import PorterCore

/// The local services a plugin may ask the host for (porter_plugin.h, `connect_service`),
/// and the one place that decides whether it gets one and connects to it — for a plugin
/// in process and, through its worker's host, for an isolated one alike:
/// - only a service the plugin declared in its descriptor's `needs` (for an isolated
///   plugin, as its probe read it: never what a worker's request says);
/// - where the service is comes from this process's own environment (`$SSH_AUTH_SOCK`),
///   never from the plugin: it names a service, not a path;
/// - the answer is a connected descriptor, so a sandboxed plugin, whose seccomp filter
///   refuses `socket(AF_UNIX)`, reaches that one service and no other socket.
public enum LocalService: Int32, Sendable, CaseIterable {
    case sshAgent = 1   // PORTER_SERVICE_SSH_AGENT

    /// The descriptor's `needs` bit that allows it (PORTER_NEED_*).
    public var need: UInt32 { 1 << UInt32(rawValue - 1) }

    public var name: String {
        switch self {
        case .sshAgent: return "ssh-agent"
        }
    }

    /// Every bit a descriptor may declare; others are ignored.
    static let knownNeeds: UInt32 = allCases.reduce(0) { $0 | $1.need }

    /// The names of the services `needs` declares, for `porter plugins`.
    public static func names(of needs: UInt32) -> [String] {
        allCases.filter { needs & $0.need != 0 }.map(\.name)
    }

    /// Connections one load may be handed in its life (one at a time).
    static let perLoadLimit = 16

    /// The service the plugin `plugin` asked for by number, if it may have it: known to
    /// this host and declared in `needs`.
    static func admit(_ number: Int32, declared needs: UInt32, plugin: String) -> Result<LocalService, PorterError> {
        guard let service = LocalService(rawValue: number) else {
            return .failure(PorterError(.unsupportedConfiguration,
                                        "plugin \(plugin) asked for local service \(number), which this host does not know"))
        }
        guard needs & service.need != 0 else {
            return .failure(PorterError(.unsupportedConfiguration,
                                        "plugin \(plugin) asked for the \(service.name) without declaring it in its descriptor's needs; refused"))
        }
        return .success(service)
    }

    /// A connected descriptor (close-on-exec, blocking; the caller owns it), made without
    /// waiting (a service that does not accept now is not there), so the caller may be a
    /// thread that must not block.
    func connect() -> Result<Int32, PorterError> {
        switch self {
        case .sshAgent:
            // This process's own environment, read now.
            guard let value = getenv("SSH_AUTH_SOCK"), let path = String(validatingCString: value), !path.isEmpty else {
                return .failure(PorterError(.resourceUnavailable, "no ssh agent: SSH_AUTH_SOCK is not set"))
            }
            let fd = porter_ipc_connect_now(path)
            guard fd >= 0 else {
                return .failure(PorterError(.resourceUnavailable,
                                            "cannot connect to the ssh agent at \(path): \(String(cString: strerror(errno)))"))
            }
            // Only an agent run by this user (or root) answers: a socket another user
            // listens at is not the user's agent, whatever the environment says (ssh-agent
            // makes the same check of its clients).
            var pid: pid_t = 0
            var uid: uid_t = 0
            var gid: gid_t = 0
            guard porter_ipc_peer(fd, &pid, &uid, &gid) == 0, uid == getuid() || uid == 0 else {
                close(fd)
                return .failure(PorterError(.resourceUnavailable,
                                            "the ssh agent socket at \(path) is served by another user (uid \(uid)); refused"))
            }
            return .success(fd)
        }
    }

    /// Both steps, for a plugin in process.
    static func connect(_ number: Int32, declared needs: UInt32, plugin: String) -> Result<Int32, PorterError> {
        admit(number, declared: needs, plugin: plugin).flatMap { $0.connect() }
    }
}
