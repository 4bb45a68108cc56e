// porter-bench: the measurements behind BENCHMARKS.md (run by `make bench`).
//
//   porter-bench data MB           decode an MB-megabyte base64 data: URL: Porter vs Foundation
//   porter-bench registry N        handler lookup with N handlers registered
//   porter-bench measure CMD...    run CMD, print "elapsed_s peak_rss_kib exit"
//   porter-bench foundation-file URL OUT   copy a file: URL with Foundation's URLSession
//   porter-bench ws-echo URL BYTES send one BYTES binary message to a WebSocket echo server
//                                  and take it back: "baseline_kib peak_kib"
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Porter

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

func best(of runs: Int, _ body: () throws -> Void) rethrows -> Double {
    var b = Double.infinity
    for _ in 0..<runs {
        let t = now()
        try body()
        b = min(b, now() - t)
    }
    return b
}

func dataBench(megabytes: Int) throws {
    var payload = [UInt8](repeating: 0, count: megabytes << 20)
    var x: UInt32 = 2463534242
    for i in payload.indices { x ^= x << 13; x ^= x >> 17; x ^= x << 5; payload[i] = UInt8(truncatingIfNeeded: x) }
    let body = Data(payload)
    let text = "data:application/octet-stream;base64," + body.base64EncodedString()
    let mb = Double(body.count) / 1e6
    let inMB = Double(text.utf8.count) / 1e6

    var check = Data()
    let porter = try best(of: 5) { check = try DataURL.decode(text).body }
    precondition(check == body, "decoded bytes differ")
    print(String(format: "data.porter_decode_s %.4f decoded_MBps %.0f input_MBps %.0f", porter, mb / porter, inMB / porter))

    // Foundation's own base64 decoder on the same bytes (no data: URL processing around it).
    let b64 = String(text.dropFirst("data:application/octet-stream;base64,".count))
    var fcheck: Data?
    let foundationB64 = best(of: 5) { fcheck = Data(base64Encoded: b64) }
    precondition(fcheck == body)
    print(String(format: "data.foundation_base64_s %.4f decoded_MBps %.0f", foundationB64, mb / foundationB64))

    // End to end: the URL through a session, and through Foundation's URLSession.
    Porter.bootstrap()
    let url = URL(string: text)!
    let session = Session(configuration: .ephemeral)
    let porterSession = best(of: 3) {
        let sem = DispatchSemaphore(value: 0)
        session.dataTask(with: url) { d, _, _ in precondition(d?.count == body.count); sem.signal() }.resume()
        sem.wait()
    }
    print(String(format: "data.porter_session_s %.4f decoded_MBps %.0f", porterSession, mb / porterSession))
    let foundationSession = best(of: 3) {
        let sem = DispatchSemaphore(value: 0)
        URLSession.shared.dataTask(with: url) { d, _, e in
            if d?.count != body.count { print("data.foundation_session_error \(String(describing: e)) bytes=\(d?.count ?? -1)") }
            sem.signal()
        }.resume()
        sem.wait()
    }
    print(String(format: "data.foundation_session_s %.4f decoded_MBps %.0f", foundationSession, mb / foundationSession))
}

final class NullHandler: ProtocolHandler {
    static var schemes: Set<String> { [] }
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {}
    func startLoading() {}
    func stopLoading() {}
}

struct SchemeFactory: ProtocolHandlerFactory {
    let schemes: Set<String>
    let name: String
    let accepts: Bool
    func canHandle(_ request: Request) -> Bool { accepts }
    func canonicalRequest(for request: Request) -> Request { request }
    func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool { a.url == b.url }
    func makeHandler(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) -> any ProtocolHandler {
        NullHandler(request: request, cachedResponse: cachedResponse, client: client)
    }
}

func registryBench(handlers: Int) {
    let lookups = 1_000_000
    for count in [1, handlers] {
        let registry = HandlerRegistry()
        // `count` handlers of other schemes, three of the looked-up scheme (two decline).
        for i in 0..<count { registry.register(factory: SchemeFactory(schemes: ["s\(i)"], name: "s\(i)", accepts: true)) }
        registry.register(factory: SchemeFactory(schemes: ["target"], name: "t0", accepts: true))
        registry.register(factory: SchemeFactory(schemes: ["target"], name: "t1", accepts: false))
        registry.register(factory: SchemeFactory(schemes: ["target"], name: "t2", accepts: false))
        let request = Request(url: URL(string: "target://host/path")!)
        var found = 0
        let t = best(of: 3) {
            for _ in 0..<lookups where registry.factory(for: request) != nil { found += 1 }
        }
        precondition(found == 3 * lookups)
        print(String(format: "registry.lookup_ns handlers=%d %.1f", count + 3, t / Double(lookups) * 1e9))
    }
}

/// 10,000 cookies in one store (9,980 of 998 other sites, 20 of the target site and its
/// parent domain): the time to build the Cookie header for one request to the target.
func cookieBench() {
    let store = MemoryCookieStore(maximumPerDomain: 2_000, maximumTotal: 20_000)
    for site in 0..<998 {
        let url = URL(string: "https://www\(site).site\(site).test/")!
        store.storeCookies(fromHeaders: (0..<10).map { "c\($0)=v\($0); Domain=site\(site).test; Path=/" }, for: url,
                           mainDocumentURL: nil)
    }
    let target = URL(string: "https://app.example.test/account/settings")!
    for i in 0..<10 {
        store.storeCookies(fromHeaders: ["t\(i)=value\(i); Path=/\(i % 2 == 0 ? "account" : "")"], for: target, mainDocumentURL: nil)
        store.storeCookies(fromHeaders: ["p\(i)=value\(i); Domain=example.test; Path=/"], for: target, mainDocumentURL: nil)
    }
    precondition(store.allCookies.count == 10_000, "\(store.allCookies.count) cookies")
    let rounds = 2_000
    var bytes = 0
    let t = best(of: 3) {
        for _ in 0..<rounds { bytes += store.cookieHeader(for: target, mainDocumentURL: nil)?.utf8.count ?? 0 }
    }
    precondition(bytes > 0)
    print(String(format: "cookies.header_us stored=10000 sent=20 %.2f", t / Double(rounds) * 1e6))
}

func measure(_ args: [String]) -> Never {
    var pid: pid_t = 0
    let argv = args.map { strdup($0) } + [nil]
    let start = now()
    guard posix_spawnp(&pid, args[0], nil, nil, argv, environ) == 0 else {
        print("measure: cannot run \(args[0])")
        exit(1)
    }
    var status: Int32 = 0
    var usage = rusage()
    wait4(pid, &status, 0, &usage)
    let elapsed = now() - start
    let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    print(String(format: "%.4f %ld %d", elapsed, usage.ru_maxrss, code))
    exit(0)
}

func foundationFile(_ source: String, _ dest: String) -> Never {
    URLSession.shared.downloadTask(with: URL(string: source)!) { location, _, error in
        if let location {
            do { try FileManager.default.moveItem(at: location, to: URL(fileURLWithPath: dest)) } catch { exit(2) }
            exit(0)
        }
        FileHandle.standardError.write(Data("foundation: \(String(describing: error))\n".utf8))
        exit(1)
    }.resume()
    while true { sleep(60) }
}

/// A background session reconnecting to porterd: the time to attach (the daemon sends
/// every task of the session) and the time `allTasks` then takes.
func backgroundList(_ identifier: String) {
    Porter.bootstrap()
    let t0 = DispatchTime.now().uptimeNanoseconds
    let session = Session(configuration: .background(identifier: identifier))
    let t1 = DispatchTime.now().uptimeNanoseconds
    let tasks = session.allTasks
    let t2 = DispatchTime.now().uptimeNanoseconds
    print(String(format: "%d %.1f %.3f", tasks.count, Double(t1 - t0) / 1e6, Double(t2 - t1) / 1e6))
    session.finishTasksAndInvalidate()
}

/// The process's resident set now and its peak (VmRSS, VmHWM), KiB.
func residentKiB() -> (now: Int, peak: Int) {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    func field(_ name: String) -> Int {
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return -1 }
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? -1
    }
    return (field("VmRSS"), field("VmHWM"))
}

/// One BYTES message of random bytes (deflate cannot shrink them) echoed by a Porter
/// WebSocket task: the resident set before it is sent (the message already made) and the
/// peak until it is back (the peak is reset first: Linux's clear_refs 5).
func wsEcho(_ url: String, _ bytes: Int) async throws {
    guard let target = URL(string: url) else { fatalError("bad URL \(url)") }
    Porter.bootstrap()
    var configuration = SessionConfiguration.ephemeral
    configuration.proxies = .none
    let session = Session(configuration: configuration)
    let task = session.webSocketTask(with: target)
    task.maximumMessageSize = 2 * bytes
    task.resume()
    try await task.send(.string("warm up"))
    _ = try await task.receive()
    var generator = SystemRandomNumberGenerator()
    var message = Data(count: bytes)
    message.withUnsafeMutableBytes { raw in
        for i in stride(from: 0, to: bytes - 7, by: 8) { raw.storeBytes(of: generator.next() as UInt64, toByteOffset: i, as: UInt64.self) }
    }
    let baseline = residentKiB().now
    try "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    try await task.send(.data(message))
    let back = try await task.receive()
    let peak = residentKiB().peak
    guard case .data(let echoed) = back, echoed == message else {
        FileHandle.standardError.write(Data("ws-echo: the echo differs from the message\n".utf8))
        exit(1)
    }
    print(baseline, peak)
    task.cancel(with: .normalClosure, reason: nil)
}

let args = Array(CommandLine.arguments.dropFirst())
switch args.first {
case "data": try dataBench(megabytes: Int(args.dropFirst().first ?? "100") ?? 100)
case "registry": registryBench(handlers: Int(args.dropFirst().first ?? "100") ?? 100)
case "cookies": cookieBench()
case "measure": measure(Array(args.dropFirst()))
case "foundation-file": foundationFile(args[1], args[2])
case "background-list": backgroundList(args.count > 1 ? args[1] : "scale")
case "ws-echo": try await wsEcho(args[1], Int(args[2]) ?? (16 << 20))
default:
    print("usage: porter-bench data MB | registry N | cookies | measure CMD... | foundation-file URL OUT | ws-echo URL BYTES")
    exit(64)
}
