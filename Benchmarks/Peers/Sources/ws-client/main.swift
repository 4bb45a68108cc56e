// ws-client ws-echo URL BYTES [deflate]   one BYTES binary message to a WebSocket echo server
//                                         and back through swift-websocket's client
//                                         (permessage-deflate offered with `deflate`):
//                                         prints "baseline_kib peak_kib"
import Foundation
import Logging
import NIOCore
import PeerSupport
import WSClient
import WSCompression

let args = CommandLine.arguments
guard args.count >= 4, args[1] == "ws-echo", let bytes = Int(args[3]) else {
    FileHandle.standardError.write(Data("usage: ws-client ws-echo URL BYTES [deflate]\n".utf8))
    exit(64)
}
let limit = 2 * bytes
let configuration = WebSocketClientConfiguration(
    maxFrameSize: limit,
    extensions: args.count > 4 && args[4] == "deflate" ? [.perMessageDeflate(maxDecompressedFrameSize: limit)] : []
)
var generator = SystemRandomNumberGenerator()
var random = [UInt8](repeating: 0, count: bytes)
for i in random.indices { random[i] = UInt8.random(in: 0...255, using: &generator) }
let message = ByteBuffer(bytes: random)
random = []

do {
    try await WebSocketClient.connect(url: args[2], configuration: configuration, logger: Logger(label: "ws-client")) { inbound, outbound, _ in
        var messages = inbound.messages(maxSize: limit).makeAsyncIterator()
        try await outbound.write(.text("warm up"))
        _ = try await messages.next()
        let baseline = residentKiB().now
        try resetPeakResident()
        try await outbound.write(.binary(message))
        let back = try await messages.next()
        let peak = residentKiB().peak
        guard case .binary(let echoed) = back, echoed == message else {
            FileHandle.standardError.write(Data("ws-client: the echo differs from the message\n".utf8))
            exit(1)
        }
        print(baseline, peak)
    }
} catch {
    FileHandle.standardError.write(Data("ws-client: \(error)\n".utf8))
    exit(1)
}
