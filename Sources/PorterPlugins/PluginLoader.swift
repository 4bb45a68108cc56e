import CPorterHost
import CPorterIPC
/// Plugin authors and applications that link a plugin in use the C names (porter_plugin_entry_fn).
@_exported import CPorterPlugin
import PorterPluginKit
import Foundation
import Logging
import PorterCore
#if canImport(Glibc)
import Glibc
#endif

/// Where loading a plugin failed.
public enum PluginLoadStage: String, Sendable, Codable, CustomStringConvertible {
    /// The file or its folder failed the checks before dlopen.
    case file
    /// dlopen failed (not an ELF file, an unresolved symbol, wrong architecture).
    case open
    /// The entry point is missing.
    case symbol
    /// The entry point returned an error.
    case `init`
    /// The ABI version is not this host's.
    case abi
    /// The descriptor is incomplete or names an invalid scheme.
    case descriptor
    /// A scheme is already served by a built-in or an earlier plugin.
    case register
    public var description: String { rawValue }
}

/// Why a plugin was refused: printed by `porter plugins`, returned by the API.
public struct PluginDiagnostic: Error, Sendable, Equatable, Codable, CustomStringConvertible {
    public var path: String
    public var stage: PluginLoadStage
    public var reason: String
    /// `dlerror()` text or the plugin's own message, when there is one.
    public var detail: String?

    public var description: String {
        "\(path): refused at \(stage): \(reason)\(detail.map { " (\($0))" } ?? "")"
    }
}

/// A plugin that loaded and registered its handlers.
public struct LoadedPlugin: Sendable, CustomStringConvertible {
    public var path: String
    public var name: String
    public var version: String
    public var schemes: [PluginScheme]
    public var registrationID: UInt64
    /// Where its code runs.
    public var mode: PluginMode = .inProcess
    /// Why a plugin meant to be isolated runs in process (no worker program was found).
    public var modeNote: String?
    /// The local services it declared (ABI 1.3 `needs`, e.g. "ssh-agent").
    public var needs: [String] = []
    public var description: String {
        "\(path): \(name) \(version) [\(mode)\(modeNote.map { ": \($0)" } ?? "")] — " + schemes.map { s in
            s.flagNames.isEmpty ? s.name : "\(s.name) (\(s.flagNames.joined(separator: ", ")))"
        }.joined(separator: ", ")
    }
}

/// The verdict on one candidate file.
public enum PluginVerdict: Sendable, CustomStringConvertible {
    case loaded(LoadedPlugin)
    case refused(PluginDiagnostic)
    public var description: String {
        switch self {
        case .loaded(let p): return "loaded  \(p)"
        case .refused(let d): return "refused \(d)"
        }
    }
    public var plugin: LoadedPlugin? { if case .loaded(let p) = self { return p } else { return nil } }
    public var diagnostic: PluginDiagnostic? { if case .refused(let d) = self { return d } else { return nil } }
}

/// Finds, checks, dlopens and registers plugins (DESIGN.md, Plugins).
public final class PluginLoader: @unchecked Sendable {
    /// Schemes a plugin may not take unless the application lists them in `allowOverride`.
    public static let protectedSchemes: Set<String> = ["file", "data", "http", "https"]

    public let registry: HandlerRegistry
    /// Schemes the application lets plugins take over.
    public let allowOverride: Set<String>
    /// Which plugin files run in a worker process, and the workers' limits.
    public let isolation: PluginIsolation
    static let logger = Logger(label: "porter.plugins")

    /// Real paths already loaded, per registry.
    private static let loadedPaths = Locked<[String: LoadedPlugin]>([:])
    private func loadedKey(_ real: String) -> String { "\(ObjectIdentifier(registry).hashValue) \(real)" }

    public init(registry: HandlerRegistry = .shared, allowOverride: Set<String> = [],
                isolation: PluginIsolation = .default) {
        self.registry = registry
        self.allowOverride = allowOverride
        self.isolation = isolation
    }

    // MARK: - search path

    /// True in a setuid or setgid process (or one with file capabilities): the
    /// environment must not choose code to load there.
    public static var isPrivileged: Bool { porter_secure_exec() != 0 }

    /// The folders scanned at start-up, in order: `PORTER_PLUGIN_PATH` (colon
    /// separated; ignored when privileged), the user's folder under XDG data home, the
    /// plugin folder of the prefix the program is installed in (`installedPluginFolder`;
    /// not when privileged), then /usr/local/lib/porter/plugins and
    /// /usr/lib/porter/plugins (a program installed in /usr or /usr/local adds nothing).
    public static func searchPath(environment: [String: String] = ProcessInfo.processInfo.environment,
                                  privileged: Bool = PluginLoader.isPrivileged,
                                  executable: String? = PluginLoader.currentExecutable()) -> [String] {
        var folders: [String] = []
        if !privileged, let list = environment["PORTER_PLUGIN_PATH"] {
            folders += list.split(separator: ":").map(String.init).filter { !$0.isEmpty }
        }
        if let data = XDG.dataHome(environment: environment) { folders.append(data + "/porter/plugins") }
        // A setuid program could be hard-linked into a folder its caller owns: there the
        // program's own location must not choose code either.
        let system = ["/usr/local/lib/porter/plugins", "/usr/lib/porter/plugins"]
        if !privileged, let installed = installedPluginFolder(executable: executable), !system.contains(installed) {
            folders.append(installed)
        }
        return folders + system
    }

    /// `PREFIX/lib/porter/plugins` for a program at `PREFIX/bin/NAME` (`make install`'s
    /// layout, wherever the prefix is: /usr, /opt/porter, a DESTDIR); nil for a program
    /// anywhere else (a build folder) or a relative path.
    public static func installedPluginFolder(executable: String?) -> String? {
        guard let executable, executable.hasPrefix("/") else { return nil }
        let bin = PathText.parent(of: executable)
        guard PathText.lastComponent(of: bin) == "bin" else { return nil }
        let prefix = PathText.parent(of: bin)
        return (prefix == "/" ? "" : prefix) + "/lib/porter/plugins"
    }

    /// This program's file, symbolic links resolved (`/proc/self/exe`); nil when unknown.
    public static func currentExecutable() -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    }

    /// The candidate files of a folder: names ending in `.so` (or `.so.N`), sorted. A
    /// path that is not a folder is itself the candidate. Missing folders give none.
    public static func candidates(in folder: String) -> [String] {
        var st = stat()
        guard stat(folder, &st) == 0 else {
            // A dangling name given directly is still a candidate (it gets its diagnostic).
            return lstat(folder, &st) == 0 ? [folder] : []
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else { return [folder] }
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [] }
        return names.filter { $0.hasSuffix(".so") || $0.contains(".so.") }.sorted()
            .map { folder.hasSuffix("/") ? folder + $0 : folder + "/" + $0 }
    }

    // MARK: - loading

    /// Loads every candidate of every folder; one verdict per candidate, in order. A
    /// refused plugin never stops the others.
    public func loadAll(from folders: [String]) -> [PluginVerdict] {
        var seen = Set<String>()
        var verdicts: [PluginVerdict] = []
        for folder in folders {
            for path in Self.candidates(in: folder) where seen.insert(path).inserted {
                verdicts.append(load(path: path))
            }
        }
        return verdicts
    }

    /// Checks, opens and registers one plugin file. The file is opened once; the checks
    /// look at that descriptor (and at every folder above the file and above a link to
    /// it); dlopen maps the same descriptor through /proc/self/fd, so nothing can be
    /// swapped in between. The descriptor stays open for the life of the process (the
    /// image is never unloaded either), so no later plugin reuses its /proc name.
    public func load(path: String) -> PluginVerdict {
        func refuse(_ stage: PluginLoadStage, _ reason: String, _ detail: String? = nil) -> PluginVerdict {
            .refused(PluginDiagnostic(path: path, stage: stage, reason: reason, detail: detail))
        }
        let opened: PluginFile
        switch PluginFile.open(path) {
        case .failure(let problem): return refuse(.file, problem.reason)
        case .success(let f): opened = f
        }
        if let already = Self.loadedPaths.withLock({ $0[loadedKey(opened.identity)] }),
           registry.registrations.contains(where: { $0.id == already.registrationID }) {
            close(opened.fd)
            return refuse(.register, "already loaded as \(already.path)")
        }
        let mode = isolation.mode(for: path)
        var modeNote: String?
        let worker = PluginWorker.program()
        switch PluginProbe.check(opened, path: path, describe: mode == .isolated) {
        case .refused(let d):
            close(opened.fd)
            return .refused(d)
        case .passed(let description?) where mode == .isolated && worker != nil:
            // The description came from another process that ran the plugin's code: check
            // it as the entry point's own answer is checked.
            if let problem = description.problem {
                close(opened.fd)
                return refuse(.descriptor, problem)
            }
            if let conflict = conflict(for: description.schemes.map(\.name), origin: .plugin(path: path)) {
                close(opened.fd)
                return refuse(.register, conflict)
            }
            let plugin = IsolatedPlugin(path: path, description: description, fd: opened.fd, workerPath: worker!.path,
                                        isolation: isolation)
            let id = registry.register(factory: IsolatedPluginFactory(plugin: plugin), origin: .plugin(path: path),
                                       version: description.version)
            let loaded = LoadedPlugin(path: path, name: description.name, version: description.version,
                                      schemes: description.schemes, registrationID: id, mode: .isolated,
                                      needs: LocalService.names(of: description.needs))
            Self.loadedPaths.withLock { $0[loadedKey(opened.identity)] = loaded }
            Self.isolated.withLock { $0.append(plugin) }
            return .loaded(loaded)
        default:
            if mode == .isolated {
                // A worker exists but could not describe the plugin: refuse it rather than
                // run it in process (what made the probe fail would then be here).
                guard worker == nil else {
                    close(opened.fd)
                    return refuse(.open, "the probe process could not describe it (no answer it could read)")
                }
                // No worker program at all: isolation is not given up without a word.
                let why = "no plugin worker: no porter-plugin-worker beside the program (or $PORTER_PLUGIN_WORKER), "
                    + "and the program cannot be its own worker (it did not call Porter.bootstrap() first)"
                guard isolation.inProcessWithoutWorker else {
                    close(opened.fd)
                    Self.logger.error("\(path): not loaded: \(why); isolation was not turned off (set PluginIsolation.inProcessWithoutWorker to run it in process)")
                    return refuse(.open, "not loaded in process without isolation: \(why)")
                }
                modeNote = "in process: \(why)"
                Self.logger.warning("\(path): runs in process, unprotected (PluginIsolation.inProcessWithoutWorker): \(why)")
            }
        }
        _ = dlerror()
        guard let handle = dlopen("/proc/self/fd/\(opened.fd)", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) else {
            let text = Self.dlerrorText()
            close(opened.fd)
            return refuse(.open, "dlopen failed", text)
        }
        guard let symbol = dlsym(handle, PORTER_PLUGIN_ENTRY_SYMBOL) else {
            return refuse(.symbol, "no '\(PORTER_PLUGIN_ENTRY_SYMBOL)' function", Self.dlerrorText())
        }
        let entry = unsafeBitCast(symbol, to: porter_plugin_entry_fn.self)
        var verdict = register(entry: entry, path: path, origin: .plugin(path: path))
        if case .loaded(var p) = verdict {
            p.modeNote = modeNote
            verdict = .loaded(p)
            Self.loadedPaths.withLock { $0[loadedKey(opened.identity)] = p }
        }
        return verdict
    }

    /// Registers a plugin linked into the application (no dlopen): the same checks and
    /// the same adapter as a plugin file. `name` stands in for the path in diagnostics.
    public func register(entry: porter_plugin_entry_fn, name: String) -> PluginVerdict {
        register(entry: entry, path: name, origin: .inProcess)
    }

    private func register(entry: porter_plugin_entry_fn, path: String, origin: HandlerOrigin) -> PluginVerdict {
        let factory: PluginHandlerFactory
        let schemes: [PluginScheme]
        switch Self.describe(entry: entry, path: path) {
        case .failure(let d): return .refused(d)
        case .success(let (f, d)):
            factory = f
            schemes = d.schemes
        }
        if let conflict = conflict(for: schemes.map(\.name), origin: origin) {
            return .refused(PluginDiagnostic(path: path, stage: .register, reason: conflict))
        }
        let id = registry.register(factory: factory, origin: origin, version: factory.version)
        return .loaded(LoadedPlugin(path: path, name: factory.name, version: factory.version, schemes: schemes,
                                    registrationID: id, needs: LocalService.names(of: factory.needs)))
    }

    /// Isolated plugins by registration.
    static let isolated = Locked<[IsolatedPlugin]>([])

    /// The plugins of this process that run in workers, and how their workers fare.
    public static var isolatedPlugins: [IsolatedPluginStatus] {
        isolated.current.map(\.status)
    }

    /// What the sandbox of the isolated plugin at `path` enforces, as its worker reports
    /// it (a worker is started if none runs); nil when no such plugin is loaded or its
    /// worker did not greet within `timeout` seconds.
    public static func sandboxReport(forPluginAt path: String, timeout: TimeInterval = 10) -> String? {
        isolated.current.last { $0.path == path }?.sandboxReport(timeout: timeout)
    }

    /// Calls a plugin's entry point and checks what it returns: the factory of its
    /// in-process handlers and what it declares. Used in process, and in a worker (a
    /// probe, or one that serves loads).
    static func describe(entry: porter_plugin_entry_fn, path: String)
        -> Result<(PluginHandlerFactory, PluginDescription), PluginDiagnostic> {
        func refuse(_ stage: PluginLoadStage, _ reason: String, _ detail: String? = nil)
            -> Result<(PluginHandlerFactory, PluginDescription), PluginDiagnostic> {
            .failure(PluginDiagnostic(path: path, stage: stage, reason: reason, detail: detail))
        }
        var descriptorPointer: UnsafePointer<porter_plugin_descriptor>?
        var error = [CChar](repeating: 0, count: 1024)
        let capacity = error.count
        let rc = entry(PluginHost.table, &descriptorPointer, &error, capacity)
        if rc != 0 {
            let message = CErrorBuffer.read(error)
            return refuse(PluginLoadStage.`init`, "the entry point returned \(rc)", message.isEmpty ? nil : message)
        }
        guard let descriptorPointer else { return refuse(.descriptor, "the entry point returned no descriptor") }
        // The first three fields never move (porter_plugin.h, Versioning).
        let head = UnsafeRawPointer(descriptorPointer)
        let size = Int(head.load(as: UInt32.self))
        let major = head.load(fromByteOffset: 4, as: UInt16.self)
        let minor = head.load(fromByteOffset: 6, as: UInt16.self)
        let hostMajor = UInt16(PORTER_PLUGIN_ABI_MAJOR), hostMinor = UInt16(PORTER_PLUGIN_ABI_MINOR)
        guard major == hostMajor else {
            return refuse(.abi, "built for ABI \(major).\(minor); this host has \(hostMajor).\(hostMinor) (major versions must match)")
        }
        guard minor <= hostMinor else {
            return refuse(.abi, "built for ABI \(major).\(minor), newer than this host's \(hostMajor).\(hostMinor)")
        }
        // A 1.0 / 1.1 descriptor ends where 1.2 appended its fields.
        let oldSize = MemoryLayout<porter_plugin_descriptor>.offset(of: \.read_paths)!
        guard size >= oldSize else {
            return refuse(.descriptor, "descriptor is \(size) bytes; ABI \(hostMajor).\(minor) needs \(oldSize)")
        }
        // Copy only what the plugin's struct has; the rest stays 0 (not declared).
        var d = porter_plugin_descriptor()
        withUnsafeMutableBytes(of: &d) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: head, count: min(size, MemoryLayout<porter_plugin_descriptor>.size)))
        }
        let schemes: [PluginScheme]
        switch check(d) {
        case .failure(let reason): return refuse(.descriptor, reason.message)
        case .success(let s): schemes = s
        }
        func strings(_ list: UnsafePointer<UnsafePointer<CChar>?>?, _ count: Int) -> [String] {
            guard let list, count > 0 else { return [] }
            return (0..<min(count, 32)).compactMap { list[$0].flatMap { String(validatingCString: $0) } }
        }
        let reads = strings(d.read_paths, d.read_path_count), writes = strings(d.write_paths, d.write_path_count)
        if let bad = reads.first(where: { !PluginDescription.acceptable($0, write: false) })
            ?? writes.first(where: { !PluginDescription.acceptable($0, write: true) }) {
            return refuse(.descriptor, "declared path '\(bad)' is not allowed (reads: \"~/x\" or absolute; writes: \"~/x/y\" or under /tmp; no \"..\")")
        }
        // 1.3's `needs`: 0 unless the plugin's struct reaches it (the copy above left it 0
        // otherwise); bits this host does not know are dropped.
        let needsEnd = MemoryLayout<porter_plugin_descriptor>.offset(of: \.needs)! + MemoryLayout<UInt32>.size
        let needs = minor >= 3 && size >= needsEnd ? d.needs & LocalService.knownNeeds : 0
        let factory = PluginHandlerFactory(descriptor: d, schemes: schemes, needs: needs)
        let description = PluginDescription(name: factory.name, version: factory.version, schemes: schemes,
                                            readPaths: reads, writePaths: writes,
                                            subscriptions: PluginEvents.shared.subscribedEvents, abiMinor: Int(minor),
                                            needs: needs)
        return .success((factory, description))
    }

    /// A scheme a plugin may not take: a protected built-in (unless allowed) or one an
    /// earlier plugin already serves.
    private func conflict(for schemes: [String], origin: HandlerOrigin) -> String? {
        let registrations = registry.registrations
        for scheme in schemes {
            for reg in registrations where reg.factory.schemes.contains(scheme) {
                switch reg.origin {
                case .builtIn where Self.protectedSchemes.contains(scheme) && !allowOverride.contains(scheme):
                    return "scheme '\(scheme)' is built in (\(reg.name)); the application must allow overriding it"
                case .plugin(let other) where !allowOverride.contains(scheme):
                    return "scheme '\(scheme)' is already served by plugin \(reg.name) (\(other))"
                case .inProcess where reg.factory is PluginHandlerFactory && !allowOverride.contains(scheme):
                    return "scheme '\(scheme)' is already served by plugin \(reg.name) (linked in)"
                default:
                    continue
                }
            }
        }
        return nil
    }

    // MARK: - checks

    /// nil when the file at `path` may be loaded; otherwise why not (the checks of
    /// `load`, without loading).
    static func fileProblem(_ path: String) -> String? {
        switch PluginFile.open(path) {
        case .failure(let p): return p.reason
        case .success(let f):
            close(f.fd)
            return nil
        }
    }

    static func check(_ d: porter_plugin_descriptor) -> Result<[PluginScheme], PluginEvents.Refusal> {
        func fail(_ m: String) -> Result<[PluginScheme], PluginEvents.Refusal> { .failure(.init(message: m)) }
        guard let name = d.name.flatMap({ String(validatingCString: $0) }), !name.isEmpty else { return fail("no name") }
        guard let version = d.version.flatMap({ String(validatingCString: $0) }), !version.isEmpty else {
            return fail("no version")
        }
        guard let list = d.schemes, d.scheme_count > 0 else { return fail("no schemes") }
        guard d.scheme_count <= 64 else { return fail("\(d.scheme_count) schemes (at most 64)") }
        guard let handler = d.handler else { return fail("no handler table") }
        // The size first, read alone: a table smaller than this host's must not be read
        // whole (found by Fuzz/FuzzPluginDescriptor: a heap read past a short table).
        let size = UnsafeRawPointer(handler).load(as: UInt32.self)
        guard size >= UInt32(MemoryLayout<porter_handler_vtable>.size) else {
            return fail("handler table is \(size) bytes; needs \(MemoryLayout<porter_handler_vtable>.size)")
        }
        let table = handler.pointee
        var missing: [String] = []
        if table.start == nil { missing.append("start") }
        if table.stop == nil { missing.append("stop") }
        if table.destroy == nil { missing.append("destroy") }
        if !missing.isEmpty { return fail("handler table lacks \(missing.joined(separator: ", "))") }
        if (table.pause == nil) != (table.resume == nil) { return fail("handler table has only one of pause / resume") }
        var schemes: [PluginScheme] = []
        for i in 0..<d.scheme_count {
            let s = PluginScheme(list[i], abiMinor: Int(d.abi_minor))
            guard isValidScheme(s.name) else {
                return fail("invalid scheme '\(s.name)' (RFC 3986: lower-case letter, then letters, digits, + - .)")
            }
            schemes.append(s)
        }
        _ = version
        return .success(schemes)
    }

    /// RFC 3986 scheme syntax, lower case only (Porter compares schemes in lower case).
    static func isValidScheme(_ s: String) -> Bool {
        guard let first = s.utf8.first, first >= UInt8(ascii: "a"), first <= UInt8(ascii: "z"), s.utf8.count <= 64 else {
            return false
        }
        return s.utf8.allSatisfy { c in
            (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
                || c == UInt8(ascii: "+") || c == UInt8(ascii: "-") || c == UInt8(ascii: ".")
        }
    }

    private static func dlerrorText() -> String? {
        dlerror().map { String(cString: $0) }
    }
}
