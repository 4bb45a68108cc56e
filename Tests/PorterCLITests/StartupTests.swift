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

    /// `porter URL...` is parsed as `fetch` directly (skipping the root's passes); every
    /// other command line goes through the root as before.
    func testOnlyAPlainURLListTakesTheDirectParse() {
        XCTAssertTrue(PorterCommand.isURLsOnly(["data:,x"]))
        XCTAssertTrue(PorterCommand.isURLsOnly(["https://a.example/", "file:///etc/hosts"]))
        XCTAssertTrue(PorterCommand.isURLsOnly(["https://a.example/", "handlers"]), "only the first argument can name a subcommand")
        XCTAssertFalse(PorterCommand.isURLsOnly([]))
        for name in ["fetch", "handlers", "plugins", "plugin", "cache", "jobs", "credentials", "help"] {
            XCTAssertFalse(PorterCommand.isURLsOnly([name, "x"]), name)
        }
        XCTAssertFalse(PorterCommand.isURLsOnly(["-s", "data:,x"]))
        XCTAssertFalse(PorterCommand.isURLsOnly(["data:,x", "-o", "f"]))
        XCTAssertFalse(PorterCommand.isURLsOnly(["data:,x", "--"]))
        XCTAssertFalse(PorterCommand.isURLsOnly([""]))
        // The direct parse gives what the root gives.
        let direct = try? Fetch.parseAsRoot(["data:,x", "data:,y"]) as? Fetch
        let viaRoot = try? PorterCommand.parseAsRoot(["data:,x", "data:,y"]) as? Fetch
        XCTAssertEqual(direct?.urls, ["data:,x", "data:,y"])
        XCTAssertEqual(viaRoot?.urls, direct?.urls)
    }

    /// Each command names itself, with the names ArgumentParser derived from the types
    /// before (a derived name costs a conformance scan per parse).
    func testEveryCommandNamesItself() {
        XCTAssertEqual(PorterCommand.configuration.subcommands.map { $0.configuration.commandName },
                       ["fetch", "handlers", "plugins", "plugin", "cache", "jobs", "credentials"])
        XCTAssertEqual(PluginCommand.configuration.subcommands.map { $0.configuration.commandName }, ["test", "new"])
    }
}
