// foundation-client get URL            stream one body through a data delegate, count bytes
// foundation-client many URL N COUNT   COUNT GETs of URL, N in flight, one session
// foundation-client ws-echo URL BYTES  one BYTES binary message to a WebSocket echo server
//                                      and back: prints "baseline_kib peak_kib"
import Foundation
import PeerSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

final class Counter: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    let lock = NSLock()
    var bytes = 0
    var failed = false
    let done = DispatchSemaphore(value: 0)
    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        lock.lock(); bytes += data.count; lock.unlock()
    }
    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        if let error { FileHandle.standardError.write(Data("foundation: \(error)\n".utf8)); failed = true }
        done.signal()
    }
}

func wsEcho(_ url: URL, _ bytes: Int) async throws {
    let task = URLSession.shared.webSocketTask(with: url)
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
    try resetPeakResident()
    try await task.send(.data(message))
    let back = try await task.receive()
    let peak = residentKiB().peak
    guard case .data(let echoed) = back, echoed == message else {
        FileHandle.standardError.write(Data("foundation: the echo differs from the message\n".utf8))
        exit(1)
    }
    print(baseline, peak)
    task.cancel(with: .normalClosure, reason: nil)
}

let args = CommandLine.arguments
switch args[1] {
case "ws-echo":
    do {
        try await wsEcho(URL(string: args[2])!, Int(args[3])!)
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("foundation: \(error)\n".utf8))
        exit(1)
    }
case "get":
    let c = Counter()
    let s = URLSession(configuration: .default, delegate: c, delegateQueue: nil)
    s.dataTask(with: URL(string: args[2])!).resume()
    c.done.wait()
    FileHandle.standardError.write(Data("foundation: \(c.bytes) bytes\n".utf8))
    exit(c.failed ? 1 : 0)
case "many":
    let url = URL(string: args[2])!, inFlight = Int(args[3])!, count = Int(args[4])!
    let config = URLSessionConfiguration.default
    config.httpMaximumConnectionsPerHost = inFlight
    let s = URLSession(configuration: config)
    let slots = DispatchSemaphore(value: inFlight)
    let group = DispatchGroup()
    let tally = Counter()
    for _ in 0..<count {
        slots.wait()
        group.enter()
        s.dataTask(with: url) { data, _, error in
            tally.lock.lock(); tally.bytes += data?.count ?? 0; if error != nil { tally.failed = true }; tally.lock.unlock()
            slots.signal()
            group.leave()
        }.resume()
    }
    group.wait()
    FileHandle.standardError.write(Data("foundation: \(count) requests, \(tally.bytes) bytes\n".utf8))
    exit(tally.failed ? 1 : 0)
default:
    exit(64)
}
