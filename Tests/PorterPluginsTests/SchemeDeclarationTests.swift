import Foundation
import Porter
import PorterPlugins
import PorterTestSupport
import XCTest

/// What a plugin declares about its schemes (ABI 1.4 `porter_scheme.default_port` and
/// PORTER_SCHEME_CARRIES_COOKIES) is what the host acts on — for credentials' protection
/// spaces and for cookies — in process and (`IsolatedSchemeDeclarationTests`) across the
/// worker boundary; a plugin built for 1.3 still loads and declares neither.
class SchemeDeclarationTests: XCTestCase {
    class var mode: PluginMode { .inProcess }
    /// Each mode's scheme names differ: an in-process plugin stays mapped for the process.
    class var prefix: String { "dp" }
    nonisolated(unsafe) static var registries: [PluginMode: HandlerRegistry] = [:]
    static var registry: HandlerRegistry { registries[mode] ?? HandlerRegistry() }
    static var declaring: String { prefix + "decl" }   // port 4711, cookies
    static var plain: String { prefix + "plain" }       // neither
    static var old: String { prefix + "old" }           // ABI 1.3: says 4712 and cookies, host reads neither

    override class func setUp() {
        super.setUp()
        guard registries[mode] == nil else { return }
        do {
            let folder = try PluginFixture.folder()
            let registry = HandlerRegistry()
            Porter.bootstrap(registry: registry, loadPlugins: false)
            var isolation = PluginIsolation.default
            isolation.defaultMode = mode
            let loader = PluginLoader(registry: registry, isolation: isolation)
            let cookies = "PORTER_SCHEME_CARRIES_COOKIES"
            for (scheme, defines) in [(declaring, ["DEFAULT_PORT=4711", "SCHEME_FLAGS=\(cookies)"]),
                                      (plain, []),
                                      (old, ["ABI_MINOR=3", "DEFAULT_PORT=4712", "SCHEME_FLAGS=\(cookies)"])] {
                let path = try PluginFixture.build("\(scheme).so", in: folder, defines: ["SCHEME=\"\(scheme)\""] + defines)
                let verdict = loader.load(path: path)
                if verdict.plugin?.mode != mode { print("\(scheme) did not load \(mode): \(verdict)") }
            }
            registries[mode] = registry
        } catch {
            print("fixture failed: \(error)")
        }
    }

    func session(_ delegate: (any SessionDelegate)? = nil) -> Session {
        var config = SessionConfiguration.ephemeral
        config.registry = Self.registry
        return Session(configuration: config, delegate: delegate)
    }

    func url(_ scheme: String, _ path: String) -> URL { URL(string: "\(scheme)://h\(path)")! }

    func testTheRegistryAnswersWhatEachPluginDeclared() {
        let registry = Self.registry
        XCTAssertEqual(registry.defaultPort(forScheme: Self.declaring), 4711)
        XCTAssertTrue(registry.carriesCookies(forScheme: Self.declaring))
        XCTAssertNil(registry.defaultPort(forScheme: Self.plain))
        XCTAssertFalse(registry.carriesCookies(forScheme: Self.plain))
        XCTAssertTrue(registry.hasHandler(forScheme: Self.old), "an ABI 1.3 plugin still loads")
        XCTAssertNil(registry.defaultPort(forScheme: Self.old), "a 1.3 plugin's padding is not read")
        XCTAssertFalse(registry.carriesCookies(forScheme: Self.old), "nor its 1.4 flag")
        // The built-ins declare theirs the same way.
        XCTAssertEqual(registry.defaultPort(forScheme: "https"), 443)
        XCTAssertTrue(registry.carriesCookies(forScheme: "http"))
        XCTAssertNil(registry.defaultPort(forScheme: "file"))
        XCTAssertFalse(registry.carriesCookies(forScheme: "file"))
    }

    func testAChallengeForAURLWithoutAPortHasTheDeclaredPort() async throws {
        let spaces = Locked<[ProtectionSpace]>([])
        let delegate = Answers { challenge in
            spaces.withLock { $0.append(challenge.protectionSpace) }
            return .useCredential(Credential(user: "ann", password: "sesame"))
        }
        for scheme in [Self.declaring, Self.old] {
            let (data, _) = try await session(delegate).data(from: url(scheme, "/auth"))
            XCTAssertEqual(String(decoding: data, as: UTF8.self), "user=ann")
        }
        XCTAssertEqual(spaces.current.map(\.port), [4711, 0], "\(spaces.current)")
        XCTAssertEqual(spaces.current.first?.protocol, Self.declaring)
        XCTAssertTrue(spaces.current.first?.isOrigin(of: url(Self.declaring, ":4711/auth"), registry: Self.registry) == true)
    }

    /// A credential saved for the scheme's declared port answers a URL that names no
    /// port (before 1.4 the space of such a URL had port 0 and the saved one never matched).
    func testASavedCredentialForTheDeclaredPortAnswers() async throws {
        let s = session()
        let space = ProtectionSpace(host: "h", port: 4711, protocol: Self.declaring, realm: "ptest realm",
                                    authenticationMethod: .password)
        let store = try XCTUnwrap(s.configuration.credentialStore)
        store.set(Credential(user: "kim", password: "sesame", persistence: .forSession), for: space)
        let (data, _) = try await s.data(from: url(Self.declaring, "/auth"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "user=kim")
    }

    /// A scheme that declares cookies sends and stores them; one that does not (or a 1.3
    /// plugin that sets the bit) gets none and stores none.
    func testCookiesFollowTheDeclaration() async throws {
        for (scheme, carries) in [(Self.declaring, true), (Self.plain, false), (Self.old, false)] {
            let s = session()
            let store = try XCTUnwrap(s.configuration.cookieStore)
            let first = try await s.data(from: url(scheme, "/cookie")).0
            XCTAssertEqual(String(decoding: first, as: UTF8.self), "cookie=-", scheme)
            XCTAssertEqual(store.cookieHeader(for: url(scheme, "/cookie"), mainDocumentURL: nil) != nil, carries,
                           "\(scheme): Set-Cookie stored only when declared")
            // A cookie the store holds for the URL reaches the plugin only when declared.
            store.storeCookies(fromHeaders: ["app=given; Path=/"], for: url(scheme, "/"), mainDocumentURL: nil)
            let second = try await s.data(from: url(scheme, "/cookie")).0
            let text = String(decoding: second, as: UTF8.self)
            if carries {
                XCTAssertEqual(text, "cookie=plugin=baked; app=given", scheme)
            } else {
                XCTAssertEqual(text, "cookie=-", scheme)
            }
        }
    }
}

/// The same with each plugin in a worker: the declarations cross in the worker's
/// description of the plugin.
final class IsolatedSchemeDeclarationTests: SchemeDeclarationTests {
    override class var mode: PluginMode { .isolated }
    override class var prefix: String { "di" }
    override func testTheRegistryAnswersWhatEachPluginDeclared() { super.testTheRegistryAnswersWhatEachPluginDeclared() }
    override func testAChallengeForAURLWithoutAPortHasTheDeclaredPort() async throws {
        try await super.testAChallengeForAURLWithoutAPortHasTheDeclaredPort()
    }
    override func testASavedCredentialForTheDeclaredPortAnswers() async throws {
        try await super.testASavedCredentialForTheDeclaredPortAnswers()
    }
    override func testCookiesFollowTheDeclaration() async throws { try await super.testCookiesFollowTheDeclaration() }
}
