import XCTest
@testable import PorterPlugins

/// A description read from a probe's output is checked as the entry point's answer is:
/// the host runs none of the plugin's code, so this is where a forged one stops.
final class DescriptionTests: XCTestCase {
    private func description(schemes: [String] = ["pok"], reads: [String] = [], writes: [String] = [],
                             minor: Int = 2, needs: UInt32 = 0, port: Int? = nil, cookies: Bool = false) -> PluginDescription {
        let list = schemes.map { name in
            PluginScheme(name: name, needsNetwork: false, mayBeRedirectTarget: false, credentialsPerRequest: false, canUpload: false,
                         defaultPort: port, carriesCookies: cookies)
        }
        return PluginDescription(name: "p", version: "1", schemes: list, readPaths: reads, writePaths: writes,
                                 subscriptions: [], abiMinor: minor, needs: needs)
    }

    func testAForgedDescriptionIsRefused() {
        XCTAssertNil(description().problem)
        XCTAssertNotNil(description(schemes: []).problem)
        XCTAssertNotNil(description(schemes: ["Not A Scheme"]).problem)
        XCTAssertNotNil(description(reads: ["~/"]).problem)
        XCTAssertNotNil(description(writes: ["~/.bashrc"]).problem)
        XCTAssertNotNil(description(writes: ["/etc/passwd"]).problem)
        XCTAssertNotNil(description(reads: ["~/../etc"]).problem)
        XCTAssertNotNil(description(minor: 99).problem)
        XCTAssertNil(description(reads: ["~/.ssh"], writes: ["~/.ssh/known_hosts", "/tmp/x/y"]).problem)
        // Needs (ABI 1.3): only bits this host knows, and only from a 1.3 plugin.
        XCTAssertNil(description(minor: 3, needs: UInt32(PORTER_NEED_SSH_AGENT)).problem)
        XCTAssertNotNil(description(minor: 3, needs: 1 << 7).problem)
        XCTAssertNotNil(description(minor: 2, needs: UInt32(PORTER_NEED_SSH_AGENT)).problem)
        // Declarations (ABI 1.4): a port a URL can name, and only from a 1.4 plugin.
        XCTAssertNil(description(minor: 4, port: 22, cookies: true).problem)
        XCTAssertNotNil(description(minor: 4, port: 70_000).problem)
        XCTAssertNotNil(description(minor: 4, port: 0).problem)
        XCTAssertNotNil(description(minor: 3, port: 22).problem)
        XCTAssertNotNil(description(minor: 3, cookies: true).problem)
    }
}
