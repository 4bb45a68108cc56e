import Foundation
import PorterCore
import GRDB
import PorterStorage
import PorterDatabase

/// Cookies that survive the process: the rules and lookups of `MemoryCookieStore`, with
/// every persistent cookie written through to SQLite (WAL) as it changes. Session
/// cookies are never written. The file is mode 0600 in a folder of mode 0700; several
/// processes may share it (SQLite's locking), each reading what is there when it opens
/// the store.
public final class PersistentCookieStore: CookieStore, @unchecked Sendable {
    /// The store `.default` sessions share: `$XDG_DATA_HOME/porter/cookies.sqlite`
    /// (or `~/.local/share/porter/cookies.sqlite`); a memory store, with a warning in the
    /// logs, when that cannot be opened.
    public static let shared: any CookieStore = {
        do {
            return try PersistentCookieStore(path: defaultPath())
        } catch {
            FileHandle.standardError.write(Data("porter: cookies stay in memory: \(error)\n".utf8))
            return MemoryCookieStore()
        }
    }()

    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        (XDG.dataHome(environment: environment) ?? NSHomeDirectory() + "/.local/share") + "/porter/cookies.sqlite"
    }

    public let path: String
    private let database: DatabaseQueue
    private var memory: MemoryCookieStore!

    /// Opens (or creates) the store at `path`. Throws `PorterError` when the file cannot
    /// be opened, or when others may read it.
    public init(path: String, maximumPerDomain: Int = 180, maximumTotal: Int = 10_000,
                clock: @escaping @Sendable () -> Date = Date.init) throws {
        self.path = path
        try PrivateFiles.makeFolder((path as NSString).deletingLastPathComponent)
        try PrivateFiles.refuseIfOthersCanRead(path, what: "the cookie store")
        database = try PrivateFiles.openDatabase(path, schema: """
            CREATE TABLE IF NOT EXISTS cookie (
                name TEXT NOT NULL, value TEXT NOT NULL, domain TEXT NOT NULL, hostOnly INTEGER NOT NULL,
                path TEXT NOT NULL, expires REAL NOT NULL, secure INTEGER NOT NULL, httpOnly INTEGER NOT NULL,
                sameSite TEXT, creation REAL NOT NULL, lastAccess REAL NOT NULL,
                PRIMARY KEY (name, domain, path, hostOnly))
            """, what: "the cookie store")
        let rows = try Self.load(database)
        let writer = UnsafeSendable(database)
        memory = MemoryCookieStore(maximumPerDomain: maximumPerDomain, maximumTotal: maximumTotal, clock: clock) { changes in
            Self.write(changes, to: writer.value)
        }
        memory.restore(rows)
    }

    private static func load(_ db: DatabaseQueue) throws -> [Cookie] {
        do {
            return try db.read { db in
                try Row.fetchAll(db, sql: "SELECT * FROM cookie").map { row in
                    var c = Cookie(name: row["name"], value: row["value"], domain: row["domain"], hostOnly: row["hostOnly"],
                                   path: row["path"], expires: Date(timeIntervalSince1970: row["expires"]),
                                   secure: row["secure"], httpOnly: row["httpOnly"],
                                   sameSite: (row["sameSite"] as String?).flatMap(Cookie.SameSite.init(rawValue:)),
                                   creation: Date(timeIntervalSince1970: row["creation"]))
                    c.lastAccess = Date(timeIntervalSince1970: row["lastAccess"])
                    return c
                }
            }
        } catch {
            throw PorterError(.cannotParseResponse, "cannot read the cookie store: \(error)")
        }
    }

    /// Write-through, in the order the memory store reported the changes. A failed
    /// write is logged and the cookies stay in memory.
    private static func write(_ changes: [CookieChange], to db: DatabaseQueue) {
        do {
            try db.write { db in
                for change in changes {
                    switch change {
                    case .stored(let c):
                        guard let expires = c.expires else {
                            // A session cookie may replace a persistent one: drop the row.
                            try db.execute(sql: "DELETE FROM cookie WHERE name = ? AND domain = ? AND path = ? AND hostOnly = ?",
                                           arguments: [c.name, c.domain, c.path, c.hostOnly])
                            continue
                        }
                        try db.execute(sql: """
                            INSERT OR REPLACE INTO cookie (name, value, domain, hostOnly, path, expires, secure, httpOnly,
                                                           sameSite, creation, lastAccess)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                            """, arguments: [c.name, c.value, c.domain, c.hostOnly, c.path, expires.timeIntervalSince1970,
                                             c.secure, c.httpOnly, c.sameSite?.rawValue, c.creation.timeIntervalSince1970,
                                             c.lastAccess.timeIntervalSince1970])
                    case .removed(let c):
                        try db.execute(sql: "DELETE FROM cookie WHERE name = ? AND domain = ? AND path = ? AND hostOnly = ?",
                                       arguments: [c.name, c.domain, c.path, c.hostOnly])
                    case .removedAll:
                        try db.execute(sql: "DELETE FROM cookie")
                    }
                }
            }
        } catch {
            FileHandle.standardError.write(Data("porter: cannot write the cookie store: \(error)\n".utf8))
        }
    }

    /// SQLite's `PRAGMA integrity_check` of the file: "ok" when it is sound.
    public func integrityCheck() throws -> String {
        try database.read { db in try String.fetchOne(db, sql: "PRAGMA integrity_check") ?? "no answer" }
    }

    // MARK: - CookieStore, through the memory store

    public var acceptPolicy: CookieAcceptPolicy {
        get { memory.acceptPolicy }
        set { memory.acceptPolicy = newValue }
    }
    public func storeCookies(fromHeaders headers: [String], for url: URL, mainDocumentURL: URL?) {
        memory.storeCookies(fromHeaders: headers, for: url, mainDocumentURL: mainDocumentURL)
    }
    public func cookieHeader(for url: URL, mainDocumentURL: URL?) -> String? {
        memory.cookieHeader(for: url, mainDocumentURL: mainDocumentURL)
    }
    public func cookies(for url: URL) -> [Cookie] { memory.cookies(for: url) }
    public var allCookies: [Cookie] { memory.allCookies }
    public func setCookie(_ cookie: Cookie) { memory.setCookie(cookie) }
    public func deleteCookie(_ cookie: Cookie) { memory.deleteCookie(cookie) }
    public func removeAll() { memory.removeAll() }
}

/// A value moved across threads on purpose (GRDB's queue serialises its own use).
struct UnsafeSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
