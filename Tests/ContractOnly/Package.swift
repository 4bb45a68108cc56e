// swift-tools-version:6.0
// A third party's handler package that depends on PorterCore alone: it must build and
// link without SQLite, libpsl or libcurl (scripts/contract-only.sh checks both).
import PackageDescription

let package = Package(
    name: "ContractOnly",
    platforms: [.macOS(.v13)],
    dependencies: [.package(name: "Porter", path: "../..")],
    targets: [
        .executableTarget(
            name: "ContractOnly",
            dependencies: [.product(name: "PorterCore", package: "Porter")],
            swiftSettings: [.swiftLanguageMode(.v6)]),
    ]
)
