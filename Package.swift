// swift-tools-version:6.0
import PackageDescription

let strict: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let package = Package(
    name: "Porter",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "Porter", targets: ["Porter"]),
        // The contract a handler author depends on: no SQLite, libpsl or libcurl.
        .library(name: "PorterCore", targets: ["PorterCore"]),
        .library(name: "PorterSession", targets: ["PorterSession"]),
        .library(name: "PorterCache", targets: ["PorterCache"]),
        .library(name: "PorterCookies", targets: ["PorterCookies"]),
        .library(name: "PorterCredentials", targets: ["PorterCredentials"]),
        .executable(name: "porter", targets: ["porter"]),
        .executable(name: "CustomScheme", targets: ["CustomScheme"]),
        .executable(name: "SFTPMirror", targets: ["SFTPMirror"]),
        // A plugin written in plain C, built as the shared object porter loads from a folder.
        .library(name: "GopherPlugin", type: .dynamic, targets: ["GopherPlugin"]),
        // sftp:// on libssh2: the shared object for a plugin folder, and the library an
        // application imports to register it without dlopen.
        .library(name: "PorterSFTPPlugin", type: .dynamic, targets: ["SFTPPluginEntry"]),
        .library(name: "PorterSFTP", targets: ["PorterSFTP"]),
        .library(name: "EchoPlugin", type: .dynamic, targets: ["EchoPlugin"]),
        .library(name: "PorterPluginKit", targets: ["PorterPluginKit"]),
        // The framing both process boundaries speak (background daemon, plugin workers).
        .library(name: "PorterIPC", targets: ["PorterIPC"]),
        .library(name: "PorterFoundation", targets: ["PorterFoundation"]),
        // A swift-openapi-runtime ClientTransport over Porter sessions.
        .library(name: "PorterOpenAPI", targets: ["PorterOpenAPI"]),
        // The per-user daemon of background sessions.
        .executable(name: "porterd", targets: ["porterd"]),
        // Runs plugin code away from the host (today: the probe before a plugin is loaded).
        .executable(name: "porter-plugin-worker", targets: ["porter-plugin-worker"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-openapi-runtime", from: "1.13.4"),
        // `make docs` (swift package generate-documentation); a command plugin, built only when run.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(name: "CPSL", path: "Sources/CPSL"),
        // The contract and value types; the store protocols.
        .target(
            name: "PorterCore",
            dependencies: [
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict),
        // Sessions and tasks: the task state machine and the shell that performs it.
        .target(name: "PorterSession", dependencies: ["PorterCore", "PorterIPC", "CPorterIPC"], swiftSettings: strict),
        // Versioned, bounded frames over Unix sockets; peer credentials.
        .target(name: "CPorterIPC"),
        .target(name: "PorterIPC", dependencies: ["CPorterIPC"], swiftSettings: strict),
        .target(name: "PorterDaemon", dependencies: ["Porter", "PorterIPC", "CPorterIPC", "PorterStorage", .product(name: "GRDB", package: "GRDB.swift")], swiftSettings: strict),
        .executableTarget(name: "porterd", dependencies: ["PorterDaemon", "PorterPlugins"], swiftSettings: strict),
        .executableTarget(name: "porter-plugin-worker", dependencies: ["PorterPlugins"], swiftSettings: strict),
        // The stores behind the protocols of PorterCore.
        .target(name: "PorterStorage", dependencies: ["PorterCore", .product(name: "GRDB", package: "GRDB.swift")], swiftSettings: strict),
        .target(name: "PorterCache", dependencies: ["PorterCore", "PorterStorage", .product(name: "GRDB", package: "GRDB.swift")], swiftSettings: strict),
        .target(name: "PorterCookies", dependencies: ["PorterCore", "PorterStorage", "CPSL", .product(name: "GRDB", package: "GRDB.swift")], swiftSettings: strict),
        // libsecret (Debian: libsecret-1-dev) and the C side of the Secret Service backend.
        .systemLibrary(name: "CSecret", path: "Sources/CSecret", pkgConfig: "libsecret-1", providers: [.apt(["libsecret-1-dev"])]),
        .target(name: "CPorterSecret", dependencies: ["CSecret"]),
        .target(name: "PorterCredentials", dependencies: ["PorterCore", "CPorterSecret"], swiftSettings: strict),
        .target(name: "CCurl", linkerSettings: [.linkedLibrary("curl"), .linkedLibrary("ssl"), .linkedLibrary("crypto"), .linkedLibrary("z")]),
        .target(name: "PorterCurl", dependencies: ["PorterCore", "CCurl"], swiftSettings: strict),
        .target(name: "PorterHTTP", dependencies: ["PorterCore", "PorterCurl", "CCurl"], swiftSettings: strict),
        .target(name: "PorterFTP", dependencies: ["PorterCore", "PorterCurl", "CCurl"], swiftSettings: strict),
        .target(name: "PorterData", dependencies: ["PorterCore"], swiftSettings: strict),
        .target(name: "PorterFile", dependencies: ["PorterCore"], swiftSettings: strict),
        .target(name: "CPorterPlugin"),
        .target(name: "CPorterHost", linkerSettings: [.linkedLibrary("ffi")]),
        .target(
            name: "PorterPlugins",
            dependencies: ["PorterCore", "CPorterPlugin", "PorterPluginKit", "CPorterHost", "CPorterIPC", "PorterIPC", .product(name: "Logging", package: "swift-log"), .product(name: "HTTPTypes", package: "swift-http-types")],
            swiftSettings: strict),
        .target(name: "PorterPluginKit", dependencies: ["CPorterPlugin"], swiftSettings: strict),
        // URLRequest / HTTPURLResponse / URLError bridges (FoundationNetworking on Linux).
        .target(name: "PorterFoundation", dependencies: ["PorterCore", .product(name: "HTTPTypes", package: "swift-http-types")], swiftSettings: strict),
        // OpenAPI clients over a Porter session, bodies streamed both ways.
        .target(
            name: "PorterOpenAPI",
            dependencies: ["PorterCore", "PorterSession", .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                           .product(name: "HTTPTypes", package: "swift-http-types")],
            swiftSettings: strict),
        .systemLibrary(name: "CSSH2", path: "Plugins/SFTP/CSSH2"),
        .target(name: "PorterSFTP", dependencies: ["PorterPluginKit", "CSSH2"], path: "Plugins/SFTP/Sources", swiftSettings: strict),
        .target(name: "SFTPPluginEntry", dependencies: ["PorterSFTP", "PorterPluginKit"], path: "Plugins/SFTP/Entry", swiftSettings: strict),
        .target(name: "EchoPlugin", dependencies: ["PorterPluginKit"], path: "Examples/SwiftPlugin", swiftSettings: strict),
        .target(name: "GopherPlugin", dependencies: ["CPorterPlugin"], path: "Examples/CPlugin"),
        // The umbrella: re-exports the modules an app names, HTTPTypes' field names included.
        .target(
            name: "Porter",
            dependencies: ["PorterCore", "PorterSession", "PorterCache", "PorterCookies", "PorterCredentials", "PorterData", "PorterFile",
                           "PorterHTTP", "PorterFTP", "PorterPlugins", .product(name: "HTTPTypes", package: "swift-http-types")],
            swiftSettings: strict),
        .target(
            name: "PorterCLI",
            dependencies: ["Porter", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strict),
        .executableTarget(name: "porter", dependencies: ["PorterCLI", "PorterPlugins", "CPorterHost"], swiftSettings: strict),
        .executableTarget(
            name: "CustomScheme", dependencies: ["Porter", "PorterCLI"], path: "Examples/CustomScheme", swiftSettings: strict),
        .executableTarget(
            name: "SFTPMirror", dependencies: ["Porter", "PorterSFTP"], path: "Examples/SFTPMirror", swiftSettings: strict),
        .executableTarget(
            name: "porter-bench", dependencies: ["Porter"], path: "Benchmarks/porter-bench", swiftSettings: strict),
        .testTarget(name: "PorterCoreTests", dependencies: ["PorterCore"], swiftSettings: strict),
        .testTarget(
            name: "PorterSessionTests",
            dependencies: ["PorterSession", "Porter", "PorterTestSupport", .product(name: "HTTPTypes", package: "swift-http-types")],
            swiftSettings: strict),
        .testTarget(
            name: "PorterStoresTests",
            dependencies: ["PorterCache", "PorterCookies", "PorterCredentials", "PorterStorage", "PorterSession", "Porter",
                           .product(name: "HTTPTypes", package: "swift-http-types"), .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: strict),
        .target(name: "PorterTestSupport", dependencies: ["PorterCore", "PorterSession"], path: "Tests/PorterTestSupport", swiftSettings: strict),
        .testTarget(name: "PorterDataTests", dependencies: ["PorterData", "PorterSession", .product(name: "HTTPTypes", package: "swift-http-types")], swiftSettings: strict),
        .testTarget(name: "PorterFileTests", dependencies: ["Porter", "PorterFile", "PorterTestSupport"], swiftSettings: strict),
        .testTarget(name: "PorterCLITests", dependencies: ["Porter", "PorterCLI", "PorterTestSupport"], swiftSettings: strict),
        .testTarget(
            name: "PorterPluginsTests", dependencies: ["Porter", "PorterPlugins", "PorterTestSupport"],
            exclude: ["Fixtures"], swiftSettings: strict),
        .testTarget(name: "PorterIPCTests", dependencies: ["PorterIPC"], swiftSettings: strict),
        .testTarget(name: "PorterCredentialsTests", dependencies: ["Porter", "PorterCredentials", "PorterTestSupport"], swiftSettings: strict),
        .testTarget(name: "PorterFoundationTests", dependencies: ["Porter", "PorterFoundation", "PorterTestSupport", .product(name: "HTTPTypes", package: "swift-http-types")], swiftSettings: strict),
        .testTarget(
            name: "PorterOpenAPITests",
            dependencies: ["Porter", "PorterOpenAPI", "PorterTestSupport", .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                           .product(name: "HTTPTypes", package: "swift-http-types")],
            exclude: ["openapi_server.py"], swiftSettings: strict),
        .testTarget(name: "PorterDaemonTests", dependencies: ["Porter", "PorterIPC", "PorterTestSupport"], exclude: ["lyingserver.py"], swiftSettings: strict),
        // An application the background-session tests start and kill.
        .executableTarget(name: "BackgroundApp", dependencies: ["Porter"], path: "Tests/BackgroundApp", swiftSettings: strict),
        // An application with no plugin worker at all (the boundary tests copy it alone).
        .executableTarget(name: "PluginHostApp", dependencies: ["PorterCore", "PorterPlugins"], path: "Tests/PluginHostApp",
                          swiftSettings: strict),
        // Every ```swift block of README.md, compiled by scripts/readme-snippets.sh.
        .target(
            name: "ReadmeSnippets",
            dependencies: ["Porter", "PorterFoundation", "PorterPluginKit", "PorterOpenAPI",
                           .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                           .product(name: "HTTPTypes", package: "swift-http-types")],
            path: "Tests/ReadmeSnippets", swiftSettings: strict),
        .testTarget(name: "PorterHTTPTests", dependencies: ["Porter", "PorterHTTP", "PorterCurl", "PorterFTP", "PorterSession", "PorterTestSupport", .product(name: "HTTPTypes", package: "swift-http-types")], exclude: ["misbehave.py", "ftpserver.py", "wsserver.py", "ntlmserver.py"], swiftSettings: strict),
    ]
)
