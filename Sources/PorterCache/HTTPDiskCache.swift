import Foundation
import PorterCore
import GRDB
import PorterStorage
import HTTPTypes
import PorterDatabase

/// The disk tier of `HTTPCache`: bodies as files (`PrivateFiles.writeAtomically`) and an
/// index in SQLite (WAL) holding each entry's head, Vary values, body size and digest;
/// `capacity` bounds what both take (`costSQL`). A
/// body that does not match its size and digest on read is dropped, never served; files
/// no entry names (a crash between the rename and the index) are removed when the cache
/// opens. Folder 0700, files 0600.
final class HTTPDiskCache: @unchecked Sendable {
    let directory: String
    let capacity: Int
    private let database: DatabaseQueue

    /// The bodies folder, held open: every body is opened, created, renamed and removed
    /// relative to it with O_NOFOLLOW, so a link planted in the folder is never followed
    /// and a folder swapped for another after the checks is not used.
    private let bodies: Int32

    /// Only names the cache makes itself are ever opened or removed: a damaged or hostile
    /// index cannot name "../x" or "/etc/passwd".
    static func isBodyName(_ name: String) -> Bool {
        let u = Array(name.utf8)
        guard u.count == 36 else { return false }
        for (i, c) in u.enumerated() {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard c == UInt8(ascii: "-") else { return false }
            } else {
                guard (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) else { return false }
            }
        }
        return true
    }

    init(directory: String, capacity: Int) throws {
        self.directory = directory
        self.capacity = capacity
        try PrivateFiles.makeFolder(directory + "/bodies")
        try PrivateFiles.checkOwnFolder(directory)
        let fd = open(directory + "/bodies", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            throw PorterError(.cannotOpenFile, "cannot open the cache folder \(directory)/bodies", cause: .errno(errno))
        }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_uid == geteuid(), st.st_mode & 0o077 == 0 else {
            close(fd)
            throw PorterError(.noPermissionsToReadFile, "refusing the cache folder \(directory)/bodies: not this user's private folder")
        }
        bodies = fd
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
        r.validator = fields.combined(.eTag) ?? fields.combined(.lastModified)
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

    /// What an entry costs on disk, in SQL over its row: the body file in whole 4 KiB
    /// blocks (what the file system gives it), the stored head, the key and Vary text
    /// twice (the table and its primary-key index), and 256 bytes for the row, the index
    /// entry and the file's inode. `capacity` bounds the sum; `usage` reports it.
    static let costSQL = """
        (((size + 4095) / 4096) * 4096 + length(head) + 2 * (length(CAST(key AS BLOB)) + length(CAST(vary AS BLOB))) + 256)
        """

    /// The same cost before a row exists.
    static func cost(key: String, vary: String, head: Data, size: Int) -> Int {
        (size + 4095) / 4096 * 4096 + head.count + 2 * (key.utf8.count + vary.utf8.count) + 256
    }

    deinit { close(bodies) }

    // MARK: - body files (relative to the held folder, never through a link)

    private func writeBody(_ data: Data, name: String) -> Bool {
        let temp = name + ".tmp"
        let fd = openat(bodies, temp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return false }
        let written = data.withUnsafeBytes { raw -> Bool in
            var offset = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0, errno == EINTR { continue }
                if n <= 0 { return false }
                offset += n
            }
            return true
        }
        let synced = fsync(fd) == 0
        close(fd)
        guard written, synced, renameat(bodies, temp, bodies, name) == 0 else {
            unlinkat(bodies, temp, 0)
            return false
        }
        return true
    }

    private func readBody(_ name: String, size: Int) -> Data? {
        guard Self.isBodyName(name) else { return nil }
        let fd = openat(bodies, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, Int(st.st_size) == size else { return nil }
        var data = Data(count: size)
        let ok = data.withUnsafeMutableBytes { raw -> Bool in
            var offset = 0
            while offset < size {
                let n = read(fd, raw.baseAddress! + offset, size - offset)
                if n < 0, errno == EINTR { continue }
                if n <= 0 { return false }
                offset += n
            }
            return true
        }
        return ok ? data : nil
    }

    private func removeBody(_ name: String) {
        guard Self.isBodyName(name) else { return }
        unlinkat(bodies, name, 0)
    }

    func store(key: String, vary: [String: String], cached: CachedResponse) {
        let head = Self.encode(cached.response)
        let varyText = Self.varyKey(vary)
        // An entry bigger than the whole tier would only push everything else out and go.
        guard Self.cost(key: key, vary: varyText, head: head, size: cached.data.count) <= capacity else { return }
        let name = UUID().uuidString
        guard writeBody(cached.data, name: name) else { return }
        let replaced: [String]
        do {
            replaced = try database.write { db -> [String] in
                let old = try String.fetchAll(db, sql: "SELECT body FROM entry WHERE key = ? AND vary = ?",
                                              arguments: [key, varyText])
                try db.execute(sql: """
                    INSERT OR REPLACE INTO entry (key, vary, head, body, size, digest, stored, used)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """, arguments: [key, varyText, head, name, cached.data.count,
                                     Self.digest(cached.data), (cached.storedDate ?? Date()).timeIntervalSince1970,
                                     Date().timeIntervalSince1970])
                return old
            }
        } catch {
            removeBody(name)
            return
        }
        for old in replaced where old != name { removeBody(old) }
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
            guard let data = readBody(body, size: row["size"]), Self.digest(data) == (row["digest"] as Int64),
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

    /// Marks the entries of `keys` used now (one transaction).
    func touch(keys: [String]) {
        let now = Date().timeIntervalSince1970
        _ = try? database.write { db in
            for key in keys { try db.execute(sql: "UPDATE entry SET used = ? WHERE key = ?", arguments: [now, key]) }
        }
    }

    private func drop(key: String, vary: String, body: String) {
        _ = try? database.write { db in
            try db.execute(sql: "DELETE FROM entry WHERE key = ? AND vary = ?", arguments: [key, vary])
        }
        removeBody(body)
    }

    func remove(key: String) {
        let bodies = (try? database.write { db -> [String] in
            let b = try String.fetchAll(db, sql: "SELECT body FROM entry WHERE key = ?", arguments: [key])
            try db.execute(sql: "DELETE FROM entry WHERE key = ?", arguments: [key])
            return b
        }) ?? []
        for b in bodies { removeBody(b) }
    }

    func removeAll() {
        let bodies = (try? database.write { db -> [String] in
            let b = try String.fetchAll(db, sql: "SELECT body FROM entry")
            try db.execute(sql: "DELETE FROM entry")
            return b
        }) ?? []
        for b in bodies { removeBody(b) }
    }

    /// Bytes (each entry's cost: body, head, key and Vary values, row) and entries on disk.
    var usage: (bytes: Int, entries: Int) {
        (try? database.read { db -> (Int, Int) in
            let row = try Row.fetchOne(db, sql: "SELECT COALESCE(SUM(\(Self.costSQL)), 0) AS bytes, COUNT(*) AS n FROM entry")
            return (row?["bytes"] ?? 0, row?["n"] ?? 0)
        }) ?? (0, 0)
    }

    /// Least recently used first, until the entries (heads and bodies) fit `capacity`.
    private func evict() {
        let victims = (try? database.write { db -> [String] in
            var total: Int = try Int.fetchOne(db, sql: "SELECT COALESCE(SUM(\(Self.costSQL)), 0) FROM entry") ?? 0
            guard total > capacity else { return [] }
            var gone: [String] = []
            for row in try Row.fetchAll(db, sql: "SELECT key, vary, body, \(Self.costSQL) AS cost FROM entry ORDER BY used") {
                guard total > capacity else { break }
                try db.execute(sql: "DELETE FROM entry WHERE key = ? AND vary = ?",
                               arguments: [row["key"] as String, row["vary"] as String])
                total -= row["cost"] as Int
                gone.append(row["body"])
            }
            return gone
        }) ?? []
        for b in victims { removeBody(b) }
    }

    /// Body files no entry names go: unfinished temporary files, and bodies whose index
    /// write never happened (a crash between the rename and the index). Files younger than
    /// a minute may be another process's work in progress, so they stay. Only regular
    /// files with names the cache makes are touched; anything else in the folder (a
    /// planted link, a folder) is left alone and never followed.
    private func removeOrphans() {
        let named = Set((try? database.read { db in try String.fetchAll(db, sql: "SELECT body FROM entry") }) ?? [])
        let listing = dup(bodies)
        guard listing >= 0, let dir = fdopendir(listing) else { return }
        defer { closedir(dir) }
        rewinddir(dir)
        let now = time(nil)
        while let ent = readdir(dir) {
            let name = withUnsafeBytes(of: ent.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            let body = name.hasSuffix(".tmp") ? String(name.dropLast(4)) : name
            guard Self.isBodyName(body), !named.contains(name) else { continue }
            var st = stat()
            guard fstatat(bodies, name, &st, AT_SYMLINK_NOFOLLOW) == 0, st.st_mode & S_IFMT == S_IFREG,
                  now - st.st_mtim.tv_sec >= 60 else { continue }
            unlinkat(bodies, name, 0)
        }
    }
}
