import ArgumentParser
import Foundation
import Porter

/// `porter credentials`: where the permanent credentials of `.default` sessions are kept
/// (the Secret Service or the 0600 file) and why, and the ones kept there.
struct Credentials: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "credentials",
        abstract: "Where permanent credentials are kept ('where'), the ones kept ('list'), and 'remove'.",
        discussion: """
            porter credentials where                   the backend and why it was chosen
            porter credentials list                    every permanent credential (never a password)
            porter credentials remove URL [--user U] [--realm R]
                                                       remove those of URL's scheme, host and port
            The Secret Service (org.freedesktop.secrets) is used when DBUS_SESSION_BUS_ADDRESS names a \
            bus that has it, else $XDG_DATA_HOME/porter/credentials.json (~/.local/share/porter/credentials.json, \
            mode 0600). PORTER_CREDENTIAL_STORE=file or =secret-service forces one. Opening the store \
            ('list', 'remove') moves the file's credentials into the Secret Service when that is used.
            """)

    @Argument(help: "where | list | remove, then for remove the URL.")
    var words: [String] = []

    @Option(name: .long, help: "remove: only this user's credential.")
    var user: String?

    @Option(name: .long, help: "remove: only the credentials of this realm.")
    var realm: String?

    func validate() throws {
        switch words.first {
        case "where", "list":
            guard words.count == 1 else { throw ValidationError("porter credentials \(words[0]) takes no other word") }
        case "remove":
            guard words.count == 2 else { throw ValidationError("porter credentials remove URL [--user U] [--realm R]") }
        default:
            throw ValidationError("use 'porter credentials where', 'list' or 'remove URL'")
        }
    }

    func run() throws {
        let environment = ProcessInfo.processInfo.environment
        switch words[0] {
        case "where":
            let backend = CredentialStore.selectBackend(environment: environment)
            print(backend.description)
            let file = CredentialStore.defaultPath(environment: environment)
            if case .secretService = backend.kind, FileManager.default.fileExists(atPath: file) {
                print("note: \(file) holds credentials of an earlier run: they move into the secret service when the store is next opened ('porter credentials list' does)")
            }
        case "list":
            let store = try open(environment)
            for line in Credentials.lines(store.allCredentials, defaults: store) { print(line) }
        default:
            let store = try open(environment)
            guard let url = URL(string: words[1]), let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else {
                throw ValidationError("not a URL with a host: \(words[1])")
            }
            // The scheme's default port is what its handler declares: a plugin's scheme
            // needs the plugins loaded to be known.
            Porter.bootstrap(loadPlugins: !PluginOptions.builtInSchemes.contains(scheme))
            let port = url.port ?? HandlerRegistry.shared.defaultPort(forScheme: scheme) ?? 0
            var removed = 0
            for (space, byUser) in store.allCredentials
            where space.protocol.lowercased() == scheme && space.host.lowercased() == host && space.port == port
                && (realm == nil || space.realm == realm) {
                for (name, credential) in byUser where user == nil || name == user {
                    store.remove(credential, for: space)
                    if let error = store.lastPersistenceError {
                        note("porter: \(error.message)")
                        throw ExitCode(PorterExit.store.rawValue)
                    }
                    removed += 1
                }
            }
            print("removed \(removed) credential\(removed == 1 ? "" : "s")")
        }
    }

    /// The shared store, opened; exit 13 when its backend cannot be used.
    private func open(_ environment: [String: String]) throws -> CredentialStore {
        let store = CredentialStore(environment: environment)
        let backend = store.backend
        if case .memory = backend.kind {
            note("porter: the credential store cannot be used: \(backend.reason)")
            throw ExitCode(PorterExit.store.rawValue)
        }
        return store
    }

    /// One line per credential, sorted: "https://host:443 realm=\"r\" basic bob (default)".
    static func lines(_ all: [ProtectionSpace: [String: Credential]], defaults store: CredentialStore) -> [String] {
        all.flatMap { space, byUser in
            let isDefault = store.defaultCredential(for: space)?.user
            return byUser.keys.map { user in
                var line = space.isProxy ? "proxy " : ""
                line += "\(space.protocol)://\(space.host):\(space.port)"
                if let realm = space.realm { line += " realm=\"\(realm)\"" }
                line += " \(space.authenticationMethod) \(user)"
                if user == isDefault { line += " (default)" }
                return line
            }
        }.sorted()
    }
}
