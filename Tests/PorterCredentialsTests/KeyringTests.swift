import Foundation
import Porter
import PorterTestSupport
import XCTest

/// Permanent credentials in a real Secret Service (gnome-keyring-daemon on a private
/// D-Bus bus), the file when there is none, and the choice between them.
final class KeyringTests: XCTestCase {
    let space = ProtectionSpace(host: "Example.test", port: 443, protocol: "https", realm: "r", authenticationMethod: .httpBasic)
    let noRealm = ProtectionSpace(host: "example.test", port: 443, protocol: "https", realm: nil, authenticationMethod: .httpBasic)
    let proxySpace = ProtectionSpace(host: "proxy.test", port: 3128, protocol: "http", realm: "squid",
                                     authenticationMethod: .httpBasic, isProxy: true)

    private func permanent(_ user: String, _ password: String) -> Credential {
        Credential(user: user, password: password, persistence: .permanent)
    }

    private func temporaryFolder() throws -> String {
        let dir = NSTemporaryDirectory() + "porter-keyring-test-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        return dir
    }

    private func mode(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    // MARK: - the Secret Service

    func testPermanentCredentialsGoToTheSecretServiceAndNotToTheFile() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        let store = CredentialStore(environment: keyring.environment)
        XCTAssertEqual(store.backend.kind, .secretService(busAddress: keyring.busAddress))
        XCTAssertEqual(store.backend.description, "secret service (org.freedesktop.secrets on \(keyring.busAddress))")
        XCTAssertNil(store.path)

        store.set(permanent("bob", "permanent-pw"), for: space)
        store.set(Credential(user: "ann", password: "session-pw", persistence: .forSession), for: space, asDefault: false)
        XCTAssertNil(store.lastPersistenceError)
        // secret-tool, another program of the user's, finds it in the keyring.
        XCTAssertEqual(try keyring.lookup(["protocol": "https", "host": "example.test", "port": "443", "realm": "r",
                                           "authtype": "basic", "user": "bob"]), "permanent-pw")
        let listed = try keyring.run("/usr/bin/secret-tool", ["search", "xdg:schema", "org.porter.Credential", "user", "bob"])
        XCTAssertTrue(listed.stdout.contains("label = Porter: bob@example.test"), listed.stdout)
        XCTAssertNil(try keyring.lookup(["user": "ann"]), "a session credential stays in memory")
        // Nothing on disk: no file, not even its folder.
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyring.dir + "/home/.local/share/porter"))

        // Another store, as another process would open one, reads it back as the default.
        let second = try CredentialStore(secretServiceBus: keyring.busAddress)
        XCTAssertEqual(Array(second.credentials(for: space).keys), ["bob"])
        XCTAssertEqual(second.defaultCredential(for: space)?.password, "permanent-pw")
        XCTAssertNil(second.defaultCredential(for: noRealm), "a space without a realm is another space")

        store.remove(permanent("bob", ""), for: space)
        XCTAssertNil(store.lastPersistenceError)
        XCTAssertNil(try keyring.lookup(["user": "bob"]))
        XCTAssertTrue(try CredentialStore(secretServiceBus: keyring.busAddress).allCredentials.isEmpty)
    }

    /// One series of changes, on the file and on the keyring: a store reopened after each
    /// step sees the same credentials, passwords and defaults on both.
    func testBothBackendsKeepTheSameCredentialsAndDefaults() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        let filePath = keyring.dir + "/file-backend/credentials.json"
        func snapshot(_ s: CredentialStore) -> [String] {
            s.allCredentials.flatMap { space, byUser in
                byUser.map { user, c in
                    "\(space) \(user)=\(c.password ?? "-")\(s.defaultCredential(for: space)?.user == user ? " default" : "")"
                }
            }.sorted()
        }
        func series(_ open: () throws -> CredentialStore) throws -> [[String]] {
            var seen: [[String]] = []
            let s = try open()
            s.set(permanent("ann", "a1"), for: space)
            s.set(permanent("bob", "b1"), for: space, asDefault: false)
            s.set(permanent("carol", "c-no-realm"), for: noRealm)
            s.set(permanent("carol", "c-realm"), for: space, asDefault: false)
            s.set(permanent("dave", "d1"), for: proxySpace)
            seen.append(snapshot(try open()))
            s.set(permanent("bob", "b1"), for: space)          // the default moves to bob
            seen.append(snapshot(try open()))
            s.set(permanent("bob", "b2"), for: space, asDefault: false)   // new password; bob stays the default
            s.remove(permanent("ann", ""), for: space)
            // A permanent credential replaced by a session one leaves the backend; the
            // same user in the space with a realm stays.
            s.set(Credential(user: "carol", password: "session", persistence: .forSession), for: noRealm)
            seen.append(snapshot(try open()))
            s.removeAll()
            seen.append(snapshot(try open()))
            XCTAssertNil(s.lastPersistenceError)
            return seen
        }
        let onFile = try series { try CredentialStore(path: filePath) }
        let onKeyring = try series { try CredentialStore(secretServiceBus: keyring.busAddress) }
        XCTAssertEqual(onKeyring, onFile)
        XCTAssertEqual(onFile.first, [
            "https://example.test:443 realm=- method=basic carol=c-no-realm default",
            "https://example.test:443 realm=r method=basic ann=a1 default",
            "https://example.test:443 realm=r method=basic bob=b1",
            "https://example.test:443 realm=r method=basic carol=c-realm",
            "proxy http://proxy.test:3128 realm=squid method=basic dave=d1 default",
        ])
        XCTAssertEqual(onFile[2], [
            "https://example.test:443 realm=r method=basic bob=b2 default",
            "https://example.test:443 realm=r method=basic carol=c-realm",
            "proxy http://proxy.test:3128 realm=squid method=basic dave=d1 default",
        ])
        XCTAssertEqual(onFile.last, [])
        XCTAssertNil(try keyring.lookup([:]), "removeAll leaves no Porter item")
    }

    /// Changes from many threads at once all reach the keyring.
    func testChangesFromManyThreads() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        let store = try CredentialStore(secretServiceBus: keyring.busAddress)
        let space = self.space
        DispatchQueue.concurrentPerform(iterations: 16) { i in
            store.set(Credential(user: "user\(i)", password: "pw\(i)", persistence: .permanent), for: space, asDefault: i == 7)
            _ = store.defaultCredential(for: space)
        }
        XCTAssertNil(store.lastPersistenceError)
        let reopened = try CredentialStore(secretServiceBus: keyring.busAddress)
        XCTAssertEqual(reopened.credentials(for: space).count, 16)
        XCTAssertEqual(reopened.credentials(for: space)["user11"]?.password, "pw11")
        XCTAssertEqual(reopened.defaultCredential(for: space)?.user, "user7")
    }

    func testTheCLIAsASecondProcessSeesAndRemovesThem() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        let store = try CredentialStore(secretServiceBus: keyring.busAddress)
        store.set(permanent("bob", "s3cret-pw"), for: space)
        store.set(permanent("dave", "d-pw"), for: proxySpace)

        let at = try keyring.run(porterBinary, ["credentials", "where"])
        XCTAssertEqual(at.status, 0, at.stderr)
        XCTAssertEqual(at.stdout, "secret service (org.freedesktop.secrets on \(keyring.busAddress))\n")
        let list = try keyring.run(porterBinary, ["credentials", "list"])
        XCTAssertEqual(list.status, 0, list.stderr)
        XCTAssertEqual(list.stdout, """
            https://example.test:443 realm="r" basic bob (default)
            proxy http://proxy.test:3128 realm="squid" basic dave (default)

            """)
        XCTAssertFalse((list.stdout + list.stderr).contains("s3cret-pw"), "never a password")
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyring.credentialFile))

        let removed = try keyring.run(porterBinary, ["credentials", "remove", "https://example.test", "--user", "bob"])
        XCTAssertEqual(removed.status, 0, removed.stderr)
        XCTAssertEqual(removed.stdout, "removed 1 credential\n")
        XCTAssertNil(try keyring.lookup(["user": "bob"]))
        XCTAssertEqual(try keyring.lookup(["user": "dave"]), "d-pw")
        XCTAssertEqual(Array(try CredentialStore(secretServiceBus: keyring.busAddress).allCredentials.keys), [proxySpace])
    }

    /// An earlier run's file moves into the keyring (its credentials win over older
    /// items), and is deleted only once every credential is in.
    func testAFileFromAnEarlierRunMovesIntoTheSecretService() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        try CredentialStore(secretServiceBus: keyring.busAddress).set(permanent("ann", "older"), for: space)
        let old = try CredentialStore(path: keyring.credentialFile)
        old.set(permanent("ann", "from-file"), for: space)
        old.set(permanent("carol", "c-pw"), for: noRealm)
        XCTAssertEqual(mode(keyring.credentialFile), 0o600)

        let at = try keyring.run(porterBinary, ["credentials", "where"])
        XCTAssertTrue(at.stdout.contains("note: \(keyring.credentialFile) holds credentials of an earlier run"), at.stdout)
        XCTAssertTrue(FileManager.default.fileExists(atPath: keyring.credentialFile), "'where' moves nothing")

        let store = CredentialStore(environment: keyring.environment)
        XCTAssertEqual(store.backend.kind, .secretService(busAddress: keyring.busAddress))
        XCTAssertEqual(store.backend.reason, "moved 2 credentials from \(keyring.credentialFile) into it")
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyring.credentialFile))
        XCTAssertEqual(try keyring.lookup(["user": "ann"]), "from-file")
        XCTAssertEqual(try keyring.lookup(["user": "carol"]), "c-pw")
        XCTAssertEqual(store.defaultCredential(for: space)?.password, "from-file")
        XCTAssertEqual(try CredentialStore(secretServiceBus: keyring.busAddress).credentials(for: space).count, 1)
    }

    /// A credential the keyring cannot take (a NUL byte in its user name: attributes are
    /// C strings) keeps the whole file where it is, and in use: nothing is lost.
    func testAFileThatCannotMoveStaysInUse() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        let old = try CredentialStore(path: keyring.credentialFile)
        old.set(permanent("ann", "a-pw"), for: space)
        old.set(permanent("nul\0user", "n-pw"), for: noRealm)
        let store = CredentialStore(environment: keyring.environment)
        XCTAssertEqual(store.backend.kind, .file(path: keyring.credentialFile))
        XCTAssertTrue(store.backend.reason.hasPrefix("the credentials of \(keyring.credentialFile) could not be moved"),
                      store.backend.reason)
        XCTAssertTrue(store.backend.reason.hasSuffix("the file stays in use"), store.backend.reason)
        XCTAssertEqual(store.credentials(for: noRealm)["nul\0user"]?.password, "n-pw")
        XCTAssertEqual(store.credentials(for: space)["ann"]?.password, "a-pw")
        XCTAssertEqual(try CredentialStore(path: keyring.credentialFile).allCredentials.count, 2)
    }

    /// A file others may read is not trusted enough to move: it is left as it is, and
    /// the keyring is used.
    func testAFileOthersMayReadIsLeftAlone() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        try CredentialStore(path: keyring.credentialFile).set(permanent("ann", "from-file"), for: space)
        chmod(keyring.credentialFile, 0o644)
        let store = CredentialStore(environment: keyring.environment)
        XCTAssertEqual(store.backend.kind, .secretService(busAddress: keyring.busAddress))
        XCTAssertTrue(store.backend.reason.hasPrefix("\(keyring.credentialFile) was left alone: refusing"), store.backend.reason)
        XCTAssertTrue(FileManager.default.fileExists(atPath: keyring.credentialFile))
        XCTAssertNil(try keyring.lookup(["user": "ann"]))
        XCTAssertTrue(store.allCredentials.isEmpty)
    }

    /// A locked collection would need a prompt: Porter does not prompt, says so, loses
    /// nothing (the file it would have moved stays) and does not wait.
    func testALockedCollectionIsNeverWaitedFor() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        // A long timeout: a prompt let through would be waited for that long (a wait, not a
        // slow machine, is what the bound below tells apart: it is a fifth of it).
        let opened = try CredentialStore(secretServiceBus: keyring.busAddress, timeout: .seconds(600))
        opened.set(permanent("bob", "b-pw"), for: space)
        let file = try CredentialStore(path: keyring.credentialFile)
        file.set(permanent("carol", "c-pw"), for: noRealm)
        let fileBefore = try Data(contentsOf: URL(fileURLWithPath: keyring.credentialFile))
        try keyring.lockCollection()

        // The fixture's prompter never shows: a prompt let through would wait for it.
        let start = Date()
        opened.set(permanent("eve", "e-pw"), for: space)
        XCTAssertLessThan(Date().timeIntervalSince(start), 120, "no prompt, no wait for one (the timeout is 600 s)")
        XCTAssertEqual(opened.lastPersistenceError?.code, .storeUnusable)
        XCTAssertTrue(opened.lastPersistenceError?.message.contains("prompt") == true, "\(String(describing: opened.lastPersistenceError))")
        XCTAssertEqual(opened.defaultCredential(for: space)?.user, "eve", "the store still holds it in memory")

        XCTAssertThrowsError(try CredentialStore(secretServiceBus: keyring.busAddress)) { error in
            XCTAssertEqual((error as? PorterError)?.code, .storeUnusable)
            XCTAssertTrue((error as? PorterError)?.message.contains("locked") == true, "\(error)")
        }
        let automatic = CredentialStore(environment: keyring.environment)
        XCTAssertEqual(automatic.backend.kind, .memory)
        XCTAssertTrue(automatic.backend.reason.contains("locked and Porter does not prompt"), automatic.backend.reason)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: keyring.credentialFile)), fileBefore, "the file is not touched")

        let at = try keyring.run(porterBinary, ["credentials", "where"])
        XCTAssertTrue(at.stdout.hasPrefix("memory only: the secret service's collection is locked"), at.stdout)
        let list = try keyring.run(porterBinary, ["credentials", "list"])
        XCTAssertEqual(list.status, 101, "a store that cannot be used")
        XCTAssertTrue(list.stderr.contains("locked"), list.stderr)

        XCTAssertTrue(CredentialStore.selectBackend(environment: keyring.environment).reason.contains("locked"),
                      "the service is still there, still locked")
    }

    /// Items of Porter's schema that another program wrote badly are skipped, not trusted.
    func testMalformedItemsAreSkipped() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        let schema = ["xdg:schema": "org.porter.Credential", "protocol": "https", "authtype": "basic", "proxy": "false"]
        try keyring.storeWithSecretTool(label: "bad port", schema.merging(["host": "a.test", "port": "443x", "user": "u"]) { $1 },
                                        secret: "pw1")
        try keyring.storeWithSecretTool(label: "no user", schema.merging(["host": "b.test", "port": "443"]) { $1 }, secret: "pw2")
        try keyring.storeWithSecretTool(label: "fine", schema.merging(["host": "c.test", "port": "443", "user": "v"]) { $1 },
                                        secret: "pw3")
        let store = try CredentialStore(secretServiceBus: keyring.busAddress)
        XCTAssertEqual(store.allCredentials.keys.map(\.host), ["c.test"])
        XCTAssertEqual(store.allCredentials.values.first?["v"]?.password, "pw3")
    }

    // MARK: - the choice

    /// With no DBUS_SESSION_BUS_ADDRESS, the user's bus in XDG_RUNTIME_DIR is used, as
    /// GDBus does (systemd's user bus lives there).
    func testTheBusInTheRuntimeDirectoryIsFound() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        var environment = keyring.environment
        environment["DBUS_SESSION_BUS_ADDRESS"] = nil
        environment["XDG_RUNTIME_DIR"] = keyring.dir   // where the fixture's bus socket is
        let store = CredentialStore(environment: environment)
        XCTAssertEqual(store.backend.kind, .secretService(busAddress: keyring.busAddress))
        XCTAssertTrue(store.backend.reason.contains("XDG_RUNTIME_DIR"), store.backend.reason)
        store.set(permanent("rita", "runtime-pw"), for: space)
        XCTAssertEqual(try keyring.lookup(["user": "rita"]), "runtime-pw")
        store.remove(permanent("rita", ""), for: space)
        // A link named bus is not followed.
        let links = try temporaryFolder()
        try FileManager.default.createSymbolicLink(atPath: links + "/bus", withDestinationPath: keyring.dir + "/bus")
        environment["XDG_RUNTIME_DIR"] = links
        XCTAssertEqual(CredentialStore.selectBackend(environment: environment).kind,
                       .file(path: keyring.dir + "/home/.local/share/porter/credentials.json"))
    }

    func testWithoutASessionBusTheFileIsUsedAndSaysWhy() throws {
        let home = try temporaryFolder()
        let file = home + "/.local/share/porter/credentials.json"
        let store = CredentialStore(environment: ["HOME": home])
        XCTAssertEqual(store.backend, CredentialBackend(kind: .file(path: file), reason: "no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"))
        XCTAssertEqual(store.path, file)
        store.set(permanent("bob", "file-pw"), for: space)
        XCTAssertEqual(mode(file), 0o600)
        XCTAssertEqual(try CredentialStore(path: file).defaultCredential(for: space)?.password, "file-pw")

        var env: [String: String?] = ["HOME": home, "DBUS_SESSION_BUS_ADDRESS": nil, "XDG_DATA_HOME": nil,
                                      "PORTER_CREDENTIAL_STORE": nil]
        let at = try runProcess(porterBinary, ["credentials", "where"], environment: env)
        XCTAssertEqual(at.stdout, "file \(file) (0600): no session bus (DBUS_SESSION_BUS_ADDRESS is not set)\n")

        // A bus address where nothing listens: the file, at once.
        let dead = "unix:path=\(home)/no-bus-here"
        let start = Date()
        let backend = CredentialStore.selectBackend(environment: ["HOME": home, "DBUS_SESSION_BUS_ADDRESS": dead], timeout: .seconds(600))
        XCTAssertEqual(backend.kind, .file(path: file))
        XCTAssertTrue(backend.reason.hasPrefix("the session bus \(dead) cannot be reached"), backend.reason)
        XCTAssertLessThan(Date().timeIntervalSince(start), 120, "not the 600 s timeout")
        env["DBUS_SESSION_BUS_ADDRESS"] = dead
        let list = try runProcess(porterBinary, ["credentials", "list"], environment: env)
        XCTAssertEqual(list.stdout, "https://example.test:443 realm=\"r\" basic bob (default)\n")
    }

    func testABusWithoutASecretServiceMeansTheFileWithoutWaiting() throws {
        let bus = try SecretServiceFixture(.none)
        let start = Date()
        let store = CredentialStore(environment: bus.environment, timeout: .seconds(600))
        XCTAssertEqual(store.backend, CredentialBackend(kind: .file(path: bus.credentialFile),
                                                        reason: "no org.freedesktop.secrets on the session bus \(bus.busAddress)"))
        XCTAssertLessThan(Date().timeIntervalSince(start), 120, "not the 600 s timeout")
        let at = try bus.run(porterBinary, ["credentials", "where"])
        XCTAssertEqual(at.stdout, "file \(bus.credentialFile) (0600): no org.freedesktop.secrets on the session bus \(bus.busAddress)\n")
        XCTAssertThrowsError(try CredentialStore(secretServiceBus: bus.busAddress)) {
            XCTAssertEqual(($0 as? PorterError)?.code, .storeUnusable)
        }
    }

    func testAServiceThatNeverAnswersIsGivenUpAfterTheTimeout() throws {
        let bus = try SecretServiceFixture(.neverAnswers)
        var start = Date()
        let backend = CredentialStore.selectBackend(environment: bus.environment, timeout: .milliseconds(800))
        let waited = Date().timeIntervalSince(start)
        XCTAssertEqual(backend.kind, .file(path: bus.credentialFile))
        XCTAssertTrue(backend.reason.contains("did not answer in time"), backend.reason)
        XCTAssertGreaterThan(waited, 0.7, "it did wait for the activation")
        XCTAssertLessThan(waited, 20, "and gave up: the service never answers")
        start = Date()
        XCTAssertThrowsError(try CredentialStore(secretServiceBus: bus.busAddress, timeout: .milliseconds(500))) {
            XCTAssertEqual(($0 as? PorterError)?.code, .timedOut)
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 20, "and gave up: the service never answers")
    }

    func testTheBackendCanBeForced() throws {
        let keyring = try SecretServiceFixture(.gnomeKeyring(password: "test-password"))
        var env = keyring.environment
        env["PORTER_CREDENTIAL_STORE"] = "file"
        XCTAssertEqual(CredentialStore.selectBackend(environment: env),
                       CredentialBackend(kind: .file(path: keyring.credentialFile), reason: "PORTER_CREDENTIAL_STORE=file"))
        env["PORTER_CREDENTIAL_STORE"] = "secret-service"
        XCTAssertEqual(CredentialStore.selectBackend(environment: env),
                       CredentialBackend(kind: .secretService(busAddress: keyring.busAddress), reason: "PORTER_CREDENTIAL_STORE=secret-service"))
        env["DBUS_SESSION_BUS_ADDRESS"] = nil
        let demanded = CredentialStore(environment: env)
        XCTAssertEqual(demanded.backend, CredentialBackend(kind: .memory,
            reason: "PORTER_CREDENTIAL_STORE=secret-service, but no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"))
        demanded.set(permanent("bob", "pw"), for: space)
        XCTAssertEqual(demanded.defaultCredential(for: space)?.password, "pw")
        XCTAssertFalse(FileManager.default.fileExists(atPath: keyring.credentialFile), "never the file when the keyring was demanded")
    }
}
