import Foundation
import XCTest
import PorterTestSupport

/// waitsForConnectivity (`porter --wait-for-connectivity`) in a network namespace of the
/// test's own, whose loopback the test brings down and up: with no route the task waits
/// (and says so once), starts when the kernel announces the route (rtnetlink), gives up at
/// the resource timeout, and does not wait for a server that refuses.
final class ConnectivityTests: XCTestCase {
    private var ns = ""
    private var site = ""
    private var server: Process?
    private let port = 18081
    private var url: String { "http://127.0.0.1:\(port)/hello.txt" }

    override func setUpWithError() throws {
        guard geteuid() == 0 else {
            throw NSError(domain: "ConnectivityTests", code: 1,
                          userInfo: [NSLocalizedDescriptionKey: "network namespaces need root: run the tests as root (CI does)"])
        }
        ns = "porter-conn-\(getpid())-\(UUID().uuidString.prefix(4))"
        try runChecked("/usr/sbin/ip", ["netns", "add", ns])
        site = NSTemporaryDirectory() + ns
        try FileManager.default.createDirectory(atPath: site, withIntermediateDirectories: true)
        try Data("hello from the namespace\n".utf8).write(to: URL(fileURLWithPath: site + "/hello.txt"))
        // A server on the namespace's own 127.0.0.1, whose loopback has never been up: no
        // route, so a connect fails at once with ENETUNREACH. (A loopback brought up and
        // down again keeps its local routes and drops packets instead: a connect then
        // hangs until its timeout, which is no test of waiting for a route.)
        server = try startProcess("/usr/sbin/ip", ["netns", "exec", ns, "/usr/bin/python3", "-m", "http.server", String(port),
                                                   "--bind", "127.0.0.1", "--directory", site])
        XCTAssertTrue(eventually(60) {
            ((try? runProcess("/usr/sbin/ip", ["netns", "exec", ns, "/usr/bin/ss", "-ltnH"]).stdout) ?? "").contains("127.0.0.1:\(port)")
        }, "the server in the namespace did not start")
    }

    override func tearDown() {
        server?.terminate()
        server?.waitUntilExit()
        _ = try? runProcess("/usr/sbin/ip", ["netns", "del", ns])
        try? FileManager.default.removeItem(atPath: site)
        super.tearDown()
    }

    private func setLoopback(up: Bool) throws {
        try runChecked("/usr/sbin/ip", ["-n", ns, "link", "set", "lo", up ? "up" : "down"])
    }

    private func porterInNamespace(_ args: [String]) throws -> ProcessResult {
        try runProcess("/usr/sbin/ip", ["netns", "exec", ns, porterBinary] + args)
    }

    /// Failed by the connect (7), not by the resource timeout (28): it did not wait.
    func testWithoutWaitingNoRouteFailsAtOnce() throws {
        let r = try porterInNamespace(["-sS", "--max-time", "600", url])
        XCTAssertEqual(r.status, 7, "curl's 7: cannot connect: \(r.stderr)")
    }

    func testWaitsForTheRouteThenLoads() throws {
        let err = site + "/stderr.txt", out = site + "/stdout.txt"
        _ = FileManager.default.createFile(atPath: err, contents: nil)
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        p.arguments = ["netns", "exec", ns, porterBinary, "-v", "--wait-for-connectivity", "--max-time", "600", url]
        p.standardError = FileHandle(forWritingAtPath: err)
        p.standardOutput = FileHandle(forWritingAtPath: out)
        try p.run()
        XCTAssertTrue(eventually(60) {
            ((try? String(contentsOfFile: err, encoding: .utf8)) ?? "").contains("waiting for connectivity")
        }, "porter did not report waiting: \((try? String(contentsOfFile: err, encoding: .utf8)) ?? "")")
        // A lower bound only: on a slow machine this can only pass more easily.
        usleep(700_000)
        XCTAssertTrue(p.isRunning, "a waiting task must not fail while there is no route")
        try setLoopback(up: true)
        // Ended long before --max-time (600 s) could end it, and with success (below): the
        // route change started it — an order of events, not a timing.
        XCTAssertTrue(eventually(120) { !p.isRunning }, "the task did not start when the route appeared")
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
        XCTAssertEqual(try String(contentsOfFile: out, encoding: .utf8), "hello from the namespace\n")
        let log = try String(contentsOfFile: err, encoding: .utf8)
        XCTAssertEqual(log.components(separatedBy: "waiting for connectivity").count - 1, 1, "told once: \(log)")
    }

    func testTheResourceTimeoutBoundsTheWait() throws {
        let start = Date()
        let r = try porterInNamespace(["-sS", "--wait-for-connectivity", "--max-time", "1.5", url])
        let took = Date().timeIntervalSince(start)
        XCTAssertEqual(r.status, 28, "curl's 28: timed out: \(r.stderr)")
        XCTAssertTrue(r.stderr.contains("waited for connectivity"), r.stderr)
        // The behaviour is a time limit: not before it, and (a bound on a hang only, 20× the
        // limit, since a loaded machine is slow) not forever after it.
        XCTAssertGreaterThanOrEqual(took, 1.4)
        XCTAssertLessThan(took, 30)
    }

    /// A name that cannot be looked up while no name server is reachable is the network's
    /// fault too: the task waits (here until its resource timeout).
    func testNoNameServerMeansWaiting() throws {
        let r = try porterInNamespace(["-sS", "--wait-for-connectivity", "--max-time", "1.5", "http://porter-test.invalid/"])
        XCTAssertEqual(r.status, 28, r.stderr)
        XCTAssertTrue(r.stderr.contains("waited for connectivity"), r.stderr)
        let plain = try porterInNamespace(["-sS", "--max-time", "10", "http://porter-test.invalid/"])
        XCTAssertEqual(plain.status, 6, "without waiting: cannot find the host at once (curl's 6): \(plain.stderr)")
    }

    /// With a name server on this machine (systemd-resolved's 127.0.0.53, as on Ubuntu)
    /// the name server is always reachable: what counts is whether anything beyond the
    /// machine is. Loopback up, no other route: the task waits.
    func testALocalStubResolverIsNotTakenForTheNetwork() throws {
        let etc = "/etc/netns/\(ns)"
        try FileManager.default.createDirectory(atPath: etc, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: etc) }
        try Data("nameserver 127.0.0.53\n".utf8).write(to: URL(fileURLWithPath: etc + "/resolv.conf"))
        try setLoopback(up: true)
        let r = try porterInNamespace(["-sS", "--wait-for-connectivity", "--max-time", "1.5", "http://porter-test.invalid/"])
        XCTAssertEqual(r.status, 28, "waited, then timed out: \(r.stderr)")
        XCTAssertTrue(r.stderr.contains("waited for connectivity"), r.stderr)
    }

    /// A route exists and nothing listens: the refusal is the answer, not a reason to wait.
    func testARefusingServerIsNotWaitedFor() throws {
        try setLoopback(up: true)
        let r = try porterInNamespace(["-sS", "--wait-for-connectivity", "--max-time", "600", "http://127.0.0.1:\(port + 1)/"])
        XCTAssertEqual(r.status, 7, "refused (7), not timed out after a wait (28): \(r.stderr)")
    }
}
