import Foundation
import PorterTestSupport

/// A server program started on a free loopback port with a config of its own in a
/// temporary folder, and stopped (and its folder removed) by `stop()`.
final class DaemonFixture: @unchecked Sendable {
    let dir: String
    let port: Int
    private let pid: pid_t

    /// `config` gets the folder and the port and returns the config file's text;
    /// `arguments` gets the folder and returns the command line.
    init(program: String, configName: String, config: (String, Int) -> String, arguments: (String) -> [String]) throws {
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

    func log(_ name: String) -> String { (try? String(contentsOfFile: dir + "/" + name, encoding: .utf8)) ?? "" }

    func stop() {
        stopDaemon(pid, signal: SIGTERM)
        try? FileManager.default.removeItem(atPath: dir)
    }

    static func tinyproxy(basicAuth: (String, String)? = nil) throws -> DaemonFixture {
        try DaemonFixture(program: "/usr/bin/tinyproxy", configName: "tinyproxy.conf", config: { dir, port in
            var conf = """
                Port \(port)
                Listen 127.0.0.1
                Allow 127.0.0.1
                Timeout 30
                MaxClients 64
                LogLevel Info
                LogFile "\(dir)/tinyproxy.log"
                PidFile "\(dir)/tinyproxy.pid"
                """
            if geteuid() == 0 { conf += "\nUser nobody\nGroup nogroup" }
            if let (user, password) = basicAuth { conf += "\nBasicAuth \(user) \(password)" }
            return conf + "\n"
        }, arguments: { dir in ["-d", "-c", dir + "/tinyproxy.conf"] })
    }

    /// lighttpd with Digest auth: /md5/ (alice, realm porter-md5) and /sha256/ (bob,
    /// realm porter-sha256), both with password "secret".
    static func lighttpdDigest() throws -> DaemonFixture {
        try DaemonFixture(program: "/usr/sbin/lighttpd", configName: "lighttpd.conf", config: { dir, port in
            for sub in ["www", "www/md5", "www/sha256"] {
                try? FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
            }
            try? "md5 area\n".write(toFile: dir + "/www/md5/index.txt", atomically: true, encoding: .utf8)
            try? "sha256 area\n".write(toFile: dir + "/www/sha256/index.txt", atomically: true, encoding: .utf8)
            /// The hex digest of `text` (user:realm:password) with openssl's `algorithm`.
            func hex(_ algorithm: String, _ text: String) -> String {
                let input = dir + "/" + algorithm + ".in"
                try? text.write(toFile: input, atomically: false, encoding: .utf8)
                return ((try? NginxFixture.run("/usr/bin/openssl", ["dgst", "-" + algorithm, "-hex", "-r", input])) ?? "")
                    .split(separator: " ").first.map(String.init) ?? ""
            }
            let lines = "alice:porter-md5:\(hex("md5", "alice:porter-md5:secret"))\n"
                + "bob:porter-sha256:\(hex("sha256", "bob:porter-sha256:secret"))\n"
            try? lines.write(toFile: dir + "/htdigest", atomically: true, encoding: .utf8)
            _ = try? NginxFixture.run("/bin/chmod", ["-R", "a+rX", dir])
            return """
                server.document-root = "\(dir)/www"
                server.bind = "127.0.0.1"
                server.port = \(port)
                server.pid-file = "\(dir)/lighttpd.pid"
                server.errorlog = "\(dir)/error.log"
                server.modules = ("mod_auth", "mod_authn_file")
                mimetype.assign = (".txt" => "text/plain")
                auth.backend = "htdigest"
                auth.backend.htdigest.userfile = "\(dir)/htdigest"
                auth.require = (
                    "/md5/" => ("method" => "digest", "algorithm" => "MD5", "realm" => "porter-md5", "require" => "valid-user"),
                    "/sha256/" => ("method" => "digest", "algorithm" => "SHA-256", "realm" => "porter-sha256", "require" => "valid-user"),
                )

                """
        }, arguments: { dir in ["-D", "-f", dir + "/lighttpd.conf"] })
    }

    static func dante() throws -> DaemonFixture {
        try DaemonFixture(program: "/usr/sbin/danted", configName: "danted.conf", config: { dir, port in
            // Settings first, then rules: dante refuses settings after a rule.
            let unprivileged = geteuid() == 0 ? "user.unprivileged: nobody\n" : ""
            return """
                logoutput: \(dir)/danted.log
                internal: 127.0.0.1 port = \(port)
                external: 127.0.0.1
                clientmethod: none
                socksmethod: none
                \(unprivileged)client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 log: connect }
                socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 log: connect }

                """
        }, arguments: { dir in ["-f", dir + "/danted.conf", "-p", dir + "/danted.pid", "-N", "1"] })
    }
}

