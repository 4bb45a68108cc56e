import Foundation
import GRDB
import PorterBackground
import PorterCore
import PorterSession
import PorterStorage
import PorterDatabase

/// porterd's journal: every task and every undelivered event, in SQLite (WAL) at
/// `$XDG_STATE_HOME/porter/porterd.sqlite` (0600, folder 0700). A state change is
/// committed before the daemon acts on it, so a `kill -9` at any instant loses nothing:
/// a restarted daemon continues each transfer from its partial file.
///
/// What it holds: each task's URL, method and header fields without Authorization,
/// Proxy-Authorization and Cookie (those come from the stores again at each attempt),
/// its state, byte counts, validator, partial file, retry count and next attempt; and
/// each event not yet delivered to the session's delegate.
final class Journal: @unchecked Sendable {
    struct Task: Sendable {
        var id: Int
        var session: String
        var spec: BackgroundTaskSpec {
            didSet { specChanged = true }
        }
        /// The spec differs from the journal's (a description or schedule changed): only
        /// then is it encoded and written again.
        var specChanged = false
        var state: String
        var received: Int64
        var expected: Int64
        var sent: Int64
        var validator: String?
        var partial: String?
        var retries: Int
        var nextAttempt: Double?
        var statusCode: Int?
        var errorCode: String?
        var errorMessage: String?
        var created: Double
        /// When the first attempt started (for `timeoutIntervalForResource`).
        var firstAttempt: Double?

        func snapshot() -> BackgroundTaskSnapshot {
            BackgroundTaskSnapshot(id: id, session: session, kind: spec.kind, url: spec.url, taskDescription: spec.taskDescription,
                                   state: state, received: received, expected: expected, sent: sent, retries: retries,
                                   nextAttempt: nextAttempt, statusCode: statusCode, errorCode: errorCode,
                                   errorMessage: errorMessage, destination: spec.destination)
        }
    }

    static let schema = """
        CREATE TABLE IF NOT EXISTS tasks(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session TEXT NOT NULL,
            spec TEXT NOT NULL,
            state TEXT NOT NULL,
            received INTEGER NOT NULL DEFAULT 0,
            expected INTEGER NOT NULL DEFAULT -1,
            sent INTEGER NOT NULL DEFAULT 0,
            validator TEXT,
            partial TEXT,
            retries INTEGER NOT NULL DEFAULT 0,
            next_attempt REAL,
            status INTEGER,
            error_code TEXT,
            error_message TEXT,
            created REAL NOT NULL,
            first_attempt REAL);
        CREATE TABLE IF NOT EXISTS events(
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            session TEXT NOT NULL,
            task INTEGER NOT NULL,
            kind TEXT NOT NULL,
            file TEXT,
            status INTEGER,
            error_code TEXT,
            error_message TEXT);
        CREATE INDEX IF NOT EXISTS events_by_session ON events(session, seq);
        CREATE TABLE IF NOT EXISTS sessions(
            id TEXT PRIMARY KEY,
            launch TEXT,
            launched INTEGER NOT NULL DEFAULT 0,
            owner TEXT);
        """

    let path: String
    private let db: DatabaseQueue
    /// A second, read-only connection for lists: WAL lets it read while `db` writes, so a
    /// list of ten thousand tasks is read beside the daemon's work, not queued behind it.
    private let lists: DatabaseQueue

    /// Opens the journal; one that is not a database (damaged, truncated, something
    /// else) is moved aside to `path.corrupt-<time>` and a new one started, with the
    /// reason in `setAside`.
    init(path: String) throws {
        self.path = path
        var aside: String?
        db = try Journal.open(path, setAside: &aside)
        setAside = aside
        var config = Configuration()
        config.readonly = true
        config.busyMode = .timeout(5)
        config.prepareDatabase { db in try db.execute(sql: "PRAGMA cache_size = -512") }
        lists = try DatabaseQueue(path: path, configuration: config)
    }

    /// One that is not a database (damaged, truncated, something else) is moved aside to
    /// `path.corrupt-<time>` and a new one started, with the reason in `setAside`.
    private static func open(_ path: String, setAside: inout String?) throws -> DatabaseQueue {
        do {
            let db = try PrivateFiles.openDatabase(path, schema: Journal.schema, what: "porterd's journal")
            try db.read { db in _ = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM tasks") }
            try relaxSync(db)
            try addOwner(db)
            return db
        } catch {
            // Only a file that is not an SQLite database (or one SQLite calls corrupt) is
            // set aside; a busy or unreadable journal is an error, never discarded.
            let corrupt = (error as? DatabaseError).map { $0.resultCode == .SQLITE_CORRUPT || $0.resultCode == .SQLITE_NOTADB }
                ?? !Journal.looksLikeSQLite(path)
            guard corrupt else { throw error }
            let aside = path + ".corrupt-\(Int(Date().timeIntervalSince1970))"
            for suffix in ["", "-wal", "-shm"] { rename(path + suffix, aside + suffix) }
            setAside = "the journal \(path) could not be read (\(error)); it was moved to \(aside) and a new one started"
            let db = try PrivateFiles.openDatabase(path, schema: Journal.schema, what: "porterd's journal")
            try relaxSync(db)
            return db
        }
    }

    /// A journal from before launch commands had owners gets the column; its launch
    /// commands (set by whichever client attached last) are not run until the session's
    /// application sets one again.
    private static func addOwner(_ db: DatabaseQueue) throws {
        try db.write { db in
            let columns = try Row.fetchAll(db, sql: "PRAGMA table_info(sessions)").map { $0["name"] as String }
            if !columns.contains("owner") { try db.execute(sql: "ALTER TABLE sessions ADD COLUMN owner TEXT") }
        }
    }

    /// The file starts with SQLite's header (or is empty).
    private static func looksLikeSQLite(_ path: String) -> Bool {
        guard let h = FileManager.default.contents(atPath: path)?.prefix(16) else { return true }
        return h.isEmpty || h == Data("SQLite format 3\0".utf8)
    }

    /// WAL with synchronous=NORMAL: a commit survives the daemon's death (kill -9, a
    /// crash) at once, and a power cut or reboot loses at most the last commits, never the
    /// journal's consistency (SQLite syncs the log at each checkpoint). A transfer whose
    /// last progress was lost continues from an earlier count: it fetches a little twice.
    ///
    /// The page cache is bounded at 512 KiB (SQLite's default is 2 MiB): the journal is
    /// read a row at a time (an attempt starts, a list goes out), never scanned hot.
    private static func relaxSync(_ db: DatabaseQueue) throws {
        try db.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            try db.execute(sql: "PRAGMA cache_size = -512")
        }
    }
    let setAside: String?

    private static func spec(_ text: String) -> BackgroundTaskSpec? {
        try? JSONDecoder().decode(BackgroundTaskSpec.self, from: Data(text.utf8))
    }

    /// A task's row, read by column position (`task(_:)`): a name is looked up
    /// case-insensitively for every field of every row, and each attempt of ten thousand
    /// retrying tasks reads its row.
    private static let taskSQL = """
        SELECT id, session, spec, state, received, expected, sent, validator, partial, retries, next_attempt, status,
            error_code, error_message, created, first_attempt
        FROM tasks
        """

    private static func task(_ row: Row) -> Task? {
        guard let spec = spec(row[2]) else { return nil }
        return Task(id: row[0], session: row[1], spec: spec, specChanged: false, state: row[3], received: row[4],
                    expected: row[5], sent: row[6], validator: row[7], partial: row[8],
                    retries: row[9], nextAttempt: row[10], statusCode: row[11],
                    errorCode: row[12], errorMessage: row[13], created: row[14],
                    firstAttempt: row[15])
    }

    func insert(session: String, spec: BackgroundTaskSpec, partial: (Int) -> String) throws -> Task {
        var stored = spec
        stored.resumeData = nil
        let text = String(decoding: try JSONEncoder().encode(stored), as: UTF8.self)
        let created = Date().timeIntervalSince1970
        let t = try db.write { db -> Task in
            try db.cachedStatement(sql: "INSERT INTO tasks(session, spec, state, created) VALUES (?, ?, 'suspended', ?)")
                .execute(arguments: [session, text, created])
            let id = Int(db.lastInsertedRowID)
            let file = partial(id)
            try db.cachedStatement(sql: "UPDATE tasks SET partial = ? WHERE id = ?").execute(arguments: [file, id])
            // The row as the columns' defaults make it (not read back).
            return Task(id: id, session: session, spec: stored, specChanged: false, state: "suspended", received: 0, expected: -1,
                        sent: 0, validator: nil, partial: file, retries: 0, nextAttempt: nil, statusCode: nil, errorCode: nil,
                        errorMessage: nil, created: created, firstAttempt: nil)
        }
        return t
    }

    /// Writes every field of `t` that changes while it runs.
    func save(_ t: Task) throws {
        try db.write { db in try Journal.update(t, in: db) }
    }

    private static func update(_ t: Task, in db: GRDB.Database) throws {
        if t.specChanged {
            var stored = t.spec
            stored.resumeData = nil
            let text = String(decoding: try JSONEncoder().encode(stored), as: UTF8.self)
            try db.cachedStatement(sql: "UPDATE tasks SET spec = ? WHERE id = ?").execute(arguments: [text, t.id])
        }
        // A prepared statement kept for the connection: a transfer saves its row at every
        // checkpoint, and ten thousand retrying tasks save theirs at each attempt.
        try db.cachedStatement(sql: """
            UPDATE tasks SET state = ?, received = ?, expected = ?, sent = ?, validator = ?, partial = ?,
                retries = ?, next_attempt = ?, status = ?, error_code = ?, error_message = ?, first_attempt = ?
            WHERE id = ?
            """).execute(arguments: [t.state, t.received, t.expected, t.sent, t.validator, t.partial, t.retries,
                                     t.nextAttempt, t.statusCode, t.errorCode, t.errorMessage, t.firstAttempt, t.id])
    }

    /// A waiting task's state (resumed: running; suspended), without reading its row.
    func setState(_ id: Int, _ state: String) throws {
        try db.write { db in
            try db.cachedStatement(sql: "UPDATE tasks SET state = ? WHERE id = ?").execute(arguments: [state, id])
        }
    }

    /// A waiting task's retry is due: its last error and next-attempt time are forgotten.
    func clearRetry(_ id: Int) throws {
        try db.write { db in
            try db.cachedStatement(sql: "UPDATE tasks SET next_attempt = NULL, error_code = NULL, error_message = NULL WHERE id = ?")
                .execute(arguments: [id])
        }
    }

    /// Saves the task's end and queues its events in one transaction (a kill between
    /// the two must not leave a finished task nobody hears of).
    func finish(_ t: Task, events: [BackgroundEvent]) throws -> [BackgroundEvent] {
        let out = try db.write { db -> [BackgroundEvent] in
            try Journal.update(t, in: db)
            var out: [BackgroundEvent] = []
            for e in events {
                try db.execute(sql: "INSERT INTO events(session, task, kind, file, status, error_code, error_message) VALUES (?, ?, ?, ?, ?, ?, ?)",
                               arguments: [t.session, t.id, e.kind.rawValue, e.file, e.statusCode, e.errorCode, e.errorMessage])
                var stored = e
                stored.sequence = db.lastInsertedRowID
                out.append(stored)
            }
            return out
        }
        return out
    }

    /// The journal is the queue: porterd keeps in memory only what its scheduler needs
    /// (`JobScheduler.Ticket`) and the rows of running attempts; everything else is read
    /// from here when it is needed (an attempt starts, a client lists, a job ends).
    func task(_ id: Int) throws -> Task? {
        try db.read { db in try Row.fetchOne(db.cachedStatement(sql: Journal.taskSQL + " WHERE id = ?"), arguments: [id]).flatMap(Journal.task) }
    }

    /// Changes one task's row (read, changed, written back in one transaction); nil when
    /// there is no such task.
    @discardableResult
    func change(_ id: Int, _ body: (inout Task) -> Void) throws -> Task? {
        try db.write { db -> Task? in
            guard var t = try Row.fetchOne(db.cachedStatement(sql: Journal.taskSQL + " WHERE id = ?"), arguments: [id]).flatMap(Journal.task) else { return nil }
            body(&t)
            try Journal.update(t, in: db)
            return t
        }
    }

    /// Each task (of `session`, or all), in order of id, one row at a time: a list of
    /// 10,000 tasks never sits in memory at once.
    func forEachTask(session: String? = nil, _ body: (Task) throws -> Void) throws {
        try db.read { db in
            let rows: RowCursor
            if let session {
                rows = try Row.fetchCursor(db, sql: Journal.taskSQL + " WHERE session = ? ORDER BY id", arguments: [session])
            } else {
                rows = try Row.fetchCursor(db, sql: Journal.taskSQL + " ORDER BY id")
            }
            while let row = try rows.next() {
                if let t = Journal.task(row) { try body(t) }
            }
        }
    }

    /// What a list shows of a task, with the spec's parts taken out by SQLite
    /// (`json_extract`): listing ten thousand tasks decodes no spec. Read by column
    /// position (`snapshot(_:)`), not by name: a name is looked up case-insensitively
    /// for every field of every row.
    private static let snapshotSQL = """
        SELECT id, session, state, received, expected, sent, retries, next_attempt, status, error_code, error_message,
            json_extract(spec, '$.kind') AS kind, json_extract(spec, '$.url') AS url,
            json_extract(spec, '$.taskDescription') AS description, json_extract(spec, '$.destination') AS destination
        FROM tasks
        """

    private static func snapshot(_ row: Row) -> BackgroundTaskSnapshot? {
        guard let kindText: String = row[11], let kind = BackgroundTaskSpec.Kind(rawValue: kindText),
              let urlText: String = row[12], let url = URL(string: urlText) else { return nil }
        return BackgroundTaskSnapshot(id: row[0], session: row[1], kind: kind, url: url, taskDescription: row[13],
                                      state: row[2], received: row[3], expected: row[4], sent: row[5],
                                      retries: row[6], nextAttempt: row[7], statusCode: row[8],
                                      errorCode: row[9], errorMessage: row[10], destination: row[14])
    }

    /// At most `limit` tasks of `session` with ids above `after`, as a list shows them, in
    /// order of id, and the last id read (nil: none left). One short read per call (keyset
    /// paging): no read transaction is held while a page goes out to a client, so a client
    /// that stops reading holds up neither other clients' lists nor the WAL checkpoint.
    /// Any thread may call it (it reads through its own connection).
    func snapshots(session: String, after: Int, limit: Int) throws -> (tasks: [BackgroundTaskSnapshot], last: Int?) {
        try lists.read { db in
            let rows = try Row.fetchCursor(db.cachedStatement(sql: Journal.snapshotSQL + " WHERE session = ? AND id > ? ORDER BY id LIMIT ?"),
                                           arguments: [session, after, limit])
            var tasks: [BackgroundTaskSnapshot] = []
            var last: Int?
            while let row = try rows.next() {
                last = row[0]
                if let t = Journal.snapshot(row) { tasks.append(t) }
            }
            return (tasks, last)
        }
    }

    /// One task as a list shows it.
    func snapshot(_ id: Int) throws -> BackgroundTaskSnapshot? {
        try db.read { db in
            try Row.fetchOne(db.cachedStatement(sql: Journal.snapshotSQL + " WHERE id = ?"), arguments: [id]).flatMap(Journal.snapshot)
        }
    }

    func events(session: String) throws -> [BackgroundEvent] {
        try db.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM events WHERE session = ? ORDER BY seq", arguments: [session]).compactMap { row in
                guard let kind = BackgroundEvent.Kind(rawValue: row["kind"]) else { return nil }
                return BackgroundEvent(sequence: row["seq"], task: row["task"], kind: kind, file: row["file"],
                                       statusCode: row["status"], errorCode: row["error_code"], errorMessage: row["error_message"])
            }
        }
    }

    /// Forgets a delivered event; returns it. A completed task whose last event went is
    /// forgotten too.
    func delivered(_ sequence: Int64, session: String) throws -> BackgroundEvent? {
        try db.write { db -> BackgroundEvent? in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM events WHERE seq = ? AND session = ?", arguments: [sequence, session]),
                  let kind = BackgroundEvent.Kind(rawValue: row["kind"]) else { return nil }
            let e = BackgroundEvent(sequence: sequence, task: row["task"], kind: kind, file: row["file"])
            try db.execute(sql: "DELETE FROM events WHERE seq = ?", arguments: [sequence])
            let left = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM events WHERE task = ?", arguments: [e.task]) ?? 0
            if left == 0 { try db.execute(sql: "DELETE FROM tasks WHERE id = ? AND state = 'completed'", arguments: [e.task]) }
            return e
        }
    }

    /// Records that a process holds `session` now (so the next undelivered events may
    /// launch it again) and, when given, its launch command (empty: none) and the program
    /// that set it (the daemon decided it may).
    func attached(_ session: String, launchCommand: [String]?, owner: String?) throws {
        try db.write { db in
            try db.execute(sql: "INSERT OR IGNORE INTO sessions(id) VALUES (?)", arguments: [session])
            try db.execute(sql: "UPDATE sessions SET launched = 0 WHERE id = ?", arguments: [session])
            if let launchCommand, let owner {
                let text = launchCommand.isEmpty ? nil : String(decoding: try JSONEncoder().encode(launchCommand), as: UTF8.self)
                try db.execute(sql: "UPDATE sessions SET launch = ?, owner = ? WHERE id = ?", arguments: [text, owner, session])
            }
        }
    }

    /// The program that set `session`'s launch command (its application), if any did.
    func launchOwner(_ session: String) throws -> String? {
        try db.read { db in try String.fetchOne(db, sql: "SELECT owner FROM sessions WHERE id = ?", arguments: [session]) }
    }

    /// The launch command to run for `session`'s waiting events, once: nil when it has
    /// none or it already ran since the session was last held.
    func launchOnce(_ session: String) throws -> [String]? {
        try db.write { db -> [String]? in
            guard let row = try Row.fetchOne(db, sql: "SELECT launch, launched, owner FROM sessions WHERE id = ?", arguments: [session]),
                  let text: String = row["launch"], (row["launched"] as Int) == 0, (row["owner"] as String?) != nil,
                  let argv = try? JSONDecoder().decode([String].self, from: Data(text.utf8)), !argv.isEmpty else { return nil }
            try db.execute(sql: "UPDATE sessions SET launched = 1 WHERE id = ?", arguments: [session])
            return argv
        }
    }

    /// Sessions with events waiting.
    func sessionsWithEvents() throws -> [String] {
        try db.read { db in try String.fetchAll(db, sql: "SELECT DISTINCT session FROM events") }
    }
}

