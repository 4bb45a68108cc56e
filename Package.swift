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
        // With PorterBackground, which a background session finds at run time (the
        // PorterSession target itself depends on no IPC module).
        .library(name: "PorterSession", targets: ["PorterSession", "PorterBackground"]),
        // Background sessions' client of porterd and the messages they exchange.
        .library(name: "PorterBackground", targets: ["PorterBackground"]),
        .library(name: "PorterWebSocket", targets: ["PorterWebSocket"]),
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
        // Spans (swift-distributed-tracing) and metrics (swift-metrics) for every task.
        .library(name: "PorterObservability", targets: ["PorterObservability"]),
        // For tests of apps and handlers: HAR record and replay, network conditions, the
        // handler conformance kit (PorterTestKit is the part without XCTest, which the CLI uses).
        .library(name: "PorterTesting", targets: ["PorterTesting", "PorterTestKit"]),
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
        // Tracing and metrics (PorterObservability): no-ops until the app bootstraps a backend.
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        .package(url: "https://github.com/apple/swift-service-context", from: "1.5.1"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
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
        // Sessions and tasks: the task state machine and the shell that performs it. No IPC:
        // a background session reaches porterd through PorterBackground (`BackgroundClient`).
        .target(name: "PorterSession", dependencies: ["PorterCore", "PorterEngine", "PorterStorage", "CPorterNetlink"], swiftSettings: strict),
        // The kernel's network-change announcements (rtnetlink), for waitsForConnectivity and porterd.
        .target(name: "CPorterNetlink"),
        // Background sessions: porterd's wire types (`BackgroundProtocol`, the messages) and
        // the client a background session talks to porterd through (`BackgroundLink`).
        .target(name: "PorterBackground", dependencies: ["PorterCore", "PorterSession", "PorterStorage", "PorterIPC", "CPorterIPC"],
                swiftSettings: strict),
        // WebSocket (RFC 6455, permessage-deflate) and stream tasks on a session's byte streams.
        .target(name: "PorterWebSocket", dependencies: ["PorterCore", "PorterSession", "PorterEngine", "CPorterDeflate", "CPorterAuth",
                                                        .product(name: "HTTPTypes", package: "swift-http-types")], swiftSettings: strict),
        // Raw DEFLATE streams for WebSocket's permessage-deflate, on zlib (Debian: zlib1g-dev).
        .target(name: "CPorterDeflate", linkerSettings: [.linkedLibrary("z")]),
        // The handshake's authentication: digests and HMAC-MD5 from libcrypto; SPNEGO through
        // libgssapi_krb5, opened with dlopen (no Kerberos headers needed to build).
        .target(name: "CPorterAuth", linkerSettings: [.linkedLibrary("crypto")]),
        // Versioned, bounded frames over Unix sockets; peer credentials.
        .target(name: "CPorterIPC"),
        .target(name: "PorterIPC", dependencies: ["CPorterIPC"], swiftSettings: strict),
        // Task life cycles as machines without I/O: an event in, actions out (the engine
        // family every shell performs; today the isolated plugin load's).
        .target(name: "PorterEngine", dependencies: ["PorterCore"], swiftSettings: strict),
        .target(name: "PorterDaemon", dependencies: ["Porter", "PorterBackground", "PorterIPC", "CPorterIPC", "CPorterNetlink", "PorterStorage", "PorterDatabase", .product(name: "GRDB", package: "GRDB.swift")], swiftSettings: strict),
        .executableTarget(name: "porterd", dependencies: ["PorterDaemon", "PorterPlugins", "CPorterHost"], swiftSettings: strict),
        .executableTarget(name: "porter-plugin-worker", dependencies: ["PorterPlugins"], swiftSettings: strict),
        // The stores behind the protocols of PorterCore.
        // Private files, output files, the umask, the media-types table: the file I/O the
        // contract (PorterCore) does not do. No SQLite.
        .target(name: "PorterStorage", dependencies: ["PorterCore", "CPorterFileCopy"], swiftSettings: strict),
        // copy_file_range(2) and splice(2), which Swift's Glibc module does not declare.
        .target(name: "CPorterFileCopy"),
        // The SQLite side of the stores (GRDB): the cookie store, the disk cache, porterd's journal.
        .target(name: "PorterDatabase", dependencies: ["PorterCore", "PorterStorage", .product(name: "GRDB", package: "GRDB.swift")], swiftSettings: strict),
        .target(name: "PorterCache", dependencies: ["PorterCore", "PorterStorage", "PorterDatabase", .product(name: "GRDB", package: "GRDB.swift")], swiftSettings: strict),
        .target(name: "PorterCookies", dependencies: ["PorterCore", "PorterStorage", "PorterDatabase", "CPSL", .product(name: "GRDB", package: "GRDB.swift")], swiftSettings: strict),
        // The C side of the Secret Service backend: it opens libsecret-1.so.0 with dlopen on
        // first use (Debian: libsecret-1-0 at run time), so nothing here needs GLib's headers,
        // its pkg-config flags, or maps it in a program that never touches the keyring.
        .target(name: "CPorterSecret", exclude: ["secret_abi.h"]),
        .target(name: "PorterCredentials", dependencies: ["PorterCore", "PorterStorage", "CPorterSecret"], swiftSettings: strict),
        // libcurl, and the content codings Porter decodes itself: zlib, libbrotlidec, libzstd
        // (Debian: zlib1g-dev, libbrotli-dev, libzstd-dev).
        .target(name: "CCurl", linkerSettings: [.linkedLibrary("curl"), .linkedLibrary("ssl"), .linkedLibrary("crypto"), .linkedLibrary("z"),
                                                .linkedLibrary("brotlidec"), .linkedLibrary("zstd")]),
        .target(name: "PorterCurl", dependencies: ["PorterCore", "CCurl"], swiftSettings: strict),
        .target(name: "PorterHTTP", dependencies: ["PorterCore", "PorterCurl", "CCurl"], swiftSettings: strict),
        .target(name: "PorterFTP", dependencies: ["PorterCore", "PorterStorage", "PorterCurl", "CCurl"], swiftSettings: strict),
        .target(name: "PorterData", dependencies: ["PorterCore"], swiftSettings: strict),
        .target(name: "PorterFile", dependencies: ["PorterCore", "PorterStorage"], swiftSettings: strict),
        .target(name: "CPorterPlugin"),
        .target(name: "CPorterHost", linkerSettings: [.linkedLibrary("ffi")]),
        .target(
            name: "PorterPlugins",
            dependencies: ["PorterCore", "PorterEngine", "PorterStorage", "CPorterPlugin", "PorterPluginKit", "CPorterHost", "CPorterIPC", "PorterIPC", .product(name: "Logging", package: "swift-log"), .product(name: "HTTPTypes", package: "swift-http-types")],
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
        // Record/replay (HAR 1.2), network conditions, the conformance kit: no XCTest.
        .target(name: "PorterTestKit", dependencies: ["PorterCore", "PorterSession", .product(name: "HTTPTypes", package: "swift-http-types")],
                swiftSettings: strict),
        // The same with XCTest assertions (`HandlerConformance.check`): for test targets only.
        .target(name: "PorterTesting", dependencies: ["PorterTestKit", "PorterCore"], swiftSettings: strict),
        .systemLibrary(name: "CSSH2", path: "Plugins/SFTP/CSSH2"),
        .target(name: "PorterSFTP", dependencies: ["PorterPluginKit", "CSSH2"], path: "Plugins/SFTP/Sources", swiftSettings: strict),
        .target(name: "SFTPPluginEntry", dependencies: ["PorterSFTP", "PorterPluginKit"], path: "Plugins/SFTP/Entry", swiftSettings: strict),
        .target(name: "EchoPlugin", dependencies: ["PorterPluginKit"], path: "Examples/SwiftPlugin", swiftSettings: strict),
        .target(name: "GopherPlugin", dependencies: ["CPorterPlugin"], path: "Examples/CPlugin"),
        // Spans and metrics per task, through the session's `TaskObserver` hook.
        .target(
            name: "PorterObservability",
            dependencies: ["PorterCore", .product(name: "HTTPTypes", package: "swift-http-types"),
                           .product(name: "Tracing", package: "swift-distributed-tracing"),
                           .product(name: "ServiceContextModule", package: "swift-service-context"),
                           .product(name: "CoreMetrics", package: "swift-metrics")],
            swiftSettings: strict),
        // The umbrella: re-exports the modules an app names, HTTPTypes' field names included.
        .target(
            name: "Porter",
            dependencies: ["PorterCore", "PorterStorage", "PorterSession", "PorterBackground", "PorterWebSocket", "PorterCache", "PorterCookies", "PorterCredentials", "PorterData", "PorterFile",
                           "PorterHTTP", "PorterFTP", "PorterPlugins", "PorterObservability",
                           .product(name: "HTTPTypes", package: "swift-http-types")],
            swiftSettings: strict),
        .target(
            name: "PorterCLI",
            dependencies: ["Porter", "PorterStorage", "PorterTestKit", .product(name: "ArgumentParser", package: "swift-argument-parser")],
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
            dependencies: ["PorterCache", "PorterCookies", "PorterCredentials", "PorterStorage", "PorterDatabase", "PorterSession", "Porter",
                           .product(name: "HTTPTypes", package: "swift-http-types"), .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: strict),
        .target(name: "PorterTestSupport", dependencies: ["PorterCore", "PorterSession"], path: "Tests/PorterTestSupport", swiftSettings: strict),
        .testTarget(name: "PorterDataTests", dependencies: ["PorterData", "PorterSession", "PorterStorage", .product(name: "HTTPTypes", package: "swift-http-types")], swiftSettings: strict),
        .testTarget(name: "PorterFileTests", dependencies: ["Porter", "PorterFile", "PorterStorage", "PorterTestSupport"], swiftSettings: strict),
        .testTarget(name: "PorterCLITests", dependencies: ["Porter", "PorterCLI", "PorterStorage", "PorterTestSupport"], swiftSettings: strict),
        .testTarget(
            name: "PorterPluginsTests", dependencies: ["Porter", "PorterPlugins", "PorterTestSupport"],
            exclude: ["Fixtures"], swiftSettings: strict),
        .testTarget(
            name: "PorterObservabilityTests",
            dependencies: ["Porter", "PorterObservability", "PorterTestSupport",
                           .product(name: "Tracing", package: "swift-distributed-tracing"),
                           .product(name: "Metrics", package: "swift-metrics"),
                           .product(name: "MetricsTestKit", package: "swift-metrics")],
            swiftSettings: strict),
        .testTarget(
            name: "PorterTestingTests",
            dependencies: ["Porter", "PorterTesting", "PorterTestKit", "PorterPlugins", "PorterTestSupport",
                           .product(name: "HTTPTypes", package: "swift-http-types")],
            swiftSettings: strict),
        .testTarget(name: "PorterIPCTests", dependencies: ["PorterIPC"], swiftSettings: strict),
        // PluginKit's values and C glue against a fake host table: in process, no sockets.
        .testTarget(name: "PorterPluginKitTests", dependencies: ["PorterPluginKit", "CPorterPlugin"], swiftSettings: strict),
        .testTarget(name: "PorterFTPTests", dependencies: ["Porter", "PorterFTP", "PorterTestSupport"], exclude: ["ftpserver.py"], swiftSettings: strict),
        .testTarget(name: "PorterCurlTests", dependencies: ["PorterCurl", "PorterCore", "CCurl"], swiftSettings: strict),
        .testTarget(name: "PorterEngineTests", dependencies: ["PorterEngine", "PorterCore", .product(name: "HTTPTypes", package: "swift-http-types")], swiftSettings: strict),
        .testTarget(name: "PorterCredentialsTests", dependencies: ["Porter", "PorterCredentials", "PorterTestSupport"], swiftSettings: strict),
        .testTarget(name: "PorterFoundationTests", dependencies: ["Porter", "PorterFoundation", "PorterTestSupport", .product(name: "HTTPTypes", package: "swift-http-types")], swiftSettings: strict),
        .testTarget(
            name: "PorterOpenAPITests",
            dependencies: ["Porter", "PorterOpenAPI", "PorterTestSupport", .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                           .product(name: "HTTPTypes", package: "swift-http-types")],
            exclude: ["openapi_server.py"], swiftSettings: strict),
        // porterd's scheduler and job life cycle in process: no sockets, no sleeps.
        .testTarget(name: "PorterDaemonEngineTests", dependencies: ["PorterDaemon"], swiftSettings: strict),
        .testTarget(name: "PorterDaemonTests", dependencies: ["Porter", "PorterIPC", "PorterStorage", "PorterTestSupport", .product(name: "MetricsTestKit", package: "swift-metrics")], exclude: ["lyingserver.py"], swiftSettings: strict),
        // An application the background-session tests start and kill.
        .executableTarget(name: "BackgroundApp", dependencies: ["Porter"], path: "Tests/BackgroundApp", swiftSettings: strict),
        // An application with no plugin worker at all (the boundary tests copy it alone).
        .executableTarget(name: "PluginHostApp", dependencies: ["PorterCore", "PorterPlugins"], path: "Tests/PluginHostApp",
                          swiftSettings: strict),
        // Every ```swift block of README.md, compiled by scripts/readme-snippets.sh.
        .target(
            name: "ReadmeSnippets",
            dependencies: ["Porter", "PorterFoundation", "PorterPluginKit", "PorterOpenAPI", "PorterTesting",
                           .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                           .product(name: "Tracing", package: "swift-distributed-tracing"),
                           .product(name: "Metrics", package: "swift-metrics"),
                           .product(name: "HTTPTypes", package: "swift-http-types")],
            path: "Tests/ReadmeSnippets", swiftSettings: strict),
        .testTarget(name: "PorterHTTPTests", dependencies: ["Porter", "PorterHTTP", "PorterCurl", "PorterFTP", "PorterSession", "PorterStorage", "PorterTestSupport", .product(name: "HTTPTypes", package: "swift-http-types")], exclude: ["misbehave.py", "ntlmserver.py", "cacheserver.py"], swiftSettings: strict),
        .testTarget(name: "PorterWebSocketTests", dependencies: ["Porter", "PorterWebSocket", "PorterSession", "PorterTestSupport", .product(name: "HTTPTypes", package: "swift-http-types")], exclude: ["wsserver.py"], swiftSettings: strict),
    ]
)
