import Foundation
import PorterTestSupport

/// The servers of the http tests, on `DaemonFixture` (PorterTestSupport).
extension DaemonFixture {
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

