import Foundation
import GRDB
import PorterCore
import PorterStorage

// The SQLite side of the stores' private files (the cookie store and the disk cache
// share it); the contract module stays free of SQLite.

extension PrivateFiles {
    /// Opens (or creates, mode 0600) the SQLite database at `path` in WAL mode, waiting up to
    /// 5 s for another process's lock, and creates its table with `schema`. `what` names
    /// it in the error ("the cookie store").
    package static func openDatabase(_ path: String, schema: String, what: String) throws -> DatabaseQueue {
        for file in [path, path + "-wal", path + "-shm", path + "-journal"] {
            try refuseIfNotOwnRegularFile(file, what: what)
        }
        createFile(path)
        try refuseIfNotOwnRegularFile(path, what: what)
        var config = Configuration()
        config.busyMode = .timeout(5)
        // Processes opening a new store at once can still meet SQLITE_BUSY where SQLite
        // does not wait (the first switch to WAL): try again for up to 5 s before calling
        // the store unusable.
        let deadline = Date().addingTimeInterval(5)
        while true {
            do {
                let database = try DatabaseQueue(path: path, configuration: config)
                try database.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = WAL") }
                try database.write { db in try db.execute(sql: schema) }
                return database
            } catch let e as DatabaseError where (e.resultCode == .SQLITE_BUSY || e.resultCode == .SQLITE_LOCKED) && Date() < deadline {
                usleep(20_000)
            } catch {
                throw PorterError(.storeUnusable, "cannot open \(what) \(path) (damaged, or not a database): \(error)")
            }
        }
    }
}
