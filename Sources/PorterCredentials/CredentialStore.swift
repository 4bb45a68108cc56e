import Foundation
import PorterCore

/// Credentials per protection space (URLCredentialStorage): for the session (memory)
/// or permanent (a JSON file readable by its owner only), with a default per space.
/// Challenges offer the default as `proposedCredential`; a credential that failed is
/// dropped, not offered again. Every method may be called from any thread.
public final class CredentialStore: CredentialStorage, @unchecked Sendable {
    /// The store `.default` sessions share: `$XDG_DATA_HOME/porter/credentials.json`
    /// (or `~/.local/share/porter/credentials.json`) for permanent credentials; memory
    /// only, with a warning, when that file cannot be used.
    public static let shared: CredentialStore = {
        do {
            return try CredentialStore(path: defaultPath())
        } catch {
            FileHandle.standardError.write(Data("porter: credentials stay in memory: \(error)\n".utf8))
            return CredentialStore()
        }
    }()

    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        (XDG.dataHome(environment: environment) ?? NSHomeDirectory() + "/.local/share") + "/porter/credentials.json"
    }

    private struct Entry {
        var credentials: [String: Credential] = [:]   // by user
        var defaultUser: String?
    }

    private let lock = NSLock()
    private var spaces: [ProtectionSpace: Entry] = [:]
    /// Where permanent credentials are written; nil: memory only.
    public let path: String?

    /// A store in memory only.
    public init() { path = nil }

    /// A store whose permanent credentials live in `path` (created 0600 in a 0700
    /// folder). Throws when the file is readable by others or unreadable.
    public init(path: String) throws {
        self.path = path
        try PrivateFiles.makeFolder((path as NSString).deletingLastPathComponent)
        try PrivateFiles.refuseIfNotOwnRegularFile(path, what: "the credential store")
        guard FileManager.default.fileExists(atPath: path) else { return }   // nothing stored yet
        try PrivateFiles.refuseIfOthersCanRead(path, what: "the credential store")
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PorterError(.noPermissionsToReadFile, "cannot read the credential store \(path)")
        }
        do {
            for record in try JSONDecoder().decode([Record].self, from: data) {
                let credential = Credential(user: record.user, password: record.password, persistence: .permanent)
                spaces[record.space.protectionSpace, default: Entry()].credentials[record.user] = credential
                if record.isDefault { spaces[record.space.protectionSpace, default: Entry()].defaultUser = record.user }
            }
        } catch {
            throw PorterError(.cannotParseResponse, "the credential store \(path) is not valid: \(error)")
        }
    }

    /// Every credential for `space`, by user.
    public func credentials(for space: ProtectionSpace) -> [String: Credential] {
        lock.withLock { spaces[space]?.credentials ?? [:] }
    }

    public func defaultCredential(for space: ProtectionSpace) -> Credential? {
        lock.withLock {
            guard let entry = spaces[space] else { return nil }
            if let user = entry.defaultUser, let c = entry.credentials[user] { return c }
            return entry.credentials.count == 1 ? entry.credentials.values.first : nil
        }
    }

    /// Stores `credential` for `space` (a `.none` one is not kept) and makes it the default
    /// when asked. Permanent ones are written to the file at once.
    public func set(_ credential: Credential, for space: ProtectionSpace, asDefault: Bool = true) {
        guard credential.persistence != .none, let user = credential.user else { return }
        let persist = lock.withLock { () -> Bool in
            spaces[space, default: Entry()].credentials[user] = credential
            if asDefault { spaces[space, default: Entry()].defaultUser = user }
            return credential.persistence == .permanent
        }
        if persist { save() }
    }

    public func remove(_ credential: Credential, for space: ProtectionSpace) {
        guard let user = credential.user else { return }
        let persist = lock.withLock { () -> Bool in
            guard let removed = spaces[space]?.credentials.removeValue(forKey: user) else { return false }
            if spaces[space]?.defaultUser == user { spaces[space]?.defaultUser = nil }
            if spaces[space]?.credentials.isEmpty == true { spaces[space] = nil }
            return removed.persistence == .permanent
        }
        if persist { save() }
    }

    public func removeAll() {
        lock.withLock { spaces.removeAll() }
        save()
    }

    /// The permanent credentials, written to a temporary file (0600) then renamed.
    private func save() {
        guard let path else { return }
        let records = lock.withLock { () -> [Record] in
            spaces.flatMap { space, entry in
                entry.credentials.values.filter { $0.persistence == .permanent }.compactMap { c -> Record? in
                    guard let user = c.user, let password = c.password else { return nil }
                    return Record(space: SpaceRecord(space), user: user, password: password, isDefault: entry.defaultUser == user)
                }
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        guard let data = try? encoder.encode(records.sorted { ($0.space.host, $0.user) < ($1.space.host, $1.user) }) else { return }
        _ = PrivateFiles.writeAtomically(data, to: path)
    }

    private struct SpaceRecord: Codable {
        var host: String, port: Int, proto: String, realm: String?, method: String, proxy: Bool
        init(_ s: ProtectionSpace) {
            host = s.host.lowercased(); port = s.port; proto = s.protocol; realm = s.realm
            method = s.authenticationMethod.description; proxy = s.isProxy
        }
        var protectionSpace: ProtectionSpace {
            let m: AuthenticationMethod
            switch method {
            case "default": m = .default
            case "basic": m = .httpBasic
            case "digest": m = .httpDigest
            case "ntlm": m = .ntlm
            case "negotiate": m = .negotiate
            case "client-certificate": m = .clientCertificate
            case "server-trust": m = .serverTrust
            default: m = .custom(method)
            }
            return ProtectionSpace(host: host, port: port, protocol: proto, realm: realm, authenticationMethod: m, isProxy: proxy)
        }
    }

    private struct Record: Codable {
        var space: SpaceRecord
        var user: String
        var password: String
        var isDefault: Bool
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
