import Foundation

/// A server program started on a free loopback port with a config of its own in a
/// temporary folder, and stopped (and its folder removed) by `stop()`.
public final class DaemonFixture: @unchecked Sendable {
    public let dir: String
    public let port: Int
    private let pid: pid_t

    /// `config` gets the folder and the port and returns the config file's text;
    /// `arguments` gets the folder and returns the command line.
    public init(program: String, configName: String, config: (String, Int) -> String, arguments: (String) -> [String]) throws {
        var template = Array((NSTemporaryDirectory() + "porter-daemon-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw NginxFixture.Failure.setup("mkdtemp failed") }
        dir = String(cString: made)
        chmod(dir, 0o777)  // daemons that drop to nobody write their logs here
        let folder = dir
        let started: (ports: [Int], pid: pid_t)
        do {
            // Started again on fresh ports when a port picked free was taken meanwhile.
            started = try startListening(ports: 1) { ports in
                try config(folder, ports[0]).write(toFile: folder + "/" + configName, atomically: true, encoding: .utf8)
                return try spawnDaemon(program, arguments(folder))
            }
        } catch {
            throw NginxFixture.Failure.setup("\(program) did not start: \(error)")
        }
        port = started.ports[0]
        pid = started.pid
    }

    public func log(_ name: String) -> String { (try? String(contentsOfFile: dir + "/" + name, encoding: .utf8)) ?? "" }

    public func stop() {
        stopDaemon(pid, signal: SIGTERM)
        try? FileManager.default.removeItem(atPath: dir)
    }
}

/// The real servers of the authentication tests, each on loopback with its own files in
/// a temporary folder, stopped by PID:
/// - `KerberosRealm`: MIT Kerberos's KDC (krb5kdc) for the realm PORTER.TEST, with the
///   users alice (password alicepw) and the service HTTP/localhost (its key in a keytab).
/// - `DaemonFixture.apacheGSSAPI`: Apache httpd with mod_auth_gssapi guarding /krb/.
/// - `DaemonFixture.squidAuth`: squid asking for Negotiate, Digest and Basic, all at once.
/// - `NTLMServer`: ntlmserver.py, an NTLM acceptor on pyspnego (server or proxy).
///
/// Kerberos finds its files through KRB5_CONFIG and KRB5_KDC_PROFILE: the realm sets
/// them in this process (the test process's GSS-API, in libcurl, needs KRB5_CONFIG too),
/// so every server started after it inherits them.
public final class KerberosRealm: @unchecked Sendable {
    public static let realm = "PORTER.TEST"
    public let dir: String
    public let port: Int
    public let keytab: String
    private let pid: pid_t

    public init() throws {
        var template = Array((NSTemporaryDirectory() + "porter-krb5-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw NginxFixture.Failure.setup("mkdtemp failed") }
        dir = String(cString: made)
        chmod(dir, 0o755)
        port = try NginxFixture.freePort()
        keytab = dir + "/http.keytab"
        let realm = KerberosRealm.realm
        // No DNS: "localhost" is the service's host as written, in this realm.
        try """
            [libdefaults]
              default_realm = \(realm)
              dns_lookup_kdc = false
              dns_lookup_realm = false
              dns_canonicalize_hostname = false
              rdns = false
              udp_preference_limit = 1
            [realms]
              \(realm) = {
                kdc = 127.0.0.1:\(port)
              }
            [domain_realm]
              localhost = \(realm)

            """.write(toFile: dir + "/krb5.conf", atomically: true, encoding: .utf8)
        try """
            [kdcdefaults]
              kdc_listen = 127.0.0.1:\(port)
              kdc_tcp_listen = 127.0.0.1:\(port)
            [realms]
              \(realm) = {
                database_name = \(dir)/principal
                key_stash_file = \(dir)/stash
                acl_file = \(dir)/kadm5.acl
                kdc_listen = 127.0.0.1:\(port)
                kdc_tcp_listen = 127.0.0.1:\(port)
              }
            [logging]
              kdc = FILE:\(dir)/kdc.log

            """.write(toFile: dir + "/kdc.conf", atomically: true, encoding: .utf8)
        setenv("KRB5_CONFIG", dir + "/krb5.conf", 1)
        setenv("KRB5_KDC_PROFILE", dir + "/kdc.conf", 1)
        try runChecked("/usr/sbin/kdb5_util", ["create", "-s", "-r", realm, "-P", "porter-master-key"])
        for query in ["addprinc -pw alicepw alice", "addprinc -randkey HTTP/localhost", "ktadd -k \(keytab) HTTP/localhost"] {
            try runChecked("/usr/sbin/kadmin.local", ["-r", realm, "-q", query])
        }
        chmod(keytab, 0o644)  // read by servers that drop to nobody / proxy (a test realm's key only)
        pid = try spawnDaemon("/usr/sbin/krb5kdc", ["-n", "-r", realm, "-P", dir + "/kdc.pid"])
        let deadline = Date().addingTimeInterval(20)
        while !NginxFixture.accepts(port) {
            if !isRunning(pid) || Date() > deadline {
                stopDaemon(pid, signal: SIGKILL)
                throw NginxFixture.Failure.setup("krb5kdc did not start on port \(port): \(log)")
            }
            usleep(20_000)
        }
    }

    public var log: String { (try? String(contentsOfFile: dir + "/kdc.log", encoding: .utf8)) ?? "" }

    /// A credential cache in the realm's folder holding `user`'s ticket (kinit), or none.
    public func ticketCache(_ name: String, user: String?, password: String = "") throws -> String {
        let cache = "FILE:\(dir)/\(name).ccache"
        if let user {
            let r = try runProcess("/usr/bin/kinit", [user], environment: ["KRB5CCNAME": cache], input: password + "\n")
            guard r.status == 0 else { throw NginxFixture.Failure.setup("kinit \(user): \(r.stderr)") }
        }
        return cache
    }

    public func stop() {
        stopDaemon(pid, signal: SIGTERM)
        try? FileManager.default.removeItem(atPath: dir)
        for name in ["KRB5_CONFIG", "KRB5_KDC_PROFILE", "KRB5CCNAME"] { unsetenv(name) }
    }
}

/// ntlmserver.py on a free port: an NTLM acceptor (pyspnego) that knows carol / carolpw
/// (with or without the domain PORTER); `proxy` makes it a proxy asking with 407.
public final class NTLMServer: @unchecked Sendable {
    public let port: Int
    public let dir: String
    private let process: Process

    public init(proxy: Bool = false) throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let python = root.appendingPathComponent(".build/ftp-venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw NginxFixture.Failure.setup("no Python venv at \(python): run `make test` (scripts/install-deps.sh makes it)")
        }
        var template = Array((NSTemporaryDirectory() + "porter-ntlm-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw NginxFixture.Failure.setup("mkdtemp failed") }
        dir = String(cString: made)
        try "PORTER:carol:carolpw\n:carol:carolpw\n".write(toFile: dir + "/users", atomically: true, encoding: .utf8)
        port = try NginxFixture.freePort()
        let p = Process()
        p.executableURL = URL(fileURLWithPath: python)
        p.arguments = [root.appendingPathComponent("Tests/PorterHTTPTests/ntlmserver.py").path, String(port), dir + "/requests.log"]
            + (proxy ? ["--proxy"] : [])
        var env = ProcessInfo.processInfo.environment
        env["NTLM_USER_FILE"] = dir + "/users"
        p.environment = env
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try p.run()
        process = p
        let deadline = Date().addingTimeInterval(30)
        while !NginxFixture.accepts(port) {
            if !p.isRunning || Date() > deadline {
                p.terminate()
                throw NginxFixture.Failure.setup("ntlmserver.py did not start on port \(port)")
            }
            usleep(20_000)
        }
    }

    /// One line per request: "CONNECTION NTLM-MESSAGE-TYPE STATUS PATH".
    public var requests: [[String]] {
        ((try? String(contentsOfFile: dir + "/requests.log", encoding: .utf8)) ?? "")
            .split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
    }

    public func stop() {
        process.terminate()
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    }
}
