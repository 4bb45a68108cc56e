import Foundation
import PorterTestSupport

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
final class KerberosRealm: @unchecked Sendable {
    static let realm = "PORTER.TEST"
    let dir: String
    let port: Int
    let keytab: String
    private let pid: pid_t

    init() throws {
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

    var log: String { (try? String(contentsOfFile: dir + "/kdc.log", encoding: .utf8)) ?? "" }

    /// A credential cache in the realm's folder holding `user`'s ticket (kinit), or none.
    func ticketCache(_ name: String, user: String?, password: String = "") throws -> String {
        let cache = "FILE:\(dir)/\(name).ccache"
        if let user {
            let r = try runProcess("/usr/bin/kinit", [user], environment: ["KRB5CCNAME": cache], input: password + "\n")
            guard r.status == 0 else { throw NginxFixture.Failure.setup("kinit \(user): \(r.stderr)") }
        }
        return cache
    }

    func stop() {
        stopDaemon(pid, signal: SIGTERM)
        try? FileManager.default.removeItem(atPath: dir)
        for name in ["KRB5_CONFIG", "KRB5_KDC_PROFILE", "KRB5CCNAME"] { unsetenv(name) }
    }
}

extension DaemonFixture {
    /// Apache httpd with mod_auth_gssapi: /krb/index.txt needs Negotiate (Kerberos, the
    /// service HTTP/localhost of `realm`); /index.txt is open. The access log says, per
    /// request, the client's port, the request and the user.
    static func apacheGSSAPI(_ realm: KerberosRealm) throws -> DaemonFixture {
        try DaemonFixture(program: "/usr/sbin/apache2", configName: "httpd.conf", config: { dir, port in
            try? FileManager.default.createDirectory(atPath: dir + "/www/krb", withIntermediateDirectories: true)
            try? "kerberos area\n".write(toFile: dir + "/www/krb/index.txt", atomically: true, encoding: .utf8)
            try? "open area\n".write(toFile: dir + "/www/index.txt", atomically: true, encoding: .utf8)
            _ = try? NginxFixture.run("/bin/chmod", ["-R", "a+rX", dir])
            let modules = "/usr/lib/apache2/modules"
            let user = geteuid() == 0 ? "User nobody\nGroup nogroup\n" : ""
            return """
                ServerRoot "\(dir)"
                ServerName localhost
                Listen 127.0.0.1:\(port)
                PidFile "\(dir)/httpd.pid"
                ErrorLog "\(dir)/error.log"
                LoadModule mpm_event_module \(modules)/mod_mpm_event.so
                LoadModule authn_core_module \(modules)/mod_authn_core.so
                LoadModule authz_core_module \(modules)/mod_authz_core.so
                LoadModule authz_user_module \(modules)/mod_authz_user.so
                LoadModule auth_gssapi_module \(modules)/mod_auth_gssapi.so
                \(user)LogFormat "%{remote}p \\"%r\\" %>s %u" conn
                CustomLog "\(dir)/access.log" conn
                DocumentRoot "\(dir)/www"
                <Directory "\(dir)/www">
                  Require all granted
                </Directory>
                <Location "/krb/">
                  AuthType GSSAPI
                  AuthName "Porter Kerberos"
                  GssapiCredStore keytab:\(realm.keytab)
                  GssapiAllowedMech krb5
                  Require valid-user
                </Location>

                """
        }, arguments: { dir in ["-f", dir + "/httpd.conf", "-DFOREGROUND"] })
    }

    /// squid as a proxy that asks for Negotiate (Kerberos, HTTP/localhost of `realm`),
    /// Digest (erin / erinpw, realm porter-digest) and Basic (dave / davepw, realm
    /// porter-basic), in one 407. Its access log names the user of each request.
    static func squidAuth(_ realm: KerberosRealm) throws -> DaemonFixture {
        try DaemonFixture(program: "/usr/sbin/squid", configName: "squid.conf", config: { dir, port in
            let apr1 = (try? NginxFixture.run("/usr/bin/openssl", ["passwd", "-apr1", "davepw"]))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            try? "dave:\(apr1)\n".write(toFile: dir + "/basic.passwd", atomically: true, encoding: .utf8)
            try? "erin:erinpw\n".write(toFile: dir + "/digest.passwd", atomically: true, encoding: .utf8)
            _ = try? NginxFixture.run("/bin/chmod", ["-R", "a+rX", dir])
            let helpers = "/usr/lib/squid"
            return """
                http_port 127.0.0.1:\(port)
                pid_filename \(dir)/squid.pid
                cache_log \(dir)/cache.log
                access_log stdio:\(dir)/access.log
                buffered_logs off
                cache_store_log none
                cache deny all
                coredump_dir \(dir)
                shutdown_lifetime 0 seconds
                auth_param negotiate program \(helpers)/negotiate_kerberos_auth -k \(realm.keytab) -s HTTP/localhost@\(KerberosRealm.realm)
                auth_param negotiate children 2
                auth_param digest program \(helpers)/digest_file_auth \(dir)/digest.passwd
                auth_param digest realm porter-digest
                auth_param digest children 2
                auth_param basic program \(helpers)/basic_ncsa_auth \(dir)/basic.passwd
                auth_param basic realm porter-basic
                auth_param basic children 2
                acl authed proxy_auth REQUIRED
                http_access allow authed
                http_access deny all

                """
        }, arguments: { dir in ["-N", "-f", dir + "/squid.conf"] })
    }
}

/// ntlmserver.py on a free port: an NTLM acceptor (pyspnego) that knows carol / carolpw
/// (with or without the domain PORTER); `proxy` makes it a proxy asking with 407.
final class NTLMServer: @unchecked Sendable {
    let port: Int
    let dir: String
    private let process: Process

    init(proxy: Bool) throws {
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
    var requests: [[String]] {
        ((try? String(contentsOfFile: dir + "/requests.log", encoding: .utf8)) ?? "")
            .split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    }
}
