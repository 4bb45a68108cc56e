import Foundation
import PorterTestSupport
import XCTest

/// How the fixtures start their servers (`startListening`): a port picked free may be
/// taken by another process before the server binds it (a client's ephemeral port, on a
/// busy machine), and the server exits. CI failed so with "nginx did not start". The
/// fixture waits for the event (listening, or exited) and starts the server again on
/// fresh ports; no deadline measures a healthy start.
final class FixtureStartTests: XCTestCase {
    /// The first port handed to the server is taken first: bound, not listening, as a
    /// client's ephemeral port is. The server exits; the second start, on a fresh port,
    /// listens.
    func testAServerWhosePortWasTakenStartsAgainOnAFreshPort() throws {
        var launches: [Int] = []
        var taken: Int32 = -1
        defer { if taken >= 0 { close(taken) } }
        let started = try startListening(ports: 1) { ports in
            launches.append(ports[0])
            if launches.count == 1 { taken = Self.bindWithoutListening(ports[0]) }
            return try Self.httpServer(on: ports[0])
        }
        defer { stopDaemon(started.pid, signal: SIGTERM) }
        XCTAssertGreaterThanOrEqual(taken, 0, "the port could not be taken for the test")
        XCTAssertEqual(launches.count, 2, "started again after the clash: \(launches)")
        XCTAssertEqual(started.ports, [launches.last!])
        XCTAssertNotEqual(launches.first, launches.last)
        XCTAssertTrue(loopbackAccepts(started.ports[0]))
    }

    /// One start only (what the fixtures did): the clash is a failure that names the
    /// exit, not a wait that runs out.
    func testAClashWithoutRetriesSaysTheServerExited() throws {
        var taken: Int32 = -1
        defer { if taken >= 0 { close(taken) } }
        XCTAssertThrowsError(try startListening(ports: 1, attempts: 1) { ports in
            taken = Self.bindWithoutListening(ports[0])
            return try Self.httpServer(on: ports[0])
        }) { error in
            XCTAssertTrue("\(error)".contains("exited"), "\(error)")
        }
    }

    /// Python's http.server on 127.0.0.1:port (it exits when the port is in use).
    static func httpServer(on port: Int) throws -> pid_t {
        try spawnDaemon("/usr/bin/python3", ["-m", "http.server", "--bind", "127.0.0.1",
                                             "--directory", NSTemporaryDirectory(), String(port)])
    }

    /// A socket bound to 127.0.0.1:port that does not listen (-1 if the bind failed).
    static func bindWithoutListening(_ port: Int) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if bound != 0 { close(fd); return -1 }
        return fd
    }
}
