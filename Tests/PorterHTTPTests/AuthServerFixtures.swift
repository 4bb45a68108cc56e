import Foundation
import PorterTestSupport

/// Apache with mod_auth_gssapi and squid for the http tests; `KerberosRealm`,
/// `NTLMServer` and `DaemonFixture` are in PorterTestSupport (the WebSocket tests use them too).
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
