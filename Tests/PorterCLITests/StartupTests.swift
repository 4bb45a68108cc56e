import Foundation
import Porter
@testable import PorterCLI
import XCTest

/// What a CLI run loads at start-up.
final class StartupTests: XCTestCase {
    /// Plugins are scanned only when a URL may need one: a plugin never takes a
    /// built-in scheme, so a run on built-in URLs skips the folders.
    func testPluginsAreLoadedOnlyWhenAURLMayNeedOne() {
        func needs(_ urls: [String], list: Bool = false, verbose: Bool = false, path: [String] = []) -> Bool {
            PluginOptions.needsPlugins(urls: urls, fromList: list, verbose: verbose, pluginPath: path)
        }
        XCTAssertFalse(needs(["data:,x"]))
        XCTAssertFalse(needs(["https://a.example/", "HTTP://b.example/x", "ftp://h/f", "ftps://h/f", "file:///etc/hosts", "file:/tmp/x"]))
        XCTAssertTrue(needs(["sftp://h/f"]), "a plugin scheme")
        XCTAssertTrue(needs(["gopher:x"]))
        XCTAssertTrue(needs(["localhost:8080/x"]), "a guessed URL may name a plugin's scheme")
        XCTAssertTrue(needs(["http:no-slashes"]), "not a URL the built-ins take as written")
        XCTAssertTrue(needs(["example.com"]))
        XCTAssertTrue(needs(["https://a.example/"], list: true), "a list's URLs are not known up front")
        XCTAssertTrue(needs(["https://a.example/"], verbose: true), "-v reports refused plugins")
        XCTAssertTrue(needs(["https://a.example/"], path: ["/opt/plugins"]))
        XCTAssertTrue(needs([]))
    }

    /// A command line that can only mean `fetch` is parsed as `fetch` directly (skipping
    /// the root's passes); every other goes through the root as before.
    func testOnlyACommandLineThatCanOnlyMeanFetchTakesTheDirectParse() throws {
        XCTAssertTrue(PorterCommand.parsesAsFetch(["data:,x"]))
        XCTAssertTrue(PorterCommand.parsesAsFetch(["https://a.example/", "file:///etc/hosts"]))
        XCTAssertTrue(PorterCommand.parsesAsFetch(["-s", "-o", "/dev/null", "data:,x"]))
        XCTAssertTrue(PorterCommand.parsesAsFetch(["-sSL", "-H", "X-A: 1", "--retry", "3", "https://a.example/"]))
        XCTAssertFalse(PorterCommand.parsesAsFetch([]))
        XCTAssertFalse(PorterCommand.parsesAsFetch([""]))
        for name in ["fetch", "handlers", "plugins", "plugin", "cache", "jobs", "credentials", "help"] {
            XCTAssertFalse(PorterCommand.parsesAsFetch([name, "x"]), name)
            XCTAssertFalse(PorterCommand.parsesAsFetch(["-s", name]), "\(name) anywhere")
        }
        for root in ["--help", "-h", "-sh", "--version", "--generate-completion-script", "--experimental-dump-help", "--"] {
            XCTAssertFalse(PorterCommand.parsesAsFetch(["data:,x", root]), root)
        }
        // The direct parse gives what the root gives.
        for line in [["data:,x", "data:,y"], ["-s", "-o", "/dev/null", "data:,x"], ["-sSL", "-H", "X-A: 1", "-d", "a=b", "https://a.example/"]] {
            let direct = try XCTUnwrap(Fetch.parseAsRoot(line) as? Fetch)
            let viaRoot = try XCTUnwrap(PorterCommand.parseAsRoot(line) as? Fetch)
            XCTAssertEqual(direct.urls, viaRoot.urls, "\(line)")
            XCTAssertEqual(direct.output, viaRoot.output, "\(line)")
            XCTAssertEqual(direct.header, viaRoot.header, "\(line)")
            XCTAssertEqual(direct.silent, viaRoot.silent, "\(line)")
        }
    }

    /// Each command names itself, with the names ArgumentParser derived from the types
    /// before (a derived name costs a conformance scan per parse).
    func testEveryCommandNamesItself() {
        XCTAssertEqual(PorterCommand.configuration.subcommands.map { $0.configuration.commandName },
                       ["fetch", "handlers", "plugins", "plugin", "cache", "jobs", "credentials"])
        XCTAssertEqual(PluginCommand.configuration.subcommands.map { $0.configuration.commandName }, ["test", "new"])
    }
}
