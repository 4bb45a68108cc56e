import Foundation

/// A private D-Bus session bus (dbus-daemon with a config of its own, on a socket in a
/// temporary folder) and, on it, what the test asks for: GNOME Keyring's secret service
/// unlocked with a test password, nothing, or a secret service whose activation never
/// finishes. HOME, XDG_DATA_HOME and XDG_RUNTIME_DIR point into the temporary folder, so
/// the user's own keyring is never touched. Stops what it started, by process id.
public final class SecretServiceFixture: @unchecked Sendable {
    public enum Service {
        /// gnome-keyring-daemon --unlock --components=secrets, fed `password` on stdin;
        /// its prompters are activatable but never show.
        case gnomeKeyring(password: String)
        /// A bus on which org.freedesktop.secrets is neither running nor activatable.
        case none
        /// org.freedesktop.secrets is activatable, but what the bus starts never claims it.
        case neverAnswers
    }

    public let dir: String
    public let busAddress: String
    /// The environment of a process of this "user": the private bus, HOME and the XDG
    /// folders in `dir`, and no proxy or credential-store override.
    public let environment: [String: String]
    /// Where the file backend of that user lives.
    public var credentialFile: String { dir + "/home/.local/share/porter/credentials.json" }
    private var busPID: pid_t = 0
    private var keyringPID: pid_t = 0

    static let tools = ["/usr/bin/dbus-daemon", "/usr/bin/gnome-keyring-daemon", "/usr/bin/secret-tool", "/usr/bin/gdbus"]

    public init(_ service: Service) throws {
        try SecretServiceFixture.installMissingTools()
        let template = NSTemporaryDirectory() + "porter-keyring-XXXXXX"
        var bytes = Array(template.utf8CString)
        guard let made = mkdtemp(&bytes) else { throw SpawnError(message: "mkdtemp failed") }
        dir = String(cString: made)
        let fm = FileManager.default
        for sub in ["home", "run", "services"] {
            try fm.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true,
                                   attributes: [.posixPermissions: 0o700])
        }
        busAddress = "unix:path=\(dir)/bus"
        var env = ProcessInfo.processInfo.environment
        for name in proxyVariables + ["PORTER_CREDENTIAL_STORE", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME",
                                      "SECRET_SERVICE_BUS_NAME", "DISPLAY", "WAYLAND_DISPLAY"] {
            env[name] = nil
        }
        env["HOME"] = dir + "/home"
        env["XDG_RUNTIME_DIR"] = dir + "/run"
        env["DBUS_SESSION_BUS_ADDRESS"] = busAddress
        environment = env

        // Names the bus starts on demand, with a program that records its pid (to be
        // stopped after) and sleeps instead of claiming the name: a secret service that
        // never answers, or, beside GNOME Keyring, a prompter that never shows (so a
        // prompt, if one were let through, would wait).
        let stuck: [String]
        switch service {
        case .neverAnswers: stuck = ["org.freedesktop.secrets"]
        case .gnomeKeyring: stuck = ["org.gnome.keyring.SystemPrompter", "org.gnome.keyring.PrivatePrompter"]
        case .none: stuck = []
        }
        for name in stuck {
            try """
                [D-BUS Service]
                Name=\(name)
                Exec=/bin/sh -c 'echo $$ > \(dir)/stuck-\(name).pid; exec sleep 120'

                """.write(toFile: dir + "/services/\(name).service", atomically: true, encoding: .utf8)
        }
        try """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>\(busAddress)</listen>
              <servicedir>\(dir)/services</servicedir>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>

            """.write(toFile: dir + "/bus.conf", atomically: true, encoding: .utf8)
        do {
            busPID = try SecretServiceFixture.spawn("/usr/bin/dbus-daemon", ["--config-file=\(dir)/bus.conf", "--nofork"],
                                                    environment: env)
            guard eventually(60, { FileManager.default.fileExists(atPath: dir + "/bus") && self.busAnswers() }) else {
                throw SpawnError(message: "the private dbus-daemon did not start")
            }
            if case .gnomeKeyring(let password) = service {
                keyringPID = try SecretServiceFixture.spawn(
                    "/usr/bin/gnome-keyring-daemon", ["--foreground", "--unlock", "--components=secrets"],
                    environment: env, input: password)
                guard eventually(60, { self.nameHasOwner("org.freedesktop.secrets") }) else {
                    throw SpawnError(message: "gnome-keyring-daemon did not claim org.freedesktop.secrets")
                }
            }
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    public func stop() {
        if keyringPID > 0 { stopDaemon(keyringPID, signal: SIGTERM); keyringPID = 0 }
        for file in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] where file.hasPrefix("stuck-") {
            if let text = try? String(contentsOfFile: dir + "/" + file, encoding: .utf8),
               let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)), pid > 0 {
                kill(pid, SIGKILL)   // the bus's child, not ours to reap
            }
            try? FileManager.default.removeItem(atPath: dir + "/" + file)
        }
        if busPID > 0 { stopDaemon(busPID, signal: SIGTERM); busPID = 0 }
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// `program` run as this fixture's user (its environment, with `overrides`).
    public func run(_ program: String, _ arguments: [String], overrides: [String: String?] = [:], input: String? = nil) throws -> ProcessResult {
        var env: [String: String?] = [:]
        for (k, v) in environment { env[k] = v }
        for k in ProcessInfo.processInfo.environment.keys where environment[k] == nil { env[k] = .some(nil) }
        for (k, v) in overrides { env[k] = v }
        return try runProcess(program, arguments, environment: env, input: input)
    }

    /// `secret-tool lookup` of `attributes` on this bus: the secret, or nil when none
    /// matches (proof that a password really is in the keyring).
    public func lookup(_ attributes: [String: String]) throws -> String? {
        let args = ["lookup", "xdg:schema", "org.porter.Credential"] + attributes.sorted { $0.key < $1.key }.flatMap { [$0.key, $0.value] }
        let r = try run("/usr/bin/secret-tool", args)
        return r.status == 0 ? r.stdout : nil
    }

    /// Stores an item with `secret-tool`, as another program of the user could.
    public func storeWithSecretTool(label: String, _ attributes: [String: String], secret: String) throws {
        let args = ["store", "--label=\(label)"] + attributes.sorted { $0.key < $1.key }.flatMap { [$0.key, $0.value] }
        let r = try run("/usr/bin/secret-tool", args, input: secret)
        guard r.status == 0 else { throw SpawnError(message: "secret-tool store failed: \(r.stderr)") }
    }

    /// Locks the login collection through the service's own Lock method (no prompt).
    public func lockCollection() throws {
        let r = try run("/usr/bin/gdbus", ["call", "--session", "--dest", "org.freedesktop.secrets",
                                           "--object-path", "/org/freedesktop/secrets",
                                           "--method", "org.freedesktop.Secret.Service.Lock",
                                           "[objectpath '/org/freedesktop/secrets/collection/login']"])
        guard r.status == 0 else { throw SpawnError(message: "cannot lock the collection: \(r.stderr)") }
    }

    private func busAnswers() -> Bool {
        (try? run("/usr/bin/gdbus", ["call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                                     "/org/freedesktop/DBus", "--method", "org.freedesktop.DBus.GetId"]))?.status == 0
    }

    private func nameHasOwner(_ name: String) -> Bool {
        let r = try? run("/usr/bin/gdbus", ["call", "--session", "--dest", "org.freedesktop.DBus", "--object-path",
                                            "/org/freedesktop/DBus", "--method", "org.freedesktop.DBus.NameHasOwner", name])
        return r?.stdout.contains("true") == true
    }

    /// Runs scripts/install-deps.sh when a tool the fixture needs is missing.
    static func installMissingTools() throws {
        guard tools.contains(where: { !FileManager.default.isExecutableFile(atPath: $0) }) else { return }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/install-deps.sh").path
        _ = try runChecked("/bin/bash", [script])
    }

    /// posix_spawn with `environment`, stdout and stderr on /dev/null, and stdin from
    /// `input` (a pipe closed after it) or /dev/null.
    static func spawn(_ program: String, _ args: [String], environment: [String: String], input: String? = nil) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var fds: [Int32] = [-1, -1]
        if input != nil {
            guard pipe(&fds) == 0 else { throw SpawnError(message: "pipe failed") }
            posix_spawn_file_actions_adddup2(&actions, fds[0], 0)
            posix_spawn_file_actions_addclose(&actions, fds[0])
            posix_spawn_file_actions_addclose(&actions, fds[1])
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = ([program] + args).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let rc = withDefaultSignals { posix_spawn(&pid, program, &actions, &$0, argv, envp) }
        if let input {
            signal(SIGPIPE, SIG_IGN)   // a daemon that exits before reading must not take the tests down
            close(fds[0])
            _ = input.utf8CString.withUnsafeBufferPointer { write(fds[1], $0.baseAddress, $0.count - 1) }
            close(fds[1])
        }
        guard rc == 0 else { throw SpawnError(message: "cannot start \(program): \(String(cString: strerror(rc)))") }
        return pid
    }
}

