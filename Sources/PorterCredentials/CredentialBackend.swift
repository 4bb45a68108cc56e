import Foundation
import PorterCore

/// Where a `CredentialStore` keeps permanent credentials, and why there.
///
/// The store `.default` sessions share chooses at run time (`CredentialStore.shared`):
/// the Secret Service (org.freedesktop.secrets: GNOME Keyring, KeePassXC, KWallet's
/// bridge) when `DBUS_SESSION_BUS_ADDRESS` names a bus on which it runs or can be
/// started, else the 0600 file. `PORTER_CREDENTIAL_STORE=file` or `=secret-service`
/// forces one. Credentials of `.forSession` persistence always stay in memory.
public struct CredentialBackend: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Nothing is written: permanent credentials last as long as the store.
        case memory
        /// A JSON file readable by its owner only.
        case file(path: String)
        /// The Secret Service on the bus at this address, through libsecret.
        case secretService(busAddress: String)
    }
    public var kind: Kind
    /// Why this backend ("no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"); empty
    /// when the program named it.
    public var reason: String

    public init(kind: Kind, reason: String = "") {
        self.kind = kind
        self.reason = reason
    }

    /// What `porter credentials where` prints: the backend, then the reason.
    public var description: String {
        let what: String
        switch kind {
        case .memory: what = "memory only"
        case .file(let path): what = "file \(path) (0600)"
        case .secretService(let address): what = "secret service (org.freedesktop.secrets on \(address))"
        }
        return reason.isEmpty ? what : "\(what): \(reason)"
    }

    /// The file's path, when that is the backend.
    public var filePath: String? {
        if case .file(let path) = kind { return path }
        return nil
    }
}

/// The run-time choice between the Secret Service and the file.
enum BackendChoice {
    case secretService(SecretServiceConnection, reason: String)
    case file(path: String, reason: String)
    case unusable(String)

    /// The environment variable that forces a backend.
    static let override = "PORTER_CREDENTIAL_STORE"

    /// `$XDG_RUNTIME_DIR/bus` when it is a socket of this user's (not followed through a
    /// link), else nil.
    static func runtimeDirectoryBus(_ environment: [String: String]) -> String? {
        guard let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") else { return nil }
        let path = (runtime.hasSuffix("/") ? String(runtime.dropLast()) : runtime) + "/bus"
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFSOCK, st.st_uid == getuid() else { return nil }
        return path
    }

    static func choose(environment: [String: String], filePath: String, timeout: Duration) -> BackendChoice {
        let forced = environment[override] ?? ""
        if forced == "file" { return .file(path: filePath, reason: "\(override)=file") }
        let demanded = forced == "secret-service"
        func otherwise(_ reason: String) -> BackendChoice {
            demanded ? .unusable("\(override)=secret-service, but \(reason)") : .file(path: filePath, reason: reason)
        }
        var address = environment["DBUS_SESSION_BUS_ADDRESS"] ?? ""
        var found = ""
        if address.isEmpty, let bus = runtimeDirectoryBus(environment) {
            // GDBus's own fallback: the user's bus in XDG_RUNTIME_DIR (systemd's user bus).
            address = "unix:path=" + bus
            found = "the session bus in XDG_RUNTIME_DIR (DBUS_SESSION_BUS_ADDRESS is not set)"
        }
        guard !address.isEmpty else {
            return otherwise("no session bus (DBUS_SESSION_BUS_ADDRESS is not set)")
        }
        switch SecretServiceConnection.open(busAddress: address, timeout: timeout) {
        case .success(let connection):
            return .secretService(connection, reason: demanded ? "\(override)=secret-service" : found)
        case .failure(let failure):
            switch failure.kind {
            case .noBus: return otherwise("the session bus \(address) cannot be reached (\(failure.message))")
            case .noLibrary: return otherwise("no libsecret: \(failure.message)")
            case .noService: return otherwise("no org.freedesktop.secrets on the session bus \(address)")
            case .timedOut: return otherwise("org.freedesktop.secrets on \(address) did not answer in time (\(failure.message))")
            case .locked, .failed: return otherwise("org.freedesktop.secrets on \(address) failed: \(failure.message)")
            }
        }
    }
}
