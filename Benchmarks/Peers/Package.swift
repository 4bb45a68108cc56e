// swift-tools-version:6.0
// Peers for `make bench`: the same workloads through AsyncHTTPClient and through
// Foundation's URLSession, and a WebSocket echo through swift-websocket's client. A package
// of its own so `make test` never builds swift-nio.
import PackageDescription

let package = Package(
    name: "PorterPeers",
    dependencies: [
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket", from: "1.6.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
    ],
    targets: [
        .executableTarget(name: "ahc-client", dependencies: [
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
        ]),
        .target(name: "PeerSupport"),
        .executableTarget(name: "foundation-client", dependencies: ["PeerSupport"]),
        .executableTarget(name: "ws-client", dependencies: [
            "PeerSupport",
            .product(name: "WSClient", package: "swift-websocket"),
            .product(name: "WSCompression", package: "swift-websocket"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
        ]),
    ]
)
