import CPorterIPC
import Foundation
import XCTest

/// What a detached program (porterd started by an app or the CLI, an app porterd
/// launches) inherits from the process that starts it.
final class SpawnTests: XCTestCase {
    /// An ignored signal survives execve: a caller that ignores SIGTERM, SIGINT or SIGHUP
    /// (the CLI does while it handles them) must not start a daemon that cannot be
    /// stopped. Blocked signals do not pass either.
    func testADetachedProgramStartsWithEverySignalAtItsDefault() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("spawn-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let out = dir + "/status"
        let caught = [SIGHUP, SIGINT, SIGTERM, SIGUSR1]
        let before = caught.map { signal($0, SIG_IGN) }
        var blocked = sigset_t(), old = sigset_t()
        sigemptyset(&blocked)
        sigaddset(&blocked, SIGUSR2)
        pthread_sigmask(SIG_BLOCK, &blocked, &old)
        defer {
            for (sig, handler) in zip(caught, before) { signal(sig, handler) }
            pthread_sigmask(SIG_SETMASK, &old, nil)
        }
        let args = ["/bin/sh", "-c", "grep -E '^Sig(Ign|Blk):' /proc/self/status > \(out).part && mv \(out).part \(out)"]
        var argv: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        XCTAssertEqual(porter_ipc_spawn_detached("/bin/sh", &argv), 0)
        let deadline = Date().addingTimeInterval(60)
        while !FileManager.default.fileExists(atPath: out), Date() < deadline { usleep(10_000) }
        let status = try String(contentsOfFile: out, encoding: .utf8)
        func mask(_ name: String) throws -> UInt64 {
            try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .flatMap { UInt64($0.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces), radix: 16) }, status)
        }
        let ignored = try mask("SigIgn"), blockedNow = try mask("SigBlk")
        for sig in caught {
            XCTAssertEqual(ignored & (1 << UInt64(sig - 1)), 0, "signal \(sig) is ignored in the detached program: \(status)")
        }
        XCTAssertEqual(blockedNow & (1 << UInt64(SIGUSR2 - 1)), 0, "SIGUSR2 is blocked in the detached program: \(status)")
    }
}
