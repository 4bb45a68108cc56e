import Foundation

/// The servers of wsserver.py: the `websockets` package from PyPI (ws and wss), a raw
/// server that breaks RFC 6455 on purpose, and a line echo server for stream tasks.
public enum WSFixture {
    public struct Ports { public let ws, wss, raw, echo, deflate: Int; public let dir: String; public let process: Process }
    nonisolated(unsafe) public static var setup: Result<Ports, Error>?
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    public static func start() -> Result<Ports, Error> {
        if let setup { return setup }
        let made = Result { () throws -> Ports in
            let python = root.appendingPathComponent(".build/ftp-venv/bin/python").path
            guard FileManager.default.isExecutableFile(atPath: python) else {
                throw NginxFixture.Failure.setup("no Python venv at \(python): run `make test` (scripts/install-deps.sh makes it)")
            }
            var template = Array((NSTemporaryDirectory() + "porter-ws-XXXXXX").utf8CString)
            guard let made = mkdtemp(&template) else { throw NginxFixture.Failure.setup("mkdtemp") }
            let dir = String(cString: made)
            try NginxFixture.makeCertificates(in: dir)
            // One server for the whole run (two test classes use it): it ends itself when
            // the test process is gone. A port found free can be taken before the server
            // binds it (another fixture's, or an outgoing connection's ephemeral port): the
            // server then exits without READY and is started again on other ports (one CI
            // run in three lost every WebSocket test to this).
            for _ in 0..<5 {
                let ports = try (0..<5).map { _ in try NginxFixture.freePort() }
                let (p, port) = try startReadyServer(python, [root.appendingPathComponent("Tests/PorterWebSocketTests/wsserver.py").path]
                                                     + ports.map(String.init) + [dir + "/leaf.pem", dir + "/leaf.key", dir + "/closes.log"])
                if port == ports[0] {
                    return Ports(ws: ports[0], wss: ports[1], raw: ports[2], echo: ports[3], deflate: ports[4], dir: dir, process: p)
                }
                if p.isRunning { p.terminate() }
                p.waitUntilExit()
            }
            throw NginxFixture.Failure.setup("wsserver.py did not start (five tries)")
        }
        setup = made
        return made
    }
}

