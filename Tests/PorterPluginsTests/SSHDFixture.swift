import Foundation
import PorterTestSupport

/// OpenSSH's sshd on a free loopback port with its own host key and config
/// (../shared/TESTBED.md): a password user and a key user (real system users, made
/// here and removed by `stop`), a data folder, and known_hosts files for the tests.
final class SSHDFixture: @unchecked Sendable {
    static let passwordUser = "porterpw"
    static let password = "pw-Secret-42"
    static let keyUser = "porterkey"

    let dir: String
    let port: Int
    let data: String
    /// known_hosts with this server's real key; with a different key; empty.
    let knownHosts: String
    let changedKnownHosts: String
    let emptyKnownHosts: String
    let userKey: String
    let hostKeyBlob: Data
    private var pid: pid_t = 0

    enum Failure: Error, CustomStringConvertible {
        case setup(String)
        var description: String { if case .setup(let s) = self { return s } else { return "" } }
    }

    init() throws {
        guard geteuid() == 0 else { throw Failure.setup("the sshd fixture makes system users: run the tests as root (make test does)") }
        var template = Array((NSTemporaryDirectory() + "porter-sshd-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure.setup("mkdtemp failed") }
        dir = String(cString: made)
        chmod(dir, 0o755)
        data = dir + "/data"
        knownHosts = dir + "/known_hosts"
        changedKnownHosts = dir + "/known_hosts.changed"
        emptyKnownHosts = dir + "/known_hosts.empty"
        userKey = dir + "/user_ed25519"

        try runChecked("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", dir + "/host_ed25519"])
        try runChecked("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", dir + "/other_ed25519"])
        try runChecked("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", userKey])
        let hostPub = try String(contentsOfFile: dir + "/host_ed25519.pub", encoding: .utf8).split(separator: " ")
        let otherPub = try String(contentsOfFile: dir + "/other_ed25519.pub", encoding: .utf8).split(separator: " ")
        hostKeyBlob = Data(base64Encoded: String(hostPub[1])) ?? Data()
        try "".write(toFile: emptyKnownHosts, atomically: true, encoding: .utf8)

        // Users: both need a password set (sshd refuses locked accounts); the key user
        // may not log in with it.
        for user in [Self.passwordUser, Self.keyUser] {
            _ = try? runChecked("/usr/sbin/userdel", [user])
            try runChecked("/usr/sbin/useradd", ["-M", "-d", dir, "-s", "/bin/sh", user])
        }
        try runChecked("/usr/sbin/chpasswd", [], input: "\(Self.passwordUser):\(Self.password)\n\(Self.keyUser):unused-\(UUID().uuidString)\n")
        try FileManager.default.createDirectory(atPath: dir + "/authorized_keys", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: userKey + ".pub", toPath: dir + "/authorized_keys/" + Self.keyUser)

        // Data: files to read, a folder to list, a folder the password user may write,
        // a file nobody but root may read.
        let fm = FileManager.default
        try fm.createDirectory(atPath: data + "/sub", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: data + "/incoming", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: data + "/mirror/deeper", withIntermediateDirectories: true)
        try Self.bigFile.write(to: URL(fileURLWithPath: data + "/mirror/big.bin"))
        try "notes\n".write(toFile: data + "/mirror/notes.txt", atomically: true, encoding: .utf8)
        try "deeper\n".write(toFile: data + "/mirror/deeper/x.txt", atomically: true, encoding: .utf8)
        try "Hello over SFTP.\n".write(toFile: data + "/hello.txt", atomically: true, encoding: .utf8)
        try "in a sub folder\n".write(toFile: data + "/sub/a.txt", atomically: true, encoding: .utf8)
        try Self.bigFile.write(to: URL(fileURLWithPath: data + "/big.bin"))
        try "secret\n".write(toFile: data + "/secret.txt", atomically: true, encoding: .utf8)
        for path in [data, data + "/sub", data + "/incoming", data + "/mirror", data + "/mirror/deeper"] { chmod(path, 0o755) }
        for path in [data + "/hello.txt", data + "/sub/a.txt", data + "/big.bin", data + "/mirror/big.bin",
                     data + "/mirror/notes.txt", data + "/mirror/deeper/x.txt"] { chmod(path, 0o644) }
        chmod(data + "/secret.txt", 0o600)
        try runChecked("/bin/chown", [Self.passwordUser, data + "/incoming"])

        let (folder, knownHosts, changedKnownHosts) = (dir, knownHosts, changedKnownHosts)
        func config(_ port: Int) -> String { """
            ListenAddress 127.0.0.1
            Port \(port)
            HostKey \(folder)/host_ed25519
            PidFile \(folder)/sshd.pid
            AuthorizedKeysFile \(folder)/authorized_keys/%u
            StrictModes no
            UsePAM no
            PasswordAuthentication yes
            KbdInteractiveAuthentication no
            PubkeyAuthentication yes
            AllowUsers \(Self.passwordUser) \(Self.keyUser)
            MaxAuthTries 10
            Subsystem sftp internal-sftp
            Match User \(Self.keyUser)
                PasswordAuthentication no

            """ }
        mkdir("/run/sshd", 0o755)
        let started: (ports: [Int], pid: pid_t)
        do {
            // Started again on a fresh port when the one picked free was taken meanwhile.
            started = try startListening(ports: 1, log: { (try? String(contentsOfFile: folder + "/sshd.log", encoding: .utf8)) ?? "" }) { ports in
                try "[127.0.0.1]:\(ports[0]) \(hostPub[0]) \(hostPub[1])\n".write(toFile: knownHosts, atomically: true, encoding: .utf8)
                try "[127.0.0.1]:\(ports[0]) \(otherPub[0]) \(otherPub[1])\n".write(toFile: changedKnownHosts, atomically: true, encoding: .utf8)
                try config(ports[0]).write(toFile: folder + "/sshd_config", atomically: true, encoding: .utf8)
                try runChecked("/usr/sbin/sshd", ["-t", "-f", folder + "/sshd_config"])
                return try spawnDaemon("/usr/sbin/sshd", ["-D", "-E", folder + "/sshd.log", "-f", folder + "/sshd_config"])
            }
        } catch {
            port = 0
            stop()
            throw Failure.setup("sshd did not start: \(error)")
        }
        port = started.ports[0]
        pid = started.pid
    }

    static let bigFile = Data((0..<5_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ ($0 >> 11)) })

    func stop() {
        stopDaemon(pid, signal: SIGTERM)
        pid = 0
        for user in [Self.passwordUser, Self.keyUser] { _ = try? runChecked("/usr/sbin/userdel", [user]) }
        if ProcessInfo.processInfo.environment["PORTER_KEEP_SSHD"] == nil { try? FileManager.default.removeItem(atPath: dir) }
    }

    func url(_ path: String, user: String? = SSHDFixture.passwordUser, password: String? = SSHDFixture.password) -> URL {
        var login = ""
        if let user { login = user + (password.map { ":" + $0 } ?? "") + "@" }
        return URL(string: "sftp://\(login)127.0.0.1:\(port)\(data)\(path)")!
    }
}
