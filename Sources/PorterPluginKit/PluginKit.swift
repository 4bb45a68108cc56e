@_exported import CPorterPlugin
import Foundation

// PorterPluginKit: write a Porter plugin in Swift. A plugin is a class conforming to
// `PluginLoadHandler` plus one `@_cdecl("porter_plugin_entry")` function that calls
// `PluginKit.export(_:...)`. Everything here sits on porter_plugin.h only — no Porter
// module is linked into the plugin (DESIGN.md, Plugins: why the boundary is C).

/// One load of a Swift plugin. Made by the definition's factory on the host's thread;
/// `start` must return promptly (start a thread for the I/O). Porter calls `stop` at
/// most once; when the load ends (after `finish`/`fail` or `stop`) PluginKit calls
/// `waitUntilDone` from a host thread, then drops the handler.
public protocol PluginLoadHandler: AnyObject {
    func start()
    func stop()
    /// Back-pressure; default: ignored (the host buffers).
    func pause()
    func resume()
    /// Block until no thread of this load will touch the client again.
    func waitUntilDone()
}

extension PluginLoadHandler {
    public func pause() {}
    public func resume() {}
}

/// A scheme with what the plugin declares about it (`porter_scheme`): its capability
/// flags (PORTER_SCHEME_*; PORTER_SCHEME_CARRIES_COOKIES for loads that carry the
/// session's cookies) and the port its URLs mean when they name none.
public struct PluginSchemeDefinition: Sendable {
    public var name: String
    public var flags: UInt32
    /// The port a URL of the scheme means when it names none (ABI 1.4), or 0 for none.
    public var defaultPort: UInt16
    public init(_ name: String, flags: UInt32, defaultPort: UInt16 = 0) {
        self.name = name
        self.flags = flags
        self.defaultPort = defaultPort
    }
}

/// A local service the host can connect a plugin to (porter_plugin.h, PORTER_SERVICE_*).
public enum PluginService: Int32, Sendable {
    /// The user's ssh agent (the host's $SSH_AUTH_SOCK); the connection speaks the agent
    /// protocol (draft-miller-ssh-agent).
    case sshAgent = 1   // PORTER_SERVICE_SSH_AGENT
}

/// What a plugin declares it needs of the host (ABI 1.3 `needs`): without the declaration
/// `PluginClient.connect(to:)` is refused.
public struct PluginNeeds: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let sshAgent = PluginNeeds(rawValue: UInt32(PORTER_NEED_SSH_AGENT))
}

/// Everything the descriptor says, plus the factory for loads.
public struct PluginDefinition: Sendable {
    public var name: String
    public var version: String
    public var schemes: [PluginSchemeDefinition]
    public var supportsPause: Bool
    /// Paths inside the user's home folder the plugin reads, or also writes, when it runs
    /// isolated ("~/.ssh"; ABI 1.2 `read_paths` / `write_paths`).
    public var readPaths: [String]
    public var writePaths: [String]
    /// The local services its loads may ask the host for (ABI 1.3 `needs`).
    public var needs: PluginNeeds
    /// Makes the handler for one load, or throws to refuse it at once.
    public var makeHandler: @Sendable (PluginRequest, PluginClient) throws(PluginError) -> any PluginLoadHandler
    public init(name: String, version: String, schemes: [PluginSchemeDefinition], supportsPause: Bool = true,
                readPaths: [String] = [], writePaths: [String] = [], needs: PluginNeeds = [],
                makeHandler: @escaping @Sendable (PluginRequest, PluginClient) throws(PluginError) -> any PluginLoadHandler) {
        self.needs = needs
        self.name = name
        self.version = version
        self.schemes = schemes
        self.supportsPause = supportsPause
        self.readPaths = readPaths
        self.writePaths = writePaths
        self.makeHandler = makeHandler
    }
}

/// Turns a `PluginDefinition` into the C descriptor and vtable.
public enum PluginKit {
    final class Exported: @unchecked Sendable {
        let definition: PluginDefinition
        let host: UnsafePointer<porter_host>
        let descriptor: UnsafeMutablePointer<porter_plugin_descriptor>
        init(definition: PluginDefinition, host: UnsafePointer<porter_host>,
             descriptor: UnsafeMutablePointer<porter_plugin_descriptor>) {
            self.definition = definition
            self.host = host
            self.descriptor = descriptor
        }
    }

    final class LoadBox {
        let handler: any PluginLoadHandler
        init(_ handler: any PluginLoadHandler) { self.handler = handler }
    }

    private static let exports = NSLock()
    nonisolated(unsafe) private static var byName: [String: Exported] = [:]

    /// The body of a plugin's entry point. The descriptor is built once per plugin name
    /// and host table and lives for the process.
    public static func export(_ definition: PluginDefinition, host: UnsafePointer<porter_host>?,
                              descriptor: UnsafeMutablePointer<UnsafePointer<porter_plugin_descriptor>?>?,
                              error: UnsafeMutablePointer<CChar>?, capacity: Int) -> Int32 {
        func refuse(_ message: String) -> Int32 {
            CErrorBuffer.write(message, to: error, capacity: capacity)
            return 1
        }
        guard let host, let descriptor else { return refuse("no host table or descriptor slot") }
        guard host.pointee.abi_major == UInt16(PORTER_PLUGIN_ABI_MAJOR) else {
            return refuse("built for ABI \(PORTER_PLUGIN_ABI_MAJOR).\(PORTER_PLUGIN_ABI_MINOR); host has \(host.pointee.abi_major)")
        }
        exports.lock(); defer { exports.unlock() }
        let key = "\(definition.name)@\(UInt(bitPattern: host))"
        if let existing = byName[key] {
            descriptor.pointee = UnsafePointer(existing.descriptor)
            return 0
        }
        let schemes = UnsafeMutablePointer<porter_scheme>.allocate(capacity: definition.schemes.count)
        for (i, s) in definition.schemes.enumerated() {
            schemes[i] = porter_scheme(name: UnsafePointer(strdup(s.name)), flags: s.flags, default_port: s.defaultPort, reserved: 0)
        }
        var table = porter_handler_vtable()
        table.struct_size = UInt32(MemoryLayout<porter_handler_vtable>.size)
        table.start = { ctx, request, client, load, errorBuffer, capacity in
            guard let ctx, let request else { return Int32(PORTER_ERR_UNKNOWN) }
            let exported = Unmanaged<Exported>.fromOpaque(ctx).takeUnretainedValue()
            let pluginClient = PluginClient(host: exported.host, client: client)
            do {
                let handler = try exported.definition.makeHandler(PluginRequest(request.pointee), pluginClient)
                let box = Unmanaged.passRetained(LoadBox(handler))
                load?.pointee = box.toOpaque()
                handler.start()
                return 0
            } catch let failure as PluginError {
                CErrorBuffer.write(failure.message, to: errorBuffer, capacity: capacity)
                return failure.code != 0 ? failure.code : Int32(PORTER_ERR_UNKNOWN)
            } catch {
                CErrorBuffer.write("\(error)", to: errorBuffer, capacity: capacity)
                return Int32(PORTER_ERR_UNKNOWN)
            }
        }
        table.stop = { load in
            guard let load else { return }
            Unmanaged<LoadBox>.fromOpaque(load).takeUnretainedValue().handler.stop()
        }
        table.destroy = { load in
            guard let load else { return }
            let box = Unmanaged<LoadBox>.fromOpaque(load).takeRetainedValue()
            box.handler.waitUntilDone()
        }
        if definition.supportsPause {
            table.pause = { load in
                guard let load else { return }
                Unmanaged<LoadBox>.fromOpaque(load).takeUnretainedValue().handler.pause()
            }
            table.resume = { load in
                guard let load else { return }
                Unmanaged<LoadBox>.fromOpaque(load).takeUnretainedValue().handler.resume()
            }
        }
        let vtable = UnsafeMutablePointer<porter_handler_vtable>.allocate(capacity: 1)
        vtable.initialize(to: table)
        let d = UnsafeMutablePointer<porter_plugin_descriptor>.allocate(capacity: 1)
        var desc = porter_plugin_descriptor()
        desc.struct_size = UInt32(MemoryLayout<porter_plugin_descriptor>.size)
        desc.abi_major = UInt16(PORTER_PLUGIN_ABI_MAJOR)
        desc.abi_minor = UInt16(PORTER_PLUGIN_ABI_MINOR)
        desc.name = UnsafePointer(strdup(definition.name))
        desc.version = UnsafePointer(strdup(definition.version))
        desc.schemes = UnsafePointer(schemes)
        desc.scheme_count = definition.schemes.count
        desc.handler = UnsafePointer(vtable)
        func list(_ paths: [String]) -> UnsafePointer<UnsafePointer<CChar>?>? {
            guard !paths.isEmpty else { return nil }
            let l = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: paths.count)
            for (i, p) in paths.enumerated() { l[i] = UnsafePointer(strdup(p)) }
            return UnsafePointer(l)
        }
        desc.read_paths = list(definition.readPaths)
        desc.read_path_count = definition.readPaths.count
        desc.write_paths = list(definition.writePaths)
        desc.write_path_count = definition.writePaths.count
        desc.needs = definition.needs.rawValue
        let exported = Exported(definition: definition, host: host, descriptor: d)
        desc.plugin_context = Unmanaged.passRetained(exported).toOpaque()
        d.initialize(to: desc)
        byName[key] = exported
        descriptor.pointee = UnsafePointer(d)
        return 0
    }
}

/// Porter's listing format (`text/x-porter-listing`, see the README), for plugins that
/// list folders, so a program parses one format whatever the scheme: one line per
/// entry, sorted by name, `<kind> <size> <modified> <name>`.
public struct PluginListing: Sendable {
    public static let contentType = "text/x-porter-listing"
    public enum Kind: String, Sendable { case directory = "d", file = "f", symlink = "l", other = "o" }
    public struct Entry: Sendable {
        public var name: String
        public var kind: Kind
        public var size: Int64?
        /// Seconds since 1970, UTC.
        public var modified: Int64?
        public init(name: String, kind: Kind, size: Int64?, modified: Int64?) {
            self.name = name
            self.kind = kind
            self.size = size
            self.modified = modified
        }
    }
    public var entries: [Entry] = []
    public init() {}

    public func serialized() -> [UInt8] {
        var text = ""
        for e in entries.sorted(by: { $0.name < $1.name }) {
            var date = "-"
            if let m = e.modified {
                var t = time_t(m)
                var v = tm()
                gmtime_r(&t, &v)
                date = String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", Int(v.tm_year) + 1900, Int(v.tm_mon) + 1,
                              Int(v.tm_mday), Int(v.tm_hour), Int(v.tm_min), Int(v.tm_sec))
            }
            var name = ""
            for ch in e.name.unicodeScalars {
                switch ch {
                case "%": name += "%25"
                case "\n": name += "%0A"
                case "\r": name += "%0D"
                default: name.unicodeScalars.append(ch)
                }
            }
            text += "\(e.kind.rawValue) \(e.size.map(String.init) ?? "-") \(date) \(name)\n"
        }
        return Array(text.utf8)
    }
}
