import Foundation

/// Where a registered handler came from.
public enum HandlerOrigin: Sendable, Equatable, CustomStringConvertible {
    case builtIn
    case inProcess
    /// Loaded from a plugin file at this path.
    case plugin(path: String)
    public var description: String {
        switch self {
        case .builtIn: return "built-in"
        case .inProcess: return "in-process"
        case .plugin(let path): return "plugin \(path)"
        }
    }
}

/// One registration, as listed by `HandlerRegistry.registrations`.
public struct HandlerRegistration: Sendable, CustomStringConvertible {
    public let id: UInt64
    public let factory: any ProtocolHandlerFactory
    public let origin: HandlerOrigin
    public let version: String
    public var schemes: [String] { factory.schemes.sorted() }
    public var name: String { factory.name }
    public var description: String { "\(schemes.joined(separator: ",")) \(name) \(origin) \(version)" }
}

/// The ordered set of handlers. The most recent registration that can handle a
/// request wins. Lookups go through a scheme index, so their cost depends only on
/// the handlers of that scheme. Safe from any thread.
public final class HandlerRegistry: @unchecked Sendable {
    /// The process-wide registry `Porter.bootstrap()` fills.
    public static let shared = HandlerRegistry()

    private struct State {
        var order: [HandlerRegistration] = []
        var byScheme: [String: [HandlerRegistration]] = [:]  // newest last
    }
    private let state = Locked(State())
    private let ids = AtomicCounter()
    private let onceLock = NSLock()
    private var onceKeys = Set<String>()

    /// Runs `body` the first time `key` is seen by this registry; later calls (from any
    /// thread) wait for that first run to end and then return. For set-up such as
    /// `Porter.bootstrap()`.
    public func performOnce(key: String, _ body: () -> Void) {
        onceLock.lock()
        defer { onceLock.unlock() }
        guard onceKeys.insert(key).inserted else { return }
        body()
    }

    public init() {}

    /// Registers a handler type; returns a token for `unregister`.
    @discardableResult
    public func register(_ type: any ProtocolHandler.Type, origin: HandlerOrigin = .inProcess, version: String = "1.0") -> UInt64 {
        register(factory: TypeHandlerFactory(type), origin: origin, version: version)
    }

    @discardableResult
    public func register(factory: any ProtocolHandlerFactory, origin: HandlerOrigin = .inProcess, version: String = "1.0") -> UInt64 {
        let reg = HandlerRegistration(id: ids.next(), factory: factory, origin: origin, version: version)
        state.withLock { s in
            s.order.append(reg)
            for scheme in reg.factory.schemes { s.byScheme[scheme, default: []].append(reg) }
        }
        return reg.id
    }

    /// Removes the registration with this token. Returns whether it was there.
    @discardableResult
    public func unregister(_ id: UInt64) -> Bool {
        state.withLock { s in
            guard let i = s.order.firstIndex(where: { $0.id == id }) else { return false }
            let reg = s.order.remove(at: i)
            for scheme in reg.factory.schemes {
                s.byScheme[scheme]?.removeAll { $0.id == id }
                if s.byScheme[scheme]?.isEmpty == true { s.byScheme[scheme] = nil }
            }
            return true
        }
    }

    /// Removes every registration of this handler type.
    public func unregister(_ type: any ProtocolHandler.Type) {
        let ids = state.withLock { s in
            s.order.filter { ($0.factory as? TypeHandlerFactory)?.type == type }.map(\.id)
        }
        ids.forEach { unregister($0) }
    }

    /// Every registration, oldest first.
    public var registrations: [HandlerRegistration] { state.withLock { $0.order } }

    /// The schemes with at least one handler, sorted.
    public var schemes: [String] { state.withLock { $0.byScheme.keys.sorted() } }

    /// The newest registration of the request's scheme that can handle it.
    public func factory(for request: Request) -> (any ProtocolHandlerFactory)? {
        let candidates = state.withLock { $0.byScheme[request.scheme] }
        guard let candidates else { return nil }
        for reg in candidates.reversed() where reg.factory.canHandle(request) { return reg.factory }
        return nil
    }

    /// True when some handler serves this scheme.
    public func hasHandler(forScheme scheme: String) -> Bool {
        state.withLock { $0.byScheme[scheme.lowercased()] != nil }
    }

    /// The handlers of `scheme`, most preferred (newest) first.
    func factories(forScheme scheme: String) -> [any ProtocolHandlerFactory] {
        state.withLock { $0.byScheme[scheme]?.reversed().map(\.factory) } ?? []
    }

    /// The port a URL of `scheme` means when it names none, as the handlers serving the
    /// scheme declare it (`ProtocolHandler.defaultPort(for:)`); nil when none does. The
    /// one answer for protection spaces, route checks and telemetry: nothing else keeps
    /// a table of schemes and ports.
    public func defaultPort(forScheme scheme: String) -> Int? {
        SchemeDeclaration.defaultPort(scheme.lowercased(), in: factories(forScheme: scheme.lowercased()))
    }

    /// Whether loads of `scheme` carry cookies, as the handlers serving it declare
    /// (`ProtocolHandler.carriesCookies(for:)`).
    public func carriesCookies(forScheme scheme: String) -> Bool {
        carriesCookies(lowercasedScheme: scheme.lowercased())
    }

    /// Asked twice per load (the cookie step and the Set-Cookie step): the registrations
    /// are read without building a list (the array is shared, not copied), and the
    /// factories are asked outside the lock.
    func carriesCookies(lowercasedScheme scheme: String) -> Bool {
        guard let regs = state.withLock({ $0.byScheme[scheme] }) else { return false }
        return SchemeDeclaration.carriesCookies(scheme, in: regs.lazy.map(\.factory))
    }
}

/// How what handlers declare about a scheme is read when several serve it: in order of
/// preference (a session's own handlers, then the registry's newest first), the first
/// declared port wins, and the scheme carries cookies when one of them says so — an
/// interposing handler that declares nothing leaves the declaration of the handler it
/// stands in front of in force.
enum SchemeDeclaration {
    static func defaultPort(_ scheme: String, in factories: [any ProtocolHandlerFactory]) -> Int? {
        for f in factories {
            if let port = f.defaultPort(for: scheme), (1...65535).contains(port) { return port }
        }
        return nil
    }

    /// Generic over the sequence: asked twice per load, it reads the handlers where they
    /// are (lazily mapped or filtered) instead of a list built for the question.
    static func carriesCookies<Factories: Sequence>(_ scheme: String, in factories: Factories) -> Bool
    where Factories.Element == any ProtocolHandlerFactory {
        factories.contains { $0.carriesCookies(for: scheme) }
    }
}

extension SessionConfiguration {
    /// The handlers that could serve `scheme` for this session, most preferred first.
    private func factories(forScheme scheme: String) -> [any ProtocolHandlerFactory] {
        handlers.filter { $0.schemes.contains(scheme) } + registry.factories(forScheme: scheme)
    }

    /// `HandlerRegistry.defaultPort(forScheme:)` as this session sees it: its own
    /// handlers first, then its registry.
    public func defaultPort(forScheme scheme: String) -> Int? {
        let scheme = scheme.lowercased()
        return SchemeDeclaration.defaultPort(scheme, in: factories(forScheme: scheme))
    }

    /// `HandlerRegistry.carriesCookies(forScheme:)` as this session sees it.
    public func carriesCookies(forScheme scheme: String) -> Bool {
        let scheme = scheme.lowercased()
        return SchemeDeclaration.carriesCookies(scheme, in: handlers.lazy.filter { $0.schemes.contains(scheme) })
            || registry.carriesCookies(lowercasedScheme: scheme)
    }

    /// The port `url` names, else its scheme's declared default port.
    public func port(of url: URL) -> Int? {
        url.port ?? url.scheme.flatMap { defaultPort(forScheme: $0) }
    }
}
