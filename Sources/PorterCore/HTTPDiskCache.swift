import Foundation
import GRDB
import HTTPTypes

/// The disk tier of `HTTPCache`: bodies as files (`PrivateFiles.writeAtomically`) and an
/// index in SQLite (WAL) holding each entry's head, Vary values, body size and digest. A
/// body that does not match its size and digest on read is dropped, never served; files
/// no entry names (a crash between the rename and the index) are removed when the cache
/// opens. Folder 0700, files 0600.
final class HTTPDiskCache: @unchecked Sendable {
    let directory: String
    let capacity: Int
    private let database: DatabaseQueue

    init(directory: String, capacity: Int) throws {
        self.directory = directory
        self.capacity = capacity
        try PrivateFiles.makeFolder(directory + "/bodies")
        chmod(directory, 0o700)
        database = try PrivateFiles.openDatabase(directory + "/index.sqlite", schema: """
            CREATE TABLE IF NOT EXISTS entry (
                key TEXT NOT NULL, vary TEXT NOT NULL, head BLOB NOT NULL, body TEXT NOT NULL,
                size INTEGER NOT NULL, digest INTEGER NOT NULL, stored REAL NOT NULL, used REAL NOT NULL,
                PRIMARY KEY (key, vary))
            """, what: "the cache index")
        removeOrphans()
    }

    // MARK: - encoding

    private struct Head: Codable {
        var url: String
        var mimeType: String?
        var expectedContentLength: Int64
        var textEncodingName: String?
        var statusCode: Int?
        var statusLine: String?
        var fields: [[String]]
    }

    static func encode(_ r: Response) -> Data {
        let head = Head(url: r.url.absoluteString, mimeType: r.mimeType, expectedContentLength: r.expectedContentLength,
                        textEncodingName: r.textEncodingName, statusCode: r.statusCode, statusLine: r.statusLine,
                        fields: r.headerFields.map { [$0.name.rawName, $0.value] })
        return (try? JSONEncoder().encode(head)) ?? Data()
    }

    static func decode(_ data: Data) -> Response? {
        guard let head = try? JSONDecoder().decode(Head.self, from: data), let url = URL(string: head.url) else { return nil }
        var fields = HTTPFields()
        for pair in head.fields where pair.count == 2 {
            if let name = HTTPField.Name(pair[0]) { fields.append(HTTPField(name: name, value: pair[1])) }
        }
        var r = Response(url: url, mimeType: head.mimeType, expectedContentLength: head.expectedContentLength,
                         textEncodingName: head.textEncodingName, statusCode: head.statusCode, headerFields: fields)
        r.statusLine = head.statusLine
        r.validator = fields[.eTag] ?? fields[.lastModified]
        return r
    }

    static func varyKey(_ values: [String: String]) -> String {
        values.keys.sorted().map { "\($0)=\(values[$0]!)" }.joined(separator: "\n")
    }

    /// FNV-1a, 64 bits: catches truncated and damaged bodies (not an adversary).
    static func digest(_ data: Data) -> Int64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        data.withUnsafeBytes { raw in
            for b in raw { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        }
        return Int64(bitPattern: h)
    }

    // MARK: - entries

    func store(key: String, vary: [String: String], cached: CachedResponse) {
        let name = UUID().uuidString
        let final = directory + "/bodies/" + name
        guard PrivateFiles.writeAtomically(cached.data, to: final) else { return }
        let replaced: [String]
        do {
            replaced = try database.write { db -> [String] in
                let old = try String.fetchAll(db, sql: "SELECT body FROM entry WHERE key = ? AND vary = ?",
                                              arguments: [key, Self.varyKey(vary)])
                try db.execute(sql: """
                    INSERT OR REPLACE INTO entry (key, vary, head, body, size, digest, stored, used)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """, arguments: [key, Self.varyKey(vary), Self.encode(cached.response), name, cached.data.count,
                                     Self.digest(cached.data), (cached.storedDate ?? Date()).timeIntervalSince1970,
                                     Date().timeIntervalSince1970])
                return old
            }
        } catch {
            unlink(final)
            return
        }
        for old in replaced where old != name { unlink(directory + "/bodies/" + old) }
        evict()
    }

    /// The entries stored for `key`, with their Vary values; a damaged body is dropped.
    func lookup(key: String) -> [(vary: [String: String], cached: CachedResponse)] {
        let rows = (try? database.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM entry WHERE key = ?", arguments: [key])
        }) ?? []
        var found: [(vary: [String: String], cached: CachedResponse)] = []
        for row in rows {
            let body: String = row["body"]
            let varyText: String = row["vary"]
            guard let data = FileManager.default.contents(atPath: directory + "/bodies/" + body),
                  data.count == (row["size"] as Int), Self.digest(data) == (row["digest"] as Int64),
                  let response = Self.decode(row["head"]) else {
                drop(key: key, vary: varyText, body: body)
                continue
            }
            var vary: [String: String] = [:]
            for line in varyText.split(separator: "\n", omittingEmptySubsequences: true) {
                let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                vary[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
            }
            found.append((vary, CachedResponse(response: response, data: data, storagePolicy: .allowed,
                                               storedDate: Date(timeIntervalSince1970: row["stored"]))))
        }
        if !found.isEmpty {
            _ = try? database.write { db in
                try db.execute(sql: "UPDATE entry SET used = ? WHERE key = ?", arguments: [Date().timeIntervalSince1970, key])
            }
        }
        return found
    }

    private func drop(key: String, vary: String, body: String) {
        _ = try? database.write { db in
            try db.execute(sql: "DELETE FROM entry WHERE key = ? AND vary = ?", arguments: [key, vary])
        }
        unlink(directory + "/bodies/" + body)
    }

    func remove(key: String) {
        let bodies = (try? database.write { db -> [String] in
            let b = try String.fetchAll(db, sql: "SELECT body FROM entry WHERE key = ?", arguments: [key])
            try db.execute(sql: "DELETE FROM entry WHERE key = ?", arguments: [key])
            return b
        }) ?? []
        for b in bodies { unlink(directory + "/bodies/" + b) }
    }

    func removeAll() {
        let bodies = (try? database.write { db -> [String] in
            let b = try String.fetchAll(db, sql: "SELECT body FROM entry")
            try db.execute(sql: "DELETE FROM entry")
            return b
        }) ?? []
        for b in bodies { unlink(directory + "/bodies/" + b) }
    }

    /// Bytes and entries on disk.
    var usage: (bytes: Int, entries: Int) {
        (try? database.read { db -> (Int, Int) in
            let row = try Row.fetchOne(db, sql: "SELECT COALESCE(SUM(size), 0) AS bytes, COUNT(*) AS n FROM entry")
            return (row?["bytes"] ?? 0, row?["n"] ?? 0)
        }) ?? (0, 0)
    }

    /// Least recently used first, until the bodies fit `capacity`.
    private func evict() {
        let victims = (try? database.write { db -> [String] in
            var total: Int = try Int.fetchOne(db, sql: "SELECT COALESCE(SUM(size), 0) FROM entry") ?? 0
            guard total > capacity else { return [] }
            var gone: [String] = []
            for row in try Row.fetchAll(db, sql: "SELECT key, vary, body, size FROM entry ORDER BY used") {
                guard total > capacity else { break }
                try db.execute(sql: "DELETE FROM entry WHERE key = ? AND vary = ?",
                               arguments: [row["key"] as String, row["vary"] as String])
                total -= row["size"] as Int
                gone.append(row["body"])
            }
            return gone
        }) ?? []
        for b in victims { unlink(directory + "/bodies/" + b) }
    }

    /// Body files no entry names go: unfinished temporary files, and bodies whose index
    /// write never happened (a crash between the rename and the index). Files younger than
    /// a minute may be another process's work in progress, so they stay.
    private func removeOrphans() {
        let named = Set((try? database.read { db in try String.fetchAll(db, sql: "SELECT body FROM entry") }) ?? [])
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory + "/bodies")) ?? []
        for f in files where !named.contains(f) {
            let path = directory + "/bodies/" + f
            if let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date,
               Date().timeIntervalSince(modified) < 60 { continue }
            unlink(path)
        }
    }
}
