import Foundation

/// Tests/PorterHTTPTests/misbehave.py, started for one test class: a server that lies
/// (oversized heads, escape sequences, hostile file names) and records what it receives.
public final class MisbehavingServer: @unchecked Sendable {
    public let port: Int
    private let process: Process

    public init() throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("PorterHTTPTests/misbehave.py").path
        let (p, n) = try startReadyServer("/usr/bin/env", ["python3", script])
        guard n > 0 else {
            p.terminate()
            throw NginxFixture.Failure.setup("the misbehaving server (python3 misbehave.py) did not start")
        }
        process = p
        port = n
    }

    public var base: String { "http://127.0.0.1:\(port)" }

    /// Ends the server with SIGKILL: started from a test's worker thread it inherits that
    /// thread's signal mask, SIGTERM blocked, and `terminate()` would not end it.
    public func stop() {
        kill(process.processIdentifier, SIGKILL)
        let end = Date().addingTimeInterval(10)
        while process.isRunning, Date() < end { usleep(20_000) }
    }

    /// Every byte the server's /record... connections brought so far (each connection's
    /// bytes are logged once its client closed it), read over a plain socket.
    public func recorded() -> String {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return "" }
        let ask = Array("GET /recorded HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard write(fd, ask, ask.count) == ask.count else { return "" }
        var all = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0, errno == EINTR { continue }
            if n <= 0 { break }
            all += buffer[0..<n]
        }
        return String(decoding: all, as: UTF8.self)
    }

    /// Polls `recorded()` until `marker` shows (a generous deadline, never a fixed sleep).
    public func waitForRecorded(_ marker: String, seconds: Double = 30) -> String {
        let end = Date().addingTimeInterval(seconds)
        var text = recorded()
        while !text.contains(marker), Date() < end {
            usleep(50_000)
            text = recorded()
        }
        return text
    }
}
