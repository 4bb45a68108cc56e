import Foundation
import PorterCore
import PorterStorage

/// One permanent credential as a backend keeps it.
struct StoredCredential: Equatable, Sendable {
    var space: ProtectionSpace
    var user: String
    var password: String
    var isDefault: Bool
}

/// Where a `CredentialStore` keeps its permanent credentials: a 0600 file or the Secret
/// Service. The store calls one method at a time, after changing its memory; `all` is
/// then every permanent credential it holds, default flags included.
protocol PermanentCredentials: AnyObject, Sendable {
    var kind: CredentialBackend.Kind { get }
    func load() throws -> [StoredCredential]
    func didSet(_ credential: StoredCredential, all: [StoredCredential]) throws
    func didRemove(user: String, from space: ProtectionSpace, all: [StoredCredential]) throws
    func didRemoveAll() throws
}

extension AuthenticationMethod {
    /// The method a stored `description` names ("basic", "digest", a plugin's own).
    init(storedName: String) { self.init(name: storedName) }
}

// MARK: - The file

/// Permanent credentials in one JSON file, 0600 in a 0700 folder, replaced whole by
/// rename on every change (`PrivateFiles.writeAtomically`: the new file is 0600 from its
/// first byte).
final class CredentialFile: PermanentCredentials, @unchecked Sendable {
    let path: String
    var kind: CredentialBackend.Kind { .file(path: path) }

    /// Makes the folder; refuses a path that is a link or another user's file.
    init(path: String) throws {
        self.path = path
        try PrivateFiles.makeFolder((path as NSString).deletingLastPathComponent)
        try PrivateFiles.refuseIfNotOwnRegularFile(path, what: "the credential store")
    }

    var exists: Bool { FileManager.default.fileExists(atPath: path) }

    func load() throws -> [StoredCredential] {
        guard exists else { return [] }   // nothing stored yet
        try PrivateFiles.refuseIfOthersCanRead(path, what: "the credential store")
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PorterError(.noPermissionsToReadFile, "cannot read the credential store \(path)")
        }
        do {
            return try JSONDecoder().decode([Record].self, from: data).map {
                StoredCredential(space: $0.space.protectionSpace, user: $0.user, password: $0.password, isDefault: $0.isDefault)
            }
        } catch {
            throw PorterError(.cannotParseResponse, "the credential store \(path) is not valid: \(error)")
        }
    }

    func didSet(_ credential: StoredCredential, all: [StoredCredential]) throws { try write(all) }
    func didRemove(user: String, from space: ProtectionSpace, all: [StoredCredential]) throws { try write(all) }
    func didRemoveAll() throws { try write([]) }

    /// Deletes the file (after its credentials moved elsewhere).
    func remove() throws {
        guard unlink(path) == 0 || errno == ENOENT else {
            throw PorterError.fromErrno(errno, url: URL(fileURLWithPath: path), doing: "remove")
        }
    }

    private func write(_ all: [StoredCredential]) throws {
        let records = all.map { Record(space: SpaceRecord($0.space), user: $0.user, password: $0.password, isDefault: $0.isDefault) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let data: Data
        do {
            data = try encoder.encode(records.sorted { ($0.space.host, $0.user) < ($1.space.host, $1.user) })
        } catch {
            throw PorterError(.cannotWriteToFile, "cannot encode the credential store: \(error)")
        }
        guard PrivateFiles.writeAtomically(data, to: path) else {
            throw PorterError(.cannotWriteToFile, "cannot write the credential store \(path)", cause: .errno(errno))
        }
    }

    private struct SpaceRecord: Codable {
        var host: String, port: Int, proto: String, realm: String?, method: String, proxy: Bool
        init(_ s: ProtectionSpace) {
            host = s.host.lowercased(); port = s.port; proto = s.protocol; realm = s.realm
            method = s.authenticationMethod.description; proxy = s.isProxy
        }
        var protectionSpace: ProtectionSpace {
            ProtectionSpace(host: host, port: port, protocol: proto, realm: realm,
                            authenticationMethod: AuthenticationMethod(storedName: method), isProxy: proxy)
        }
    }

    private struct Record: Codable {
        var space: SpaceRecord
        var user: String
        var password: String
        var isDefault: Bool
    }
}

// MARK: - The Secret Service

/// Permanent credentials as items of the Secret Service's default collection, one item
/// per protection space and user: schema `org.porter.Credential`, attributes `protocol`,
/// `host` (lower case), `port`, `realm` (absent when the space has none), `authtype`
/// ("basic", "digest", …), `proxy`, `user` and `default`; label "Porter: user@host";
/// the password is the secret.
final class SecretServiceCredentials: PermanentCredentials, @unchecked Sendable {
    let connection: SecretServiceConnection
    var kind: CredentialBackend.Kind { .secretService(busAddress: connection.busAddress) }

    init(connection: SecretServiceConnection) {
        self.connection = connection
    }

    /// Every Porter item; throws when one is locked (its secret cannot be read without
    /// a prompt). Items that do not parse (written by another program) are skipped.
    func load() throws -> [StoredCredential] {
        let items: [SecretServiceConnection.Item]
        do {
            items = try connection.search([:], loadSecrets: true)
        } catch {
            throw error.porterError
        }
        if items.contains(where: \.isLocked) {
            throw PorterError(.storeUnusable, SecretServiceCredentials.lockedMessage,
                              cause: PorterError.Cause(domain: "secret-service", code: 4, message: "locked"))
        }
        return items.compactMap(SecretServiceCredentials.parse)
    }

    /// Throws unless the default collection (where items are stored) is unlocked: Porter
    /// never prompts to unlock it.
    func checkCollection() throws {
        let state: SecretServiceConnection.CollectionState
        do {
            state = try connection.defaultCollection()
        } catch {
            throw error.porterError
        }
        switch state {
        case .unlocked:
            return
        case .locked:
            throw PorterError(.storeUnusable, SecretServiceCredentials.lockedMessage,
                              cause: PorterError.Cause(domain: "secret-service", code: 4, message: "locked"))
        case .missing:
            throw PorterError(.storeUnusable, "the secret service has no default collection and Porter does not prompt to create one: make one (a keyring manager such as Seahorse does)")
        }
    }

    /// Stores `incoming` (the file's credentials, moving in) over the items there, each
    /// replacing the item for its space and user; a space's default becomes the file's
    /// where the file names one.
    func take(_ incoming: [StoredCredential], over existing: [StoredCredential]) throws {
        var all = existing.filter { e in !incoming.contains { $0.space == e.space && $0.user == e.user } } + incoming
        for chosen in incoming where chosen.isDefault {
            for i in all.indices where all[i].space == chosen.space && all[i].user != chosen.user { all[i].isDefault = false }
        }
        for credential in incoming {
            try didSet(all.first { $0.space == credential.space && $0.user == credential.user } ?? credential, all: all)
        }
    }

    static let lockedMessage = "the secret service's collection is locked and Porter does not prompt: unlock it (log in to the desktop session, or open it in a keyring manager), then start again"

    static func parse(_ item: SecretServiceConnection.Item) -> StoredCredential? {
        let a = item.attributes
        guard let proto = a["protocol"], let host = a["host"], let portText = a["port"], let port = Int(portText),
              let method = a["authtype"], let user = a["user"], let bytes = item.secret,
              let password = String(validating: bytes, as: UTF8.self) else { return nil }
        let space = ProtectionSpace(host: host, port: port, protocol: proto, realm: a["realm"],
                                    authenticationMethod: AuthenticationMethod(storedName: method),
                                    isProxy: a["proxy"] == "true")
        return StoredCredential(space: space, user: user, password: password, isDefault: a["default"] == "true")
    }

    /// The attributes naming `space`, and the ones it must not carry (a space without a
    /// realm is not any realm).
    static func attributes(of space: ProtectionSpace) -> (match: [String: String], absent: [String]) {
        var a = ["protocol": space.protocol, "host": space.host.lowercased(), "port": String(space.port),
                 "authtype": space.authenticationMethod.description, "proxy": space.isProxy ? "true" : "false"]
        if let realm = space.realm { a["realm"] = realm }
        return (a, space.realm == nil ? ["realm"] : [])
    }

    /// Strings the secret service cannot hold as attributes (C strings end at NUL).
    static func check(_ credential: StoredCredential) throws {
        let s = credential.space
        let fields = [s.protocol, s.host, s.realm ?? "", s.authenticationMethod.description, credential.user]
        if fields.contains(where: { $0.contains("\0") }) {
            throw PorterError(.storeUnusable, "a credential whose space or user holds a NUL byte cannot go to the secret service")
        }
    }

    func didSet(_ credential: StoredCredential, all: [StoredCredential]) throws {
        try SecretServiceCredentials.check(credential)
        let (space, absent) = SecretServiceCredentials.attributes(of: credential.space)
        var item = space
        item["user"] = credential.user
        do {
            // Stored first (replacing the item with the same attributes), then the copy
            // with the other default flag goes: another process never finds none.
            var stored = item
            stored["default"] = credential.isDefault ? "true" : "false"
            try connection.store(stored, label: "Porter: \(credential.user)@\(credential.space.host.lowercased())",
                                 secret: credential.password)
            var other = item
            other["default"] = credential.isDefault ? "false" : "true"
            try connection.delete(other, absent: absent)
            // The space's other users keep the default flag the store gives them.
            let defaultUser = all.first { $0.space == credential.space && $0.isDefault }?.user
            for found in try connection.search(space, loadSecrets: false) {
                guard let user = found.attributes["user"], user != credential.user,
                      credential.space.realm != nil || found.attributes["realm"] == nil else { continue }
                let isDefault = user == defaultUser
                guard (found.attributes["default"] == "true") != isDefault else { continue }
                var match = space
                match["user"] = user
                try connection.update(match, absent: absent, set: "default", to: isDefault ? "true" : "false")
            }
        } catch {
            throw error.porterError
        }
    }

    func didRemove(user: String, from space: ProtectionSpace, all: [StoredCredential]) throws {
        var (match, absent) = SecretServiceCredentials.attributes(of: space)
        match["user"] = user
        do {
            try connection.delete(match, absent: absent)
        } catch {
            throw error.porterError
        }
    }

    func didRemoveAll() throws {
        do {
            try connection.delete([:])
        } catch {
            throw error.porterError
        }
    }
}
