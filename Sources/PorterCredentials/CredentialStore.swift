import Foundation
import PorterCore
import PorterStorage

/// Credentials per protection space (URLCredentialStorage): for the session (memory)
/// or permanent, with a default per space. Permanent ones go to the Secret Service
/// (through libsecret) or to a JSON file readable by its owner only: `backend` says
/// which, and why. Challenges offer the default as `proposedCredential`; a credential
/// that failed is dropped, not offered again. Every method may be called from any
/// thread; a change to a permanent credential returns once the backend has it (a
/// keyring call is bounded by the store's timeout), and `lastPersistenceError` tells
/// when it could not be written.
public final class CredentialStore: CredentialStorage, @unchecked Sendable {
    /// The store `.default` sessions share, opened on first use: the Secret Service when
    /// `DBUS_SESSION_BUS_ADDRESS` names a bus that has one, else
    /// `$XDG_DATA_HOME/porter/credentials.json` (or `~/.local/share/porter/credentials.json`);
    /// see `init(environment:filePath:timeout:)`. Memory only, with a warning on standard
    /// error, when neither can be used (a locked keyring, a file others may read).
    public static let shared = CredentialStore(environment: ProcessInfo.processInfo.environment,
                                               warnsOnStandardError: true)

    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        (XDG.dataHome(environment: environment) ?? NSHomeDirectory() + "/.local/share") + "/porter/credentials.json"
    }

    private struct Entry {
        var credentials: [String: Credential] = [:]   // by user
        var defaultUser: String?
    }

    /// What opening a backend gave: the backend, its credentials, and why it was chosen.
    struct Opened {
        var permanent: (any PermanentCredentials)?
        var backend: CredentialBackend
        var records: [StoredCredential] = []
    }

    private let lock = NSLock()
    /// Held (after `lock`) while a change goes to the backend, so changes reach it in the
    /// order they were made; never held while taking `lock`.
    private let writeLock = NSLock()
    private var spaces: [ProtectionSpace: Entry] = [:]
    private var permanent: (any PermanentCredentials)?
    private var currentBackend: CredentialBackend
    /// Set until the first use of a store that opens its backend lazily.
    private var opener: (@Sendable () -> Opened)?
    private let persistenceError = Locked<PorterError?>(nil)

    /// A store in memory only.
    public init() {
        currentBackend = CredentialBackend(kind: .memory)
    }

    /// A store whose permanent credentials live in `path` (created 0600 in a 0700
    /// folder). Throws when the file is readable by others or unreadable.
    public init(path: String) throws {
        let file = try CredentialFile(path: path)
        currentBackend = CredentialBackend(kind: file.kind)
        permanent = file
        install(try file.load())
    }

    /// A store whose permanent credentials are items of the Secret Service on the D-Bus
    /// bus at `busAddress` (for the session bus: `DBUS_SESSION_BUS_ADDRESS`), in its
    /// default collection. Every call to the service gives up after `timeout`. Porter
    /// never prompts: a prompt the service asks for (to unlock a locked collection) is
    /// dismissed. Throws `.storeUnusable` (or `.timedOut`) when the bus or the service
    /// cannot be reached, or the collection is locked (or missing).
    public init(secretServiceBus busAddress: String, timeout: Duration = .seconds(5)) throws {
        let connection: SecretServiceConnection
        switch SecretServiceConnection.open(busAddress: busAddress, timeout: timeout) {
        case .success(let c): connection = c
        case .failure(let failure): throw failure.porterError
        }
        let keyring = SecretServiceCredentials(connection: connection)
        try keyring.checkCollection()
        currentBackend = CredentialBackend(kind: keyring.kind)
        permanent = keyring
        install(try keyring.load())
    }

    /// The store a `.default` session would use in a process with `environment`, opened
    /// on first use (nothing is asked of D-Bus or the disk before):
    /// - `PORTER_CREDENTIAL_STORE=file`: the file `filePath` (by default `defaultPath`);
    /// - else the Secret Service, when `DBUS_SESSION_BUS_ADDRESS` names a bus that
    ///   answers within `timeout` and has org.freedesktop.secrets running or
    ///   activatable; a file left by an earlier run is then moved into it (see below);
    /// - else (no bus, no service, no answer) the file, unless
    ///   `PORTER_CREDENTIAL_STORE=secret-service` demands the service.
    /// When the chosen backend cannot be used (a locked collection, since Porter does not
    /// prompt; a file others may read) the store keeps permanent credentials in memory,
    /// and `backend.reason` says why.
    ///
    /// Moving the file: its credentials are stored in the Secret Service (replacing the
    /// ones there for the same space and user), and the file is deleted once every one is
    /// in; if any cannot be stored, the file stays and stays in use, so nothing is lost.
    public convenience init(environment: [String: String], filePath: String? = nil, timeout: Duration = .seconds(5)) {
        self.init(environment: environment, filePath: filePath, timeout: timeout, warnsOnStandardError: false)
    }

    init(environment: [String: String], filePath: String? = nil, timeout: Duration = .seconds(5), warnsOnStandardError: Bool) {
        let path = filePath ?? CredentialStore.defaultPath(environment: environment)
        currentBackend = CredentialBackend(kind: .memory, reason: "not opened yet")
        opener = {
            let opened = CredentialStore.open(environment: environment, filePath: path, timeout: timeout)
            if warnsOnStandardError, opened.permanent == nil {
                FileHandle.standardError.write(Data("porter: credentials stay in memory: \(opened.backend.reason)\n".utf8))
            }
            return opened
        }
    }

    /// Where `init(environment:filePath:timeout:)` would keep permanent credentials, and
    /// why, found without opening the store (no credential is read or moved): what
    /// `porter credentials where` prints.
    public static func selectBackend(environment: [String: String] = ProcessInfo.processInfo.environment,
                                     filePath: String? = nil, timeout: Duration = .seconds(5)) -> CredentialBackend {
        let path = filePath ?? defaultPath(environment: environment)
        switch BackendChoice.choose(environment: environment, filePath: path, timeout: timeout) {
        case .unusable(let reason):
            return CredentialBackend(kind: .memory, reason: reason)
        case .file(let path, let reason):
            do {
                try PrivateFiles.refuseIfOthersCanRead(path, what: "the credential store")
                return CredentialBackend(kind: .file(path: path), reason: reason)
            } catch {
                return CredentialBackend(kind: .memory, reason: "\(reason), and \(porterError(error).message)")
            }
        case .secretService(let connection, let reason):
            do {
                try SecretServiceCredentials(connection: connection).checkCollection()
                return CredentialBackend(kind: .secretService(busAddress: connection.busAddress), reason: reason)
            } catch {
                return CredentialBackend(kind: .memory, reason: porterError(error).message)
            }
        }
    }

    /// Chooses and opens the backend for `environment`, moving a file into the Secret
    /// Service when that is chosen.
    static func open(environment: [String: String], filePath: String, timeout: Duration) -> Opened {
        switch BackendChoice.choose(environment: environment, filePath: filePath, timeout: timeout) {
        case .unusable(let reason):
            return Opened(backend: CredentialBackend(kind: .memory, reason: reason))
        case .file(let path, let reason):
            do {
                let file = try CredentialFile(path: path)
                return Opened(permanent: file, backend: CredentialBackend(kind: file.kind, reason: reason), records: try file.load())
            } catch {
                return Opened(backend: CredentialBackend(kind: .memory, reason: "\(reason), and \(porterError(error).message)"))
            }
        case .secretService(let connection, let reason):
            let keyring = SecretServiceCredentials(connection: connection)
            do {
                try keyring.checkCollection()
                let records = try keyring.load()
                // lstat, not stat: a planted link where the file would be is reported too.
                var st = stat()
                guard lstat(filePath, &st) == 0 else {
                    return Opened(permanent: keyring, backend: CredentialBackend(kind: keyring.kind, reason: reason), records: records)
                }
                let file: CredentialFile
                let moving: [StoredCredential]
                do {
                    file = try CredentialFile(path: filePath)
                    moving = try file.load()
                } catch {
                    let note = "\(filePath) was left alone: \(porterError(error).message)"
                    return Opened(permanent: keyring, backend: CredentialBackend(kind: keyring.kind, reason: join(reason, note)),
                                  records: records)
                }
                do {
                    try keyring.take(moving, over: records)
                    try file.remove()
                } catch {
                    let why = "the credentials of \(filePath) could not be moved into the secret service on \(connection.busAddress) (\(porterError(error).message)); the file stays in use"
                    return Opened(permanent: file, backend: CredentialBackend(kind: file.kind, reason: why), records: moving)
                }
                let note = "moved \(moving.count) credential\(moving.count == 1 ? "" : "s") from \(filePath) into it"
                return Opened(permanent: keyring, backend: CredentialBackend(kind: keyring.kind, reason: join(reason, note)),
                              records: try keyring.load())
            } catch {
                return Opened(backend: CredentialBackend(kind: .memory, reason: porterError(error).message))
            }
        }
    }

    private static func join(_ a: String, _ b: String) -> String { a.isEmpty ? b : "\(a); \(b)" }

    /// Opens the backend on first use (with `lock` held).
    private func openIfNeeded() {
        guard let opener else { return }
        self.opener = nil
        let opened = opener()
        permanent = opened.permanent
        currentBackend = opened.backend
        install(opened.records)
    }

    /// Puts loaded credentials in memory (with `lock` held, or in an initialiser).
    private func install(_ records: [StoredCredential]) {
        for record in records {
            let credential = Credential(user: record.user, password: record.password, persistence: .permanent)
            spaces[record.space, default: Entry()].credentials[record.user] = credential
            if record.isDefault { spaces[record.space, default: Entry()].defaultUser = record.user }
        }
    }

    /// Where permanent credentials go, and why (opens the store when it is not yet).
    public var backend: CredentialBackend {
        lock.withLock {
            openIfNeeded()
            return currentBackend
        }
    }

    /// The file permanent credentials are written to; nil when they go to the Secret
    /// Service or stay in memory.
    public var path: String? { backend.filePath }

    /// The last change to a permanent credential that did not reach the backend (a
    /// locked keyring, a full disk); nil once one does.
    public var lastPersistenceError: PorterError? { persistenceError.current }

    /// Every credential for `space`, by user.
    public func credentials(for space: ProtectionSpace) -> [String: Credential] {
        lock.withLock {
            openIfNeeded()
            return spaces[space]?.credentials ?? [:]
        }
    }

    /// Every credential of every space (URLCredentialStorage's `allCredentials`).
    public var allCredentials: [ProtectionSpace: [String: Credential]] {
        lock.withLock {
            openIfNeeded()
            return spaces.mapValues(\.credentials)
        }
    }

    public func defaultCredential(for space: ProtectionSpace) -> Credential? {
        lock.withLock {
            openIfNeeded()
            guard let entry = spaces[space] else { return nil }
            if let user = entry.defaultUser, let c = entry.credentials[user] { return c }
            return entry.credentials.count == 1 ? entry.credentials.values.first : nil
        }
    }

    /// Stores `credential` for `space` (a `.none` one is not kept) and makes it the default
    /// when asked. Permanent ones go to the backend at once (unless the same credential is
    /// stored already, with the same default).
    public func set(_ credential: Credential, for space: ProtectionSpace, asDefault: Bool = true) {
        guard credential.persistence != .none, let user = credential.user else { return }
        lock.lock()
        openIfNeeded()
        let before = spaces[space]
        spaces[space, default: Entry()].credentials[user] = credential
        if asDefault { spaces[space, default: Entry()].defaultUser = user }
        let wasPermanent = before?.credentials[user]?.persistence == .permanent
        let unchanged = before?.credentials[user] == credential
            && (before?.defaultUser == user) == (spaces[space]?.defaultUser == user)
        guard let permanent, !unchanged, credential.persistence == .permanent || wasPermanent else {
            lock.unlock()
            return
        }
        let all = permanentRecords()
        let stored = all.first { $0.space == space && $0.user == user }
        writeLock.lock()
        lock.unlock()
        defer { writeLock.unlock() }
        record {
            // A permanent credential replaced by one for the session leaves the backend.
            if let stored { try permanent.didSet(stored, all: all) } else { try permanent.didRemove(user: user, from: space, all: all) }
        }
    }

    public func remove(_ credential: Credential, for space: ProtectionSpace) {
        guard let user = credential.user else { return }
        lock.lock()
        openIfNeeded()
        let removed = spaces[space]?.credentials.removeValue(forKey: user)
        if spaces[space]?.defaultUser == user { spaces[space]?.defaultUser = nil }
        if spaces[space]?.credentials.isEmpty == true { spaces[space] = nil }
        guard let permanent, removed?.persistence == .permanent else {
            lock.unlock()
            return
        }
        let all = permanentRecords()
        writeLock.lock()
        lock.unlock()
        defer { writeLock.unlock() }
        record { try permanent.didRemove(user: user, from: space, all: all) }
    }

    public func removeAll() {
        lock.lock()
        openIfNeeded()
        spaces.removeAll()
        guard let permanent else {
            lock.unlock()
            return
        }
        writeLock.lock()
        lock.unlock()
        defer { writeLock.unlock() }
        record { try permanent.didRemoveAll() }
    }

    private func record(_ write: () throws -> Void) {
        do {
            try write()
            persistenceError.withLock { $0 = nil }
        } catch {
            persistenceError.withLock { $0 = CredentialStore.porterError(error) }
        }
    }

    static func porterError(_ error: any Error) -> PorterError {
        (error as? PorterError) ?? PorterError(.storeUnusable, "\(error)")
    }

    /// The permanent credentials with their default flags (with `lock` held).
    private func permanentRecords() -> [StoredCredential] {
        spaces.flatMap { space, entry in
            entry.credentials.values.filter { $0.persistence == .permanent }.compactMap { c -> StoredCredential? in
                guard let user = c.user, let password = c.password else { return nil }
                return StoredCredential(space: space, user: user, password: password, isDefault: entry.defaultUser == user)
            }
        }
    }
}

/// `~/.netrc` (curl's `-n` / `--netrc-file`): `machine HOST login USER password PASS`,
/// `default`, and `macdef` blocks skipped; tokens may be quoted.
public struct Netrc: Sendable {
    public struct Entry: Sendable, Equatable {
        public var machine: String?   // nil: the `default` entry
        public var login: String?
        public var password: String?
    }
    public var entries: [Entry]

    /// Reads `path`, refusing a file that others may read (as curl's netrc rules ask).
    public init(contentsOf path: String) throws {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw PorterError(.fileDoesNotExist, "cannot read \(path)")
        }
        try PrivateFiles.refuseIfOthersCanRead(path, what: "")
        self.init(parsing: text)
    }

    public init(parsing text: String) {
        var tokens: [String] = []
        // Lines end in LF or CR LF (one Character in Swift, so splitting at "\n" alone
        // would leave a CR LF file one long line of tokens ending in "\r\n").
        var lines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
            .makeIterator()
        while let line = lines.next() {
            var scanner = Substring(line)
            var lineTokens: [String] = []
            while true {
                scanner = scanner.drop { $0 == " " || $0 == "\t" || $0 == "\r" }
                guard let first = scanner.first else { break }
                if first == "#" { break }
                if first == "\"" {
                    var value = ""
                    var rest = scanner.dropFirst()
                    while let c = rest.first, c != "\"" {
                        if c == "\\", let next = rest.dropFirst().first { value.append(next); rest = rest.dropFirst(2); continue }
                        value.append(c)
                        rest = rest.dropFirst()
                    }
                    lineTokens.append(value)
                    scanner = rest.dropFirst()
                } else {
                    let word = scanner.prefix { $0 != " " && $0 != "\t" && $0 != "\r" }
                    lineTokens.append(String(word))
                    scanner = scanner.dropFirst(word.count)
                }
            }
            tokens += lineTokens
            // A macro definition runs to the next empty line: skip it.
            if lineTokens.first == "macdef" {
                tokens.removeLast(lineTokens.count)
                while let l = lines.next(), !l.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {}
            }
        }
        var entries: [Entry] = []
        var i = 0
        while i < tokens.count {
            switch tokens[i] {
            case "machine":
                entries.append(Entry(machine: i + 1 < tokens.count ? tokens[i + 1].lowercased() : nil))
                i += 2
            case "default":
                entries.append(Entry(machine: nil))
                i += 1
            case "login", "password", "account":
                if !entries.isEmpty, i + 1 < tokens.count {
                    if tokens[i] == "login" { entries[entries.count - 1].login = tokens[i + 1] }
                    if tokens[i] == "password" { entries[entries.count - 1].password = tokens[i + 1] }
                }
                i += 2
            default:
                i += 1
            }
        }
        self.entries = entries
    }

    /// The credential for `host` (its machine entry, else `default`), if it has both parts.
    public func credential(for host: String) -> Credential? {
        let h = host.lowercased()
        let entry = entries.first { $0.machine == h } ?? entries.first { $0.machine == nil }
        guard let entry, let login = entry.login, let password = entry.password else { return nil }
        return Credential(user: login, password: password, persistence: .none)
    }
}
