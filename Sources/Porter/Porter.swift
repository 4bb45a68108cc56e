@_exported import PorterCore
@_exported import PorterSession
@_exported import PorterBackground
@_exported import PorterWebSocket
@_exported import PorterCache
@_exported import PorterCookies
@_exported import PorterCredentials
@_exported import PorterData
@_exported import PorterFile
@_exported import PorterHTTP
@_exported import PorterFTP
@_exported import PorterPlugins
@_exported import PorterObservability
// What a program names to set a header (`HTTPField.Name`, `HTTPFields`, `.contentType`)
// comes with `import Porter`: no `import HTTPTypes` of its own.
@_exported import HTTPTypes
import Foundation
@_exported import PorterStorage

/// Porter's entry point: registers the built-in handlers and loads plugins.
public enum Porter {
    public static let version = porterVersion

    private static let verdicts = Locked<[PluginVerdict]>([])
    private static let storesInstalled = Locked(false)

    /// The stores new configurations start with: `.default` ones share
    /// `PersistentCookieStore.shared`, `CredentialStore.shared`, `HTTPCache.shared`,
    /// `HSTSStore.shared` and `AltSvcCache.shared` (each opened on first use); every
    /// `.ephemeral` one gets memory stores of its own (and no alt-svc cache).
    public static func installDefaultStores() {
        SessionConfiguration.installDefaultStores { kind in
            switch kind {
            case .ephemeral:
                return .init(cookieStore: MemoryCookieStore(), credentialStore: CredentialStore(), responseCache: HTTPCache(),
                             hstsStore: HSTSStore())
            default:
                return .init(cookieStore: PersistentCookieStore.shared, credentialStore: CredentialStore.shared,
                             responseCache: HTTPCache.shared, hstsStore: HSTSStore.shared, altSvcCache: AltSvcCache.shared)
            }
        }
    }

    /// Registers the built-in handlers (data:, file:, http:, https:, ftp:, ftps:) in
    /// `registry` (the shared one by default), then loads the plugins of the search
    /// path (`PluginLoader.searchPath()`) and of `pluginPaths` (folders or files,
    /// scanned first). Idempotent and safe from any thread: later calls for the same
    /// registry do nothing. Plugin files run each in a sandboxed worker process unless
    /// `pluginIsolation` says otherwise (see `PluginIsolation`). A bad plugin is skipped with a diagnostic
    /// (`pluginVerdicts`); it never stops start-up. Also installs the default stores
    /// (`installDefaultStores()`).
    ///
    /// **Call it first in `main`**, before the program reads its arguments or does any
    /// work: the program is also its own plugin worker (`PluginWorker`) when no
    /// `porter-plugin-worker` is installed beside it — as a plain `swift build` of an
    /// application's package leaves it. Started as a worker, the program serves its
    /// plugin from inside this call and exits; it never returns into the program's code.
    /// Without any worker, plugin files are refused (logged, and said in the verdict),
    /// not run in process, unless `pluginIsolation.inProcessWithoutWorker` is set.
    /// Also makes `PorterInstrumentation()` the `taskObserver` of new configurations:
    /// tasks are traced and measured once the program bootstraps a tracing or metrics
    /// backend (see the Observability article).
    public static func bootstrap(registry: HandlerRegistry = .shared, pluginPaths: [String] = [],
                                 loadPlugins: Bool = true, allowOverride: Set<String> = [],
                                 pluginIsolation: PluginIsolation = .default) {
        // First: in a worker this never returns.
        PluginWorker.runIfRequested()
        storesInstalled.withLock { installed in
            if !installed {
                installDefaultStores()
                // Spans and metrics for every task; idle until the program bootstraps a backend.
                SessionConfiguration.installDefaultTaskObserver(PorterInstrumentation())
            }
            installed = true
        }
        registry.performOnce(key: "porter.bootstrap") {
            registry.register(factory: TypeHandlerFactory(DataHandler.self), origin: .builtIn, version: version)
            registry.register(factory: TypeHandlerFactory(FileHandler.self), origin: .builtIn, version: version)
            registry.register(factory: TypeHandlerFactory(HTTPHandler.self), origin: .builtIn, version: version)
            registry.register(factory: TypeHandlerFactory(FTPHandler.self), origin: .builtIn, version: version)
            guard loadPlugins else { return }
            let loader = PluginLoader(registry: registry, allowOverride: allowOverride, isolation: pluginIsolation)
            let found = loader.loadAll(from: pluginPaths + PluginLoader.searchPath())
            verdicts.withLock { $0 += found }
        }
    }

    /// What `bootstrap` decided about each plugin candidate (the shared registry's, or
    /// the last bootstrapped one's).
    public static var pluginVerdicts: [PluginVerdict] { verdicts.current }
}
