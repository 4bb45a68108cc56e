import CPorterPlugin
import Foundation
import PorterCore

/// What a plugin's descriptor says about one scheme.
///
/// Codable: it crosses from a worker (the probe) to the host inside `PluginDescription`
/// and is kept in the probe cache. `carriesCookies` is not optional, so a cache written
/// before ABI 1.4 does not decode and its plugins are probed again, declarations and all.
public struct PluginScheme: Sendable, Equatable, Codable {
    public var name: String
    public var needsNetwork: Bool
    public var mayBeRedirectTarget: Bool
    public var credentialsPerRequest: Bool
    public var canUpload: Bool
    /// The port a URL of the scheme means when it names none (ABI 1.4 `default_port`).
    public var defaultPort: Int?
    /// Loads carry the session's cookies (ABI 1.4 PORTER_SCHEME_CARRIES_COOKIES).
    public var carriesCookies: Bool

    init(name: String, needsNetwork: Bool, mayBeRedirectTarget: Bool, credentialsPerRequest: Bool, canUpload: Bool,
         defaultPort: Int? = nil, carriesCookies: Bool = false) {
        self.name = name
        self.needsNetwork = needsNetwork
        self.mayBeRedirectTarget = mayBeRedirectTarget
        self.credentialsPerRequest = credentialsPerRequest
        self.canUpload = canUpload
        self.defaultPort = defaultPort
        self.carriesCookies = carriesCookies
    }

    /// Read from a descriptor built for `abiMinor`: what 1.4 added is read only from a
    /// 1.4 plugin (an older one's padding and unknown flag bits mean nothing).
    init(_ s: porter_scheme, abiMinor: Int) {
        name = s.name.flatMap { String(validatingCString: $0) } ?? ""
        needsNetwork = s.flags & UInt32(PORTER_SCHEME_NEEDS_NETWORK) != 0
        mayBeRedirectTarget = s.flags & UInt32(PORTER_SCHEME_REDIRECT_TARGET) != 0
        credentialsPerRequest = s.flags & UInt32(PORTER_SCHEME_CREDENTIALS_PER_REQUEST) != 0
        canUpload = s.flags & UInt32(PORTER_SCHEME_CAN_UPLOAD) != 0
        let declares = abiMinor >= 4
        defaultPort = declares && s.default_port != 0 ? Int(s.default_port) : nil
        carriesCookies = declares && s.flags & UInt32(PORTER_SCHEME_CARRIES_COOKIES) != 0
    }

    /// Why these declarations cannot be used (read from a probe's output, which the
    /// plugin's own code could have written to), or nil.
    func problem(abiMinor: Int) -> String? {
        if let port = defaultPort, !(1...65535).contains(port) { return "scheme \(name): default port \(port)" }
        if abiMinor < 4, defaultPort != nil || carriesCookies { return "scheme \(name): 1.4 declarations from a \(abiMinor) plugin" }
        return nil
    }

    /// Why a request cannot go to this scheme's plugin, or nil: a body to a scheme that
    /// did not declare PORTER_SCHEME_CAN_UPLOAD (ABI 1.2).
    static func refusal(of request: Request, by plugin: String, schemes: [PluginScheme], abiMinor: Int) -> PorterError? {
        guard abiMinor >= 2, request.body != nil, let s = schemes.first(where: { $0.name == request.scheme }), !s.canUpload else {
            return nil
        }
        return PorterError(.unsupportedURL, "plugin \(plugin) cannot upload to \(s.name): URLs (its scheme does not declare PORTER_SCHEME_CAN_UPLOAD)",
                           url: request.url)
    }

    public var flagNames: [String] {
        var f: [String] = []
        if needsNetwork { f.append("network") }
        if mayBeRedirectTarget { f.append("redirect-target") }
        if canUpload { f.append("upload") }
        if carriesCookies { f.append("cookies") }
        if let defaultPort { f.append("port \(defaultPort)") }
        return f
    }
}

/// A plugin's declarations, as its factories (in process and isolated) answer the registry.
extension [PluginScheme] {
    func defaultPort(for scheme: String) -> Int? { first { $0.name == scheme }?.defaultPort }
    func carriesCookies(for scheme: String) -> Bool { first { $0.name == scheme }?.carriesCookies ?? false }
}

/// Turns a checked plugin descriptor into handlers: one factory per descriptor, so a
/// plugin's scheme goes through the registry, sessions and the CLI like a built-in one.
public struct PluginHandlerFactory: ProtocolHandlerFactory, @unchecked Sendable {
    public let name: String
    public let version: String
    public let pluginSchemes: [PluginScheme]
    public var schemes: Set<String> { Set(pluginSchemes.map(\.name)) }
    /// Copied from the descriptor (which lives for the process).
    let vtable: porter_handler_vtable
    let pluginContext: UnsafeMutableRawPointer?
    /// The ABI minor the plugin was built for (flags are enforced from 1.2 on).
    let abiMinor: Int
    /// The local services it declared (ABI 1.3 `needs`, checked by the loader).
    let needs: UInt32
    /// Bounds the plugin's finished loads awaiting destroy in this process (`PluginLoadGate`).
    let gate = PluginLoadGate()

    init(descriptor d: porter_plugin_descriptor, schemes: [PluginScheme], needs: UInt32) {
        abiMinor = Int(d.abi_minor)
        self.needs = needs
        name = d.name.flatMap { String(validatingCString: $0) } ?? "plugin"
        version = d.version.flatMap { String(validatingCString: $0) } ?? "?"
        pluginSchemes = schemes
        vtable = d.handler.pointee
        pluginContext = d.plugin_context
    }

    public func canHandle(_ request: Request) -> Bool {
        guard let check = vtable.can_handle else { return true }
        let c = CRequest(request, insecure: false)
        return check(pluginContext, c.pointer) != 0
    }

    public func canonicalRequest(for request: Request) -> Request { request }

    public func mayBeRedirectTarget(scheme: String) -> Bool {
        pluginSchemes.first { $0.name == scheme }?.mayBeRedirectTarget ?? false
    }

    public func requestIsCacheEquivalent(_ a: Request, _ b: Request) -> Bool { a.url == b.url }

    public func defaultPort(for scheme: String) -> Int? { pluginSchemes.defaultPort(for: scheme) }
    public func carriesCookies(for scheme: String) -> Bool { pluginSchemes.carriesCookies(for: scheme) }

    public func makeHandler(request: Request, cachedResponse: CachedResponse?,
                            client: any ProtocolClient) -> any ProtocolHandler {
        let (needs, name) = (self.needs, self.name)
        return PluginHandler(load: PluginLoad(client: client, request: request, vtable: vtable, pluginName: name,
                                              pluginContext: pluginContext, gate: gate, cached: cachedResponse,
                                              refusal: PluginScheme.refusal(of: request, by: name, schemes: pluginSchemes, abiMinor: abiMinor),
                                              connectService: { LocalService.connect($0, declared: needs, plugin: name) }))
    }
}

/// The `ProtocolHandler` a plugin's load runs behind.
///
/// The plugin's handler functions (`start`, `stop`, `pause`, `resume`, `destroy`) run on
/// the load's own serial queue (`PluginLoad.queue`), as in a worker: the host calls
/// `startLoading` and the rest on the task's executor, which may be the libcurl loop
/// (after a redirect from http) or the session's queue, and never waits there for plugin
/// code. A plugin stuck in one of them holds its own load, no other transfer.
final class PluginHandler: ProtocolHandler, @unchecked Sendable {
    // Plugin handlers are made by their factory, which knows the schemes; the type
    // itself serves none (it is never registered as a type).
    static var schemes: Set<String> { [] }

    let load: PluginLoad
    private var calls: DispatchQueue { load.queue }

    init(load: PluginLoad) { self.load = load }

    convenience init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        // Not reachable through the registry (the factory makes these); fail clearly.
        var table = porter_handler_vtable()
        table.struct_size = UInt32(MemoryLayout<porter_handler_vtable>.size)
        self.init(load: PluginLoad(client: client, request: request, vtable: table, pluginName: "unknown",
                                   pluginContext: nil, gate: PluginLoadGate()))
    }

    func startLoading() { calls.async { [load] in load.start() } }
    /// The host stops listening at once; the plugin hears of it on the load's queue.
    func stopLoading() {
        load.silence()
        calls.async { [load] in load.stop() }
    }
    func pauseDelivery() { calls.async { [load] in load.pause(true) } }
    func resumeDelivery() { calls.async { [load] in load.pause(false) } }
}
