// ahc-client get URL            stream one body, count bytes
// ahc-client many URL N COUNT   COUNT GETs of URL, N in flight
// (TLS: trusts the PEM in PORTER_BENCH_CA when set.)
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOSSL

let args = CommandLine.arguments
var tls = TLSConfiguration.makeClientConfiguration()
if let ca = ProcessInfo.processInfo.environment["PORTER_BENCH_CA"] {
    tls.trustRoots = .file(ca)
}
var config = HTTPClient.Configuration(tlsConfiguration: tls)
config.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)

func get(_ url: String) async throws -> Int {
    let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(600))
    var total = 0
    for try await buffer in response.body { total += buffer.readableBytes }
    return total
}

do {
    switch args[1] {
    case "get":
        let n = try await get(args[2])
        FileHandle.standardError.write(Data("ahc: \(n) bytes\n".utf8))
    case "many":
        let url = args[2], inFlight = Int(args[3])!, count = Int(args[4])!
        var total = 0
        try await withThrowingTaskGroup(of: Int.self) { group in
            var started = 0
            while started < min(inFlight, count) { group.addTask { try await get(url) }; started += 1 }
            while let n = try await group.next() {
                total += n
                if started < count { group.addTask { try await get(url) }; started += 1 }
            }
        }
        FileHandle.standardError.write(Data("ahc: \(count) requests, \(total) bytes\n".utf8))
    default:
        break
    }
    try await client.shutdown()
} catch {
    FileHandle.standardError.write(Data("ahc: \(error)\n".utf8))
    try? await client.shutdown()
    exit(1)
}
