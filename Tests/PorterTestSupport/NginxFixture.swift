import Foundation

/// A real nginx on 127.0.0.1, started for the HTTP tests and stopped after them: plain
/// HTTP/1.1 on one free port, HTTPS with HTTP/2 on another, a CA and a leaf for
/// localhost / 127.0.0.1 made with openssl, static files, redirects, Basic auth, echo
/// locations (libnginx-mod-http-echo) and a throttled download.
public final class NginxFixture: @unchecked Sendable {
    public let dir: String
    public let httpPort: Int
    public let httpsPort: Int
    public let caFile: String
    /// HTTPS with HTTP/2 on a third port: the alternative service /alt/who names
    /// (`Alt-Svc: h2=":altPort"`); its /alt/who answers "alt".
    public let altPort: Int
    private let pid: pid_t

    public var http: String { "http://127.0.0.1:\(httpPort)" }
    public var https: String { "https://127.0.0.1:\(httpsPort)" }
    public var localhostHTTP: String { "http://localhost:\(httpPort)" }

    public static let bigSize = 32 << 20
    /// /medium.bin: the first bytes of /big.bin. Under /slow/ every file comes at 1 MiB/s,
    /// its requests logged with their Range and If-Range headers in `rangeLog`.
    public static let mediumSize = 6 << 20
    public var rangeLog: String { dir + "/logs/range.log" }

    /// Byte i of /big.bin.
    public static func bigByte(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: (i &* 2654435761) >> 13) }

    public enum Failure: Error, CustomStringConvertible {
        case setup(String)
        public var description: String { if case .setup(let s) = self { return s }; return "" }
    }

    public init() throws {
        let template = NSTemporaryDirectory() + "porter-nginx-XXXXXX"
        var bytes = Array(template.utf8CString)
        guard let made = mkdtemp(&bytes) else { throw Failure.setup("mkdtemp failed") }
        dir = String(cString: made)
        chmod(dir, 0o755)
        caFile = dir + "/ca.pem"

        let fm = FileManager.default
        for sub in ["www", "www/basic", "www/chain", "www/cache", "www/dav", "logs", "tmp"] {
            try fm.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
        }
        try "hello from nginx\n".write(toFile: dir + "/www/index.html", atomically: true, encoding: .utf8)
        try "members only\n".write(toFile: dir + "/www/basic/index.html", atomically: true, encoding: .utf8)
        for name in ["fresh", "nocache", "nostore", "stale", "vary", "heuristic", "swr"] {
            try "cached \(name)\n".write(toFile: dir + "/www/cache/\(name).txt", atomically: true, encoding: .utf8)
        }
        try String(repeating: "Porter compresses well. ", count: 4000).write(toFile: dir + "/www/text.txt", atomically: true, encoding: .utf8)
        var big = [UInt8](repeating: 0, count: NginxFixture.bigSize)
        for i in big.indices { big[i] = NginxFixture.bigByte(i) }
        try Data(big).write(to: URL(fileURLWithPath: dir + "/www/big.bin"))
        try Data(big.prefix(NginxFixture.mediumSize)).write(to: URL(fileURLWithPath: dir + "/www/medium.bin"))
        // Content codings nginx has no module for, served as files with their
        // Content-Encoding (/coded/...): text.txt in br and zstd, and bombs of zeros.
        try NginxFixture.compressFixtures(in: dir + "/www")
        // alice:secret
        try "alice:\(try NginxFixture.run("/usr/bin/openssl", ["passwd", "-apr1", "secret"]).trimmingCharacters(in: .whitespacesAndNewlines))\n"
            .write(toFile: dir + "/htpasswd", atomically: true, encoding: .utf8)
        try NginxFixture.makeCertificates(in: dir)
        _ = try NginxFixture.run("/bin/chmod", ["-R", "a+rX", dir])
        chmod(dir + "/www/dav", 0o777)  // nginx's worker (nobody) stores PUT bodies there

        let folder = dir
        let started: (ports: [Int], pid: pid_t)
        do {
            started = try startListening(ports: 3, log: { (try? String(contentsOfFile: folder + "/logs/stderr.log", encoding: .utf8)) ?? "" }) { ports in
                try NginxFixture.config(dir: folder, httpPort: ports[0], httpsPort: ports[1], altPort: ports[2])
                    .write(toFile: folder + "/nginx.conf", atomically: true, encoding: .utf8)
                return try spawnDaemon("/usr/sbin/nginx", ["-p", folder, "-c", folder + "/nginx.conf", "-e", folder + "/logs/stderr.log"])
            }
        } catch {
            throw Failure.setup("nginx did not start: \(error)")
        }
        (httpPort, httpsPort, altPort) = (started.ports[0], started.ports[1], started.ports[2])
        pid = started.pid
    }

    /// nginx's config for these ports (the routes name the plain port and the alternative one).
    static func config(dir: String, httpPort: Int, httpsPort: Int, altPort: Int) -> String {
        let routes = """
            root \(dir)/www;
            default_type application/octet-stream;
            gzip on; gzip_types text/plain; gzip_min_length 100;
            location = /text.txt { default_type text/plain; charset utf-8; }
            location = /headers { default_type text/plain;
                echo "auth=$http_authorization cookie=$http_cookie ua=$http_user_agent x=$http_x_test"; }
            location = /via { default_type text/plain; echo "via=$http_via"; }
            location = /trace { default_type text/plain; echo "traceparent=$http_traceparent tracestate=$http_tracestate"; }
            location = /trace/hop { return 302 /trace; }
            location = /cookie/set { add_header Set-Cookie "hop=1; Path=/"; return 302 /headers; }
            location = /cookie/two { add_header Set-Cookie "first=1; Path=/; Max-Age=600"; add_header Set-Cookie "second=2; Path=/cookie"; return 200 "set\n"; }
            location = /cookie/cross { add_header Set-Cookie "only=127; Path=/"; return 302 http://localhost:\(httpPort)/headers; }
            location = /cookie/domain { add_header Set-Cookie "dom=1; Domain=porter.test; Path=/"; add_header Set-Cookie "host=1; Path=/"; return 200 "domain\n"; }
            location = /cookie/n { access_log \(dir)/logs/cookie.log cachelog; add_header Set-Cookie "n$arg_n=1; Max-Age=600; Path=/"; return 200 "n\n"; }
            location = /cookie/secure { add_header Set-Cookie "sec=1; Secure; Path=/"; return 200 "secure\n"; }
            location = /cache/fresh.txt { access_log \(dir)/logs/cache.log cachelog; add_header Cache-Control "max-age=60"; }
            location = /cache/nocache.txt { access_log \(dir)/logs/cache.log cachelog; add_header Cache-Control "no-cache"; }
            location = /cache/nostore.txt { access_log \(dir)/logs/cache.log cachelog; add_header Cache-Control "no-store"; }
            location = /cache/stale.txt { access_log \(dir)/logs/cache.log cachelog; add_header Cache-Control "max-age=1"; }
            location = /cache/swr.txt { access_log \(dir)/logs/cache.log cachelog; add_header Cache-Control "max-age=1, stale-while-revalidate=60"; }
            location = /cache/vary.txt { access_log \(dir)/logs/cache.log cachelog; add_header Cache-Control "max-age=60"; add_header Vary "X-Lang"; }
            location = /cache/create { access_log \(dir)/logs/cache.log cachelog; add_header Location "/cache/fresh.txt?loc"; add_header Content-Location "http://localhost:\(httpPort)/cache/fresh.txt?other"; echo_read_request_body; echo "created"; }
            location = /cache/item { access_log \(dir)/logs/cache.log cachelog; add_header Cache-Control "max-age=60"; echo_read_request_body; echo "item $request_method"; }
            location = /conn { default_type text/plain; echo_sleep 0.3; echo "$connection"; }
            location = /echo { default_type text/plain; echo_read_request_body;
                echo -n "$request_method "; echo_request_body; }
            location = /redirect/301 { return 301 /echo; }
            location = /redirect/302 { return 302 /echo; }
            location = /redirect/303 { return 303 /echo; }
            location = /redirect/307 { return 307 /echo; }
            location = /redirect/308 { return 308 /echo; }
            location = /chain/3 { return 302 /chain/2; }
            location = /chain/2 { return 302 /chain/1; }
            location = /chain/1 { return 302 /index.html; }
            location = /loop { return 302 /loop; }
            location = /to-file { return 302 file:///etc/hostname; }
            location = /cross { return 302 http://localhost:\(httpPort)/headers; }
            location = /relative { return 302 chain/1; }
            location /basic/ { auth_basic "porter-test"; auth_basic_user_file \(dir)/htpasswd; }
            location = /auth-echo { default_type text/plain;
                if ($http_authorization = "") { add_header WWW-Authenticate 'Basic realm="elsewhere"' always; return 401 "who are you\n"; }
                echo "auth=$http_authorization"; }
            location = /cross-auth { return 302 http://localhost:\(httpPort)/auth-echo; }
            location = /hidden { default_type text/plain;
                if ($http_authorization = "") { return 404 "nothing here\n"; }
                echo "found with $http_authorization"; }
            location = /request { default_type text/plain; echo_read_request_body;
                echo "method=$request_method args=$args ua=$http_user_agent referer=$http_referer ct=$content_type accept=$http_accept";
                echo_request_body; }
            location = /attachment { default_type text/plain; add_header Content-Disposition 'attachment; filename="../../etc/evil name.txt"'; echo "attached"; }
            location = /plain-auth { return 302 http://127.0.0.1:\(httpPort)/auth-echo; }
            location = /slow { default_type text/plain; echo "first"; echo_flush; echo_sleep 30; echo "late"; }
            location = /throttled.bin { alias \(dir)/www/big.bin; limit_rate 2m; }
            location /dav/ { alias \(dir)/www/dav/; dav_methods PUT; create_full_put_path on; client_max_body_size 64m; }
            location /slow/ { alias \(dir)/www/; limit_rate 1m; access_log \(dir)/logs/range.log rangelog; }
            location = /accept-encoding { default_type text/plain; echo "ae=$http_accept_encoding"; }
            location ~ ^/coded/(?<name>.+)\\.br$ { gzip off; alias \(dir)/www/$name.br; default_type text/plain; add_header Content-Encoding br; }
            location ~ ^/coded/(?<name>.+)\\.zst$ { gzip off; alias \(dir)/www/$name.zst; default_type text/plain; add_header Content-Encoding zstd; }
            location = /hsts/set { add_header Strict-Transport-Security "max-age=3600"; echo "hsts"; }
            location = /hsts/sub { add_header Strict-Transport-Security "max-age=3600; includeSubDomains"; echo "hsts"; }
            location = /hsts/clear { add_header Strict-Transport-Security "max-age=0"; echo "cleared"; }
            location = /hsts/bad { add_header Strict-Transport-Security "max-age=3600; max-age=5"; echo "bad"; }
            location = /alt/who { add_header Alt-Svc 'h2=":\(altPort)"; ma=3600'; default_type text/plain; echo "origin"; }
            """
        return """
            daemon off;
            worker_processes 1;
            pid \(dir)/nginx.pid;
            error_log \(dir)/logs/error.log;
            load_module /usr/lib/nginx/modules/ngx_http_echo_module.so;
            events { worker_connections 1024; }
            http {
                access_log off;
                log_format cachelog '$request_method $request_uri $status';
                log_format rangelog '$request_uri $status range="$http_range" if-range="$http_if_range" sent=$body_bytes_sent';
                client_body_temp_path \(dir)/tmp/body; proxy_temp_path \(dir)/tmp/proxy;
                fastcgi_temp_path \(dir)/tmp/fcgi; uwsgi_temp_path \(dir)/tmp/uwsgi; scgi_temp_path \(dir)/tmp/scgi;
                keepalive_requests 100000;
                server { listen 127.0.0.1:\(httpPort); server_name localhost 127.0.0.1;
            \(routes)
                }
                server { listen 127.0.0.1:\(httpsPort) ssl http2; server_name localhost 127.0.0.1;
                    ssl_certificate \(dir)/leaf.pem; ssl_certificate_key \(dir)/leaf.key;
                    ssl_client_certificate \(dir)/ca.pem; ssl_verify_client optional;
                    location = /whoami { default_type text/plain; echo "$ssl_client_verify $ssl_client_s_dn"; }
            \(routes)
                }
                server { listen 127.0.0.1:\(altPort) ssl http2; server_name localhost 127.0.0.1;
                    ssl_certificate \(dir)/leaf.pem; ssl_certificate_key \(dir)/leaf.key;
                    location = /alt/who { default_type text/plain; echo "alt"; }
                }
            }
            """
    }

    public func stop() {
        stopDaemon(pid, signal: SIGQUIT)
        try? FileManager.default.removeItem(atPath: dir)
    }

    public static func run(_ tool: String, _ args: [String], in cwd: String? = nil) throws -> String {
        try runChecked(tool, args, currentDirectory: cwd)
    }

    /// A CA (CA:TRUE, keyCertSign) and a leaf it signed for localhost and 127.0.0.1.
    public static func makeCertificates(in dir: String) throws {
        let o = "/usr/bin/openssl"
        try """
            basicConstraints=critical,CA:TRUE
            keyUsage=critical,keyCertSign,cRLSign
            """.write(toFile: dir + "/ca.ext", atomically: true, encoding: .utf8)
        try """
            basicConstraints=CA:FALSE
            keyUsage=critical,digitalSignature,keyEncipherment
            extendedKeyUsage=serverAuth
            subjectAltName=DNS:localhost,IP:127.0.0.1
            """.write(toFile: dir + "/leaf.ext", atomically: true, encoding: .utf8)
        _ = try run(o, ["ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", "ca.key"], in: dir)
        _ = try run(o, ["req", "-new", "-key", "ca.key", "-subj", "/CN=Porter Test CA", "-out", "ca.csr"], in: dir)
        _ = try run(o, ["x509", "-req", "-in", "ca.csr", "-signkey", "ca.key", "-days", "2", "-extfile", "ca.ext", "-out", "ca.pem"], in: dir)
        _ = try run(o, ["ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", "leaf.key"], in: dir)
        _ = try run(o, ["req", "-new", "-key", "leaf.key", "-subj", "/CN=localhost", "-out", "leaf.csr"], in: dir)
        _ = try run(o, ["x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                        "-days", "2", "-extfile", "leaf.ext", "-out", "leaf.pem"], in: dir)
        // A client certificate the server accepts (same CA).
        try "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n".write(toFile: dir + "/client.ext", atomically: true, encoding: .utf8)
        _ = try run(o, ["ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", "client.key"], in: dir)
        _ = try run(o, ["req", "-new", "-key", "client.key", "-subj", "/CN=porter-client", "-out", "client.csr"], in: dir)
        _ = try run(o, ["x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                        "-days", "2", "-extfile", "client.ext", "-out", "client.pem"], in: dir)
    }

    /// Sizes of the zero bombs under /coded/ (zeros-N.br, zeros-N.zst, N in MiB).
    public static let bombMiB = [64, 256]

    /// text.txt.br / .zst; zeros-N.br / .zst (N MiB of zeros: a few hundred bytes each);
    /// wide.zst, a zstd frame that asks for a 128 MiB window (RFC 9659 allows 8 MiB).
    static func compressFixtures(in www: String) throws {
        func shell(_ script: String) throws { _ = try run("/bin/sh", ["-c", script], in: www) }
        try shell("brotli -q 5 -c text.txt > text.txt.br && zstd -q -3 -c text.txt > text.txt.zst")
        for n in bombMiB {
            try shell("head -c \(n)M /dev/zero | brotli -q 1 -c > zeros-\(n).br && head -c \(n)M /dev/zero | zstd -q -1 -c > zeros-\(n).zst")
        }
        // 16 MiB of zeros from a pipe: a valid zstd body larger than one callback's budget.
        try shell("head -c 16M /dev/zero | zstd -q -1 -c > piped.zst")
        // From a pipe (size unknown), the frame keeps the 128 MiB window it is told to use.
        try shell("head -c 16M /dev/zero | zstd -q -1 --long=27 -c > wide.zst")
    }

    public static func freePort() throws -> Int {
        guard let port = freeLoopbackPort() else { throw Failure.setup("cannot bind a free port") }
        return port
    }

    public static func accepts(_ port: Int) -> Bool { loopbackAccepts(port) }
}
