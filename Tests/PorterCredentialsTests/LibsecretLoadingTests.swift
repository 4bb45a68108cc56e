import Foundation
import PorterTestSupport
import XCTest

/// libsecret (and the GLib, GIO and libgcrypt it brings) is opened on first use, never
/// linked: a program that never touches the keyring never maps it, a machine without it
/// still runs Porter (the file backend says why), and the declarations Porter uses in
/// its place match the real headers.
final class LibsecretLoadingTests: XCTestCase {
    private static let keyringLibraries = ["libsecret-1.so", "libglib-2.0.so", "libgobject-2.0.so", "libgio-2.0.so", "libgcrypt.so"]

    private var repository: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    /// The libraries of `keyringLibraries` that `arguments` (run under strace) opened.
    private func keyringLibrariesOpened(by arguments: [String], in fixture: SecretServiceFixture) throws -> (ProcessResult, [String]) {
        let trace = fixture.dir + "/trace-\(UUID().uuidString)"
        let run = try fixture.run("/usr/bin/strace", ["-f", "-qq", "-e", "trace=open,openat", "-o", trace, porterBinary] + arguments)
        let opened = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
            .filter { !$0.contains("ENOENT") }
            .compactMap { line in Self.keyringLibraries.first { line.contains("/" + $0) } }
        return (run, Array(Set(opened)).sorted())
    }

    func testAProgramThatNeverTouchesTheKeyringNeverLoadsLibsecret() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        // A session bus with a keyring is there, but loading a data: URL needs no credential.
        let (plain, opened) = try keyringLibrariesOpened(by: ["data:,x"], in: keyring)
        XCTAssertEqual(plain.status, 0, plain.stderr)
        XCTAssertEqual(plain.stdout, "x")
        XCTAssertEqual(opened, [], "porter data:,x mapped the keyring's libraries")
        // The same trace sees them when the keyring is used: the check above can fail.
        let (used, openedByUse) = try keyringLibrariesOpened(by: ["credentials", "where"], in: keyring)
        XCTAssertEqual(used.stdout, "secret service (org.freedesktop.secrets on \(keyring.busAddress))\n", used.stderr)
        XCTAssertTrue(openedByUse.contains("libsecret-1.so") && openedByUse.contains("libglib-2.0.so"), "\(openedByUse)")
        // Nor are they among the executable's own dependencies.
        let ldd = try runChecked("/usr/bin/ldd", [porterBinary])
        XCTAssertFalse(Self.keyringLibraries.contains { ldd.contains($0) }, ldd)
    }

    func testWithoutLibsecretTheFileIsUsedAndSaysWhy() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        // libsecret-1.so.0 made unreadable as a library for one process: /dev/null mounted
        // over it in a mount namespace of its own (the machine's file is untouched).
        let cache = try runChecked("/sbin/ldconfig", ["-p"])
        guard let line = cache.split(separator: "\n").first(where: { $0.contains("libsecret-1.so.0 ") }),
              let path = line.components(separatedBy: " => ").last else {
            return XCTFail("libsecret-1.so.0 is not installed (scripts/install-deps.sh installs it): \(cache)")
        }
        let library = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        let script = "mount --bind /dev/null \"$0\" && exec \"$@\""
        let run = try keyring.run("/usr/bin/unshare", ["-m", "sh", "-c", script, library, porterBinary, "credentials", "where"])
        XCTAssertEqual(run.status, 0, run.stderr)
        let prefix = "file \(keyring.credentialFile) (0600): no libsecret: libsecret-1.so.0 cannot be loaded ("
        XCTAssertTrue(run.stdout.hasPrefix(prefix), "\(run.stdout)\(run.stderr)")
        // Forced, it is refused with the same reason rather than silently replaced.
        let forced = try keyring.run("/usr/bin/unshare", ["-m", "sh", "-c", script, library, porterBinary, "credentials", "where"],
                                     overrides: ["PORTER_CREDENTIAL_STORE": "secret-service"])
        XCTAssertTrue(forced.stdout.contains("PORTER_CREDENTIAL_STORE=secret-service, but no libsecret: libsecret-1.so.0 cannot be loaded"),
                      "\(forced.stdout)\(forced.stderr)")
    }

    /// Porter declares the GLib and libsecret it calls itself (Sources/CPorterSecret/secret_abi.h):
    /// every layout, constant and signature compiles against the real headers.
    func testTheDeclarationsMatchTheRealHeaders() throws {
        let flags = try runChecked("/usr/bin/pkg-config", ["--cflags", "libsecret-1"])
            .split(separator: " ").map(String.init).map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
        let check = try runProcess("/usr/bin/cc", ["-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-DPORTER_SECRET_ABI_CHECK"] + flags
                                   + ["-I", repository + "/Sources/CPorterSecret", repository + "/Tests/LibsecretABI/check.c"])
        XCTAssertEqual(check.status, 0, check.stderr)
    }
}
