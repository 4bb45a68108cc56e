import ArgumentParser
import Foundation
@testable import PorterCLI
import PorterTestSupport
import XCTest

/// The start-up parser of `fetch` (FetchCommandLine) against ArgumentParser, which stays
/// the definition: the option table must match its options exactly, and on any command
/// line the start-up parser either gives what ArgumentParser gives or defers to it.
final class FetchCommandLineTests: XCTestCase {
    /// ArgumentParser's own description of `fetch` (what `porter fetch
    /// --experimental-dump-help` prints): every option and flag with its names, whether
    /// it repeats and how it takes its value.
    private func argumentParserOptions() throws -> [[String: Any]] {
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(Fetch._dumpHelp().utf8)) as? [String: Any])
        let command = try XCTUnwrap(json["command"] as? [String: Any])
        XCTAssertEqual(command["commandName"] as? String, "fetch")
        let arguments = try XCTUnwrap(command["arguments"] as? [[String: Any]])
        return arguments.filter { ($0["kind"] as? String) != "positional" }
    }

    private func names(_ argument: [String: Any], _ kind: String) -> [String] {
        ((argument["names"] as? [[String: Any]]) ?? []).filter { $0["kind"] as? String == kind }.compactMap { $0["name"] as? String }
    }

    /// Every option ArgumentParser knows for `fetch` is in the table under the same names,
    /// with the same arity (flag or value), repetition and value strategy; the table has
    /// nothing more. (help and version are ArgumentParser's own: the start-up parser
    /// leaves them to it.)
    func testTheTableHoldsEveryOptionOfFetchAsArgumentParserDefinesIt() throws {
        var seen = 0
        for argument in try argumentParserOptions() {
            let longs = names(argument, "long"), shorts = names(argument, "short")
            XCTAssertEqual(names(argument, "longWithSingleDash"), [], "the start-up parser reads no single-dash long names")
            if longs == ["help"] || longs == ["version"] {
                for word in longs.map({ "--" + $0 }) + shorts.map({ "-" + $0 }) {
                    XCTAssertNil(FetchCommandLine.parse(["data:,x", word]), "\(word) is ArgumentParser's")
                }
                continue
            }
            let label = (longs + shorts).joined(separator: "/")
            XCTAssertLessThanOrEqual(longs.count, 1, label)
            XCTAssertLessThanOrEqual(shorts.count, 1, label)
            let spec = try XCTUnwrap(longs.first.flatMap { FetchCommandLine.option(long: $0[...]) }
                                        ?? shorts.first.flatMap { FetchCommandLine.option(short: Character($0)) },
                                     "\(label) is not in FetchCommandLine.options")
            seen += 1
            XCTAssertEqual(spec.long, longs.first, label)
            XCTAssertEqual(spec.short.map(String.init), shorts.first, label)
            let kind = argument["kind"] as? String
            let strategy = argument["parsingStrategy"] as? String
            switch spec.kind {
            case .flag: XCTAssertEqual(kind, "flag", label)
            case .value, .fallback:
                XCTAssertEqual(kind, "option", label)
                XCTAssertEqual(strategy, "default", label)
            case .unconditionalValue:
                XCTAssertEqual(kind, "option", label)
                XCTAssertEqual(strategy, "unconditional", label)
            }
            if kind == "option" { XCTAssertEqual(spec.repeats, argument["isRepeating"] as? Bool, label) }
        }
        XCTAssertEqual(seen, FetchCommandLine.options.count, "the table has options ArgumentParser does not know")
        // No two entries share a name.
        let longs = FetchCommandLine.options.compactMap(\.long), shorts = FetchCommandLine.options.compactMap(\.short)
        XCTAssertEqual(Set(longs).count, longs.count)
        XCTAssertEqual(Set(shorts).count, shorts.count)
    }

    /// The words that send a command line to the root are the root's subcommands and help.
    func testTheCommandWordsAreTheRootsSubcommands() {
        let names = PorterCommand.configuration.subcommands.flatMap { [$0.configuration.commandName ?? ""] + $0.configuration.aliases }
        XCTAssertEqual(Set(FetchCommandLine.commandWords), Set(names + ["help"]))
        XCTAssertEqual(FetchCommandLine.commandWords.count, names.count + 1)
    }

    /// Everyday command lines take the start-up parse; what it does not fully understand
    /// is left to ArgumentParser.
    func testCommonCommandLinesTakeTheStartUpParseAndTheRestDefer() {
        for line in [["data:,x"], ["-s", "-o", "/dev/null", "data:,x"], ["-sSL", "-H", "X-A: 1", "--retry", "3", "https://a.example/"],
                     ["-fsSLo", "out", "https://a.example/f"], ["--output=out", "-d", "@-", "-X", "PUT", "http://h/"],
                     ["-o=out", "http://h/"], ["-w", "%{http_code}\n", "-o", "-", "http://h/"], ["-z", "-Sun, 06 Nov 1994 08:49:37 GMT", "http://h/"],
                     ["http://h/", "-", ""], ["-#", "-O", "http://h/f"], ["--max-time", "2.5", "--max-redirs=-1", "http://h/"]] {
            XCTAssertNotNil(FetchCommandLine.parse(line), "\(line)")
        }
        for line in [[], [""], ["-h"], ["--help"], ["data:,x", "--version"], ["--", "data:,x"], ["-K", "f", "data:,x"], ["--config=f", "data:,x"],
                     ["--nope", "data:,x"], ["-q", "data:,x"], ["-ofile", "data:,x"], ["--max-time", "x", "data:,x"], ["-o"], ["-o", "-s", "data:,x"], ["--max-redirs", "-1", "data:,x"],
                     ["--silent=1", "data:,x"], ["-s=", "data:,x"], ["-so=f", "data:,x"], ["---x", "data:,x"], ["cache", "stats"], ["data:,x", "help"],
                     ["--output", "--", "data:,x"], ["-=x", "data:,x"],
                     // A word of three dashes, even where -z takes any word (ArgumentParser refuses it anywhere).
                     ["-z", "---x", "data:,x"], ["-z", "---", "data:,x"]] {
            XCTAssertNil(FetchCommandLine.parse(line), "\(line)")
        }
    }

    /// The built program behaves the same whichever parser reads its command line: each
    /// line runs once as typed (the start-up parse where it accepts the line) and once
    /// after the word `fetch` (which always sends it through ArgumentParser), against the
    /// real data: and file: handlers; exit status, stdout and stderr must match, error
    /// messages included.
    func testTheProgramRunsTheSameThroughEitherParser() throws {
        let text = NSTemporaryDirectory() + "porter-fcl-\(UUID().uuidString).txt"
        XCTAssertTrue(FileManager.default.createFile(atPath: text, contents: Data("file body\n".utf8)))
        defer { try? FileManager.default.removeItem(atPath: text) }
        let lines: [([String], accepted: Bool)] = [
            (["data:,hello"], true), (["-s", "-o", "-", "data:,a", "file://" + text], true),
            (["-i", "-w", "%{size_download} %{content_type}\n", "data:,hello"], true), (["-D", "-", "data:,x"], true),
            (["-sSw=%{http_code}", "data:,x"], false), (["-Z", "--parallel-max", "2", "data:,a"], true), (["--url", "data:,u", "-I"], true),
            (["-r", "0-3", "file://" + text], true), (["-r=-3", "file://" + text], true),
            (["--retry", "5000", "data:,x"], true), (["-sS", "--max-time", "0", "data:,x"], true), (["-H", "bad", "data:,x"], true),
            (["--nope", "data:,x"], false), (["-o"], false), (["-r", "-100", "data:,x"], false), (["--max-time", "x", "data:,x"], false),
            (["-s=1", "data:,x"], false), (["--silent=yes", "data:,x"], false), (["-ofile", "data:,x"], false),
        ]
        for (line, accepted) in lines {
            XCTAssertEqual(FetchCommandLine.parse(line) != nil, accepted, "\(line)")
            let direct = try runProcess(CLITests.porter, line, input: ""),
                viaArgumentParser = try runProcess(CLITests.porter, ["fetch"] + line, input: "")
            XCTAssertEqual(direct.status, viaArgumentParser.status, "\(line)")
            XCTAssertEqual(direct.stdout, viaArgumentParser.stdout, "\(line)")
            XCTAssertEqual(direct.stderr, viaArgumentParser.stderr, "\(line)")
        }
    }

    /// A generated corpus: command lines built from the option table (long and short
    /// names, attached and separate values, clusters of short options, values that start
    /// with '-', hold '=' or are empty, repeated options, words ArgumentParser refuses,
    /// URLs before, between and after the options). On each, the start-up parse, where it
    /// accepts the line and the line passes fetch's checks, gives exactly what
    /// ArgumentParser's parse through the root gives; where ArgumentParser refuses a line,
    /// the start-up parse must not accept it.
    func testTheStartUpParseGivesWhatArgumentParserGivesOrDefers() throws {
        var rng = SplitMix64(seed: 0x5EED_F37C)
        var accepted = 0, deferred = 0
        let count = 800  // each line ArgumentParser also parses costs ~50 ms in a debug build
        for _ in 0..<count {
            let line = Corpus.line(&rng)
            guard var fast = FetchCommandLine.parse(line) else { deferred += 1; continue }
            let raw = fast
            let passes = (try? fast.validate()) != nil
            guard passes else {
                // The start-up path hands this line to ArgumentParser; nothing to compare.
                deferred += 1
                continue
            }
            guard let slow = try? PorterCommand.parseAsRoot(line) else {
                XCTFail("accepted where ArgumentParser refuses: \(line)")
                continue
            }
            guard let fetch = slow as? Fetch else {
                XCTFail("ArgumentParser did not take it as fetch: \(line)")
                continue
            }
            XCTAssertEqual(raw, FetchOptions(fetch), "\(line)")
            accepted += 1
        }
        print("corpus: \(count) lines, \(accepted) accepted and equal, \(deferred) deferred")
        // The corpus must exercise the start-up path, not only the fallback.
        XCTAssertGreaterThan(accepted, count / 5, "accepted \(accepted), deferred \(deferred)")
        XCTAssertGreaterThan(deferred, count / 20, "accepted \(accepted), deferred \(deferred)")
    }
}

/// A small seeded generator: the corpus is the same on every run.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Command lines for the agreement test, built from FetchCommandLine.options.
enum Corpus {
    /// Values that pass fetch's checks for the options that check theirs.
    static let valid: [String: [String]] = [
        "header": ["X-A: 1", "Accept:", "X-B;"], "request": ["GET", "PUT", "DELETE"], "user": ["u:p", ":"],
        "proxy-user": ["u:p"], "continue-at": ["-", "10"], "range": ["0-499", "500-", "-100", "0-1,5-"],
        "max-time": ["2.5", "1", "1e3"], "m": ["3", "0.5"], "connect-timeout": ["4"], "max-redirs": ["-1", "0", "7"],
        "retry": ["0", "3", "+2"], "concurrency": ["1", "4"], "parallel-max": ["1", "300"], "limit-rate": ["100k", "2m", "7"],
        "form": ["a=b", "f=@x;type=text/plain", "v=<f"], "resolve": ["h:80:127.0.0.1", "h:443:::1,127.0.0.2"],
        "proxy": ["http://127.0.0.1:3128", "127.0.0.1:1080", "socks5h://h"], "tls-max": ["1.2", "default"],
        "connect-to": ["a:1:b:2", "::b:"], "proto": ["=https", "-all,+https", "http,ftp"], "proto-redir": ["=https"],
        "time-cond": ["Sun, 06 Nov 1994 08:49:37 GMT", "-Sun, 06 Nov 1994 08:49:37 GMT"],
    ]
    /// Values any option may get: dashes, '=', empty, spaces, numbers.
    static let tricky = ["", "-", "-x", "--y", "=", "a=b", "x y", "-100", "1", "-1", "0.5", "x", "@-", "nan", "data:,v", "--output", "-sS"]
    static let urls = ["data:,x", "http://127.0.0.1:1/a", "example.com", "ftp://h/f", "file:///etc/hosts", "-", ""]
    static let odd = ["--", "-h", "--help", "--version", "fetch", "cache", "--nope", "-q", "---x", "-K", "--config=f", "-=x", "--=x", "-ofile", "-s-S"]

    static func pick<T>(_ a: [T], _ rng: inout SplitMix64) -> T { a[Int(rng.next() % UInt64(a.count))] }
    static func chance(_ percent: UInt64, _ rng: inout SplitMix64) -> Bool { rng.next() % 100 < percent }

    static func value(for spec: FetchCommandLine.Spec, _ rng: inout SplitMix64) -> String {
        let key = spec.long ?? spec.short.map(String.init) ?? ""
        if let good = valid[key], chance(75, &rng) { return pick(good, &rng) }
        if valid[key] == nil, chance(60, &rng) { return pick(["v", "out/f", "a b", "x=y", "/dev/null"], &rng) }
        return pick(tricky, &rng)
    }

    static func line(_ rng: inout SplitMix64) -> [String] {
        var words: [String] = []
        let options = FetchCommandLine.options
        let shorts = options.filter { $0.short != nil }
        if chance(30, &rng) { words.append(pick(urls, &rng)) }
        for _ in 0..<Int(rng.next() % 6) {
            let spec = pick(options, &rng)
            let takesValue = spec.kind != .flag
            var form = rng.next() % 10
            if spec.long == nil && form < 6 { form = 6 }
            if spec.short == nil && form >= 6 { form = 0 }
            switch form {
            case 0, 1, 2, 3:
                // --name value / --name
                words.append("--" + spec.long!)
                if takesValue && !chance(5, &rng) { words.append(value(for: spec, &rng)) }
            case 4, 5:
                // --name=value (flags too: ArgumentParser refuses a value for a flag, "" aside)
                let v = takesValue || chance(20, &rng) ? value(for: spec, &rng) : nil
                words.append("--" + spec.long! + (v.map { "=" + $0 } ?? ""))
                if takesValue, v == "" { words.append(value(for: spec, &rng)) }
            case 6:
                // -n value / -n=value
                let s = spec.short!
                if takesValue && chance(30, &rng) {
                    words.append("-\(s)=" + value(for: spec, &rng))
                } else {
                    words.append("-\(s)")
                    if takesValue && !chance(5, &rng) { words.append(value(for: spec, &rng)) }
                }
            default:
                // A cluster of short options; the value options' values follow, in order.
                var cluster = "-"
                var values: [String] = []
                for _ in 0..<(1 + Int(rng.next() % 4)) {
                    let s = pick(shorts, &rng)
                    cluster.append(s.short!)
                    if s.kind != .flag, !chance(5, &rng) { values.append(value(for: s, &rng)) }
                }
                words.append(cluster)
                words += values
            }
            if chance(15, &rng) { words.append(pick(urls, &rng)) }
        }
        if chance(85, &rng) || words.isEmpty { words.append(pick(urls, &rng)) }
        if chance(8, &rng) { words.insert(pick(odd, &rng), at: Int(rng.next() % UInt64(words.count + 1))) }
        return words
    }
}
