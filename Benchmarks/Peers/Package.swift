// swift-tools-version:6.0
// Peers for `make bench`: the same workloads through AsyncHTTPClient and through
// Foundation's URLSession. A package of its own so `make test` never builds swift-nio.
import PackageDescription

let package = Package(
    name: "PorterPeers",
    dependencies: [
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        .executableTarget(name: "ahc-client", dependencies: [
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
        ]),
        .executableTarget(name: "foundation-client"),
    ]
)
