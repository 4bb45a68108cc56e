// foundation-client get URL            stream one body through a data delegate, count bytes
// foundation-client many URL N COUNT   COUNT GETs of URL, N in flight, one session
import Foundation
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

let args = CommandLine.arguments
switch args[1] {
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
