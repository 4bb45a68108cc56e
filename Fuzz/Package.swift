// swift-tools-version:6.0
// libFuzzer harnesses for Porter's parsers (FUZZING.md). Build only with the sanitizer
// flags, under a scratch path of its own (scripts/fuzz.sh does both):
//   swift build --package-path Fuzz --scratch-path .build/fuzz -c release \
//     -Xswiftc -sanitize=fuzzer,address -Xswiftc -enable-testing -Xswiftc -Onone
import PackageDescription

/// One executable per harness: Sources/<name>/<name>.swift exports LLVMFuzzerTestOneInput
/// and `<name>_main` (the name SwiftPM gives an executable's entry point), which runs
/// libFuzzer's driver.
let harnesses: [String] = [
    "FuzzDataURL",
    "FuzzSetCookie",
    "FuzzHTTPCache",
    "FuzzResponseHead",
    "FuzzChallenge",
    "FuzzDirectoryListing",
    "FuzzNetscapeCookies",
    "FuzzNetrc",
    "FuzzResumeData",
    "FuzzPluginDescriptor",
    "FuzzMIMEHostOverride",
    "FuzzIPCFrames",
    "FuzzWorkerMessages",
    "FuzzWebSocketFrames",
    "FuzzContentDecoding",
]

let package = Package(
    name: "PorterFuzz",
    platforms: [.macOS(.v13)],
    dependencies: [.package(name: "Porter", path: "..")],
    targets: [.target(name: "FuzzDriver")] + harnesses.map { name in
        .executableTarget(
            name: name,
            dependencies: ["FuzzDriver", .product(name: "Porter", package: "Porter"), .product(name: "PorterCore", package: "Porter"),
                           .product(name: "PorterSession", package: "Porter"), .product(name: "PorterWebSocket", package: "Porter"),
                           .product(name: "PorterCache", package: "Porter"),
                           .product(name: "PorterCookies", package: "Porter"), .product(name: "PorterCredentials", package: "Porter"),
                           .product(name: "PorterIPC", package: "Porter"), .product(name: "PorterBackground", package: "Porter")],
            swiftSettings: [.swiftLanguageMode(.v6), .unsafeFlags(["-parse-as-library"])])
    }
)
