@_exported import PorterCore
@_exported import PorterData
@_exported import PorterFile
@_exported import PorterHTTP
@_exported import PorterFTP
import Foundation

/// Porter's entry point: registers the built-in handlers.
public enum Porter {
    public static let version = porterVersion

    /// Registers the built-in handlers (data:, file:, http:, https:, ftp:, ftps:) in `registry` (the shared one by
    /// default). Idempotent and safe from any thread: the second and later calls for
    /// the same registry do nothing. Plugins join here in their own issue.
    public static func bootstrap(registry: HandlerRegistry = .shared) {
        registry.performOnce(key: "porter.bootstrap") {
            registry.register(factory: TypeHandlerFactory(DataHandler.self), origin: .builtIn, version: version)
            registry.register(factory: TypeHandlerFactory(FileHandler.self), origin: .builtIn, version: version)
            registry.register(factory: TypeHandlerFactory(HTTPHandler.self), origin: .builtIn, version: version)
            registry.register(factory: TypeHandlerFactory(FTPHandler.self), origin: .builtIn, version: version)
        }
    }
}

