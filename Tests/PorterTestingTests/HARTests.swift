import Foundation
import HTTPTypes
import Porter
import PorterTestSupport
import PorterTesting
import XCTest

/// Record a session against a real nginx, stop nginx, replay the archive with no server.
final class HARTests: XCTestCase {
    override class func setUp() {
        super.setUp()
        Porter.bootstrap(loadPlugins: false)
    }

    private func temporaryFile(_ name: String) -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("porter-har-\(getpid())-\(UUID().uuidString.prefix(6))-\(name)")
    }

    private struct Seen: Equatable {
        var status: Int?
        var body: Data
        var contentType: String?
        var finalURL: String
    }

    private func load(_ session: Session, _ requests: [Request]) async throws -> [Seen] {
        var out: [Seen] = []
        for r in requests {
            let (data, response) = try await session.data(for: r)
            out.append(Seen(status: response.statusCode, body: data, contentType: response.value(forHeader: "Content-Type"),
                            finalURL: response.url.absoluteString))
        }
        return out
    }

    func testRecordAgainstNginxThenReplayWithoutAServer() async throws {
        let nginx = try NginxFixture()
        var post = Request(url: URL(string: nginx.http + "/echo")!, method: "POST", body: .data(Data("name=porter".utf8)))
        post.setValue("application/x-www-form-urlencoded", forHeader: "Content-Type")
        var english = Request(url: URL(string: nginx.http + "/cache/vary.txt")!)
        english.setValue("en", forHeader: "X-Lang")
        var members = Request(url: URL(string: nginx.http + "/basic/index.html")!)
        members.setBasicAuthorization(user: "alice", password: "secret")
        let requests = [
            Request(url: URL(string: nginx.http + "/index.html")!),
            post,
            Request(url: URL(string: nginx.http + "/redirect/302")!),     // a hop to /echo, replayed hop by hop
            english,
            Request(url: URL(string: nginx.http + "/medium.bin")!),        // binary: base64 in the archive
            Request(url: URL(string: nginx.http + "/nothing-here")!),      // a 404 is a response like any other
            members,                                                       // its Authorization is not written down
        ]

        let recorder = HARRecorder()
        var configuration = SessionConfiguration.ephemeral
        configuration.responseCache = nil
        recorder.attach(to: &configuration)
        let live: [Seen]
        do {
            live = try await load(Session(configuration: configuration), requests)
        } catch {
            nginx.stop()
            throw error
        }
        nginx.stop()
        let file = temporaryFile("session.har")
        defer { try? FileManager.default.removeItem(at: file) }
        try recorder.write(to: file)

        let text = try String(contentsOf: file, encoding: .utf8)
        XCTAssertFalse(text.contains(Data("alice:secret".utf8).base64EncodedString()), "a credential was written into the archive")
        XCTAssertTrue(text.contains("members only"))

        // Readable by browser tools: every field HAR 1.2 requires, with its type.
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: file))
        let problems = HARSchema.problems(in: json)
        XCTAssertEqual(problems, [], problems.joined(separator: "\n"))
        let har = try HAR.read(from: file)
        XCTAssertEqual(har.log.entries.count, requests.count + 1, "one entry per hop: \(har.log.entries.map(\.request.url))")
        let hop = try XCTUnwrap(har.log.entries.first { $0.request.url.hasSuffix("/redirect/302") })
        XCTAssertEqual(hop.response.status, 302)
        XCTAssertTrue(hop.response.redirectURL.hasSuffix("/echo"), hop.response.redirectURL)
        let posted = try XCTUnwrap(har.log.entries.first { $0.request.method == "POST" })
        XCTAssertEqual(posted.request.postData?.text, "name=porter")
        XCTAssertEqual(posted.response.content.text, "POST name=porter")
        let binary = try XCTUnwrap(har.log.entries.first { $0.request.url.hasSuffix("/medium.bin") })
        XCTAssertEqual(binary.response.content.encoding, "base64")
        XCTAssertEqual(binary.response.content.size, NginxFixture.mediumSize)
        XCTAssertGreaterThanOrEqual(binary.timings.wait, 0)

        // Replay: nginx is gone, the answers are the same.
        let replay = try HARReplay(contentsOf: file)
        var offline = SessionConfiguration.ephemeral
        offline.responseCache = nil
        replay.attach(to: &offline)
        let session = Session(configuration: offline)
        let replayed = try await load(session, requests)
        XCTAssertEqual(replayed.count, live.count)
        for (a, b) in zip(live, replayed) {
            XCTAssertEqual(a.status, b.status, a.finalURL)
            XCTAssertEqual(a.body, b.body, a.finalURL)
            XCTAssertEqual(a.contentType, b.contentType, a.finalURL)
            XCTAssertEqual(a.finalURL, b.finalURL)
        }
        XCTAssertEqual(replay.misses, [])

        // The canonical request: another body, or another value of a field Vary names, is
        // not the recorded request.
        var otherBody = post
        otherBody.body = .data(Data("name=other".utf8))
        var french = english
        french.setValue("fr", forHeader: "X-Lang")
        for r in [otherBody, french, Request(url: URL(string: requests[0].url.absoluteString + "?q=1")!)] {
            do {
                _ = try await session.data(for: r)
                XCTFail("\(r) was answered from the archive")
            } catch let e as PorterError {
                XCTAssertEqual(e.code, .resourceUnavailable)
                XCTAssertTrue(e.message.contains("no recorded response for \(r.method) \(r.url.absoluteString)"), e.message)
            }
        }
        XCTAssertEqual(replay.misses.count, 3)
    }

    /// A HAR written by a browser (the fields Chrome writes, its own `_` fields and all)
    /// replays too.
    func testReplaysABrowserArchive() async throws {
        let text = """
        {"log":{"version":"1.2","creator":{"name":"WebInspector","version":"537.36"},"pages":[],
         "entries":[{"_initiator":{"type":"other"},"_priority":"VeryHigh","cache":{},"connection":"443",
          "request":{"method":"GET","url":"https://api.example.test/v1/items?page=2","httpVersion":"http/2.0",
            "headers":[{"name":":authority","value":"api.example.test"},{"name":"accept","value":"application/json"}],
            "queryString":[{"name":"page","value":"2"}],"cookies":[],"headersSize":-1,"bodySize":0},
          "response":{"status":200,"statusText":"","httpVersion":"http/2.0",
            "headers":[{"name":"content-type","value":"application/json; charset=utf-8"}],"cookies":[],
            "content":{"size":13,"mimeType":"application/json","text":"{\\"items\\":[]}"},
            "redirectURL":"","headersSize":-1,"bodySize":13,"_transferSize":100},
          "serverIPAddress":"192.0.2.1","startedDateTime":"2026-01-01T10:00:00.000Z","time":12.5,
          "timings":{"blocked":1,"dns":-1,"ssl":-1,"connect":-1,"send":0.1,"wait":10,"receive":1.4,"_blocked_queueing":0.5}}]}}
        """
        let file = temporaryFile("browser.har")
        defer { try? FileManager.default.removeItem(at: file) }
        try text.write(to: file, atomically: true, encoding: .utf8)
        var configuration = SessionConfiguration.ephemeral
        try HARReplay(contentsOf: file).attach(to: &configuration)
        let (data, response) = try await Session(configuration: configuration)
            .data(from: URL(string: "https://api.example.test/v1/items?page=2")!)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "{\"items\":[]}")
        XCTAssertEqual(response.statusCode, 200)
        XCTAssertEqual(response.mimeType, "application/json")
    }
}

/// The fields HAR 1.2 requires (http://www.softwareishard.com/blog/har-12-spec/), with
/// their JSON types: what browsers' importers read.
enum HARSchema {
    static func problems(in json: Any) -> [String] {
        var out: [String] = []
        func need(_ object: Any?, _ path: String, _ fields: [String: String]) {
            guard let o = object as? [String: Any] else { out.append("\(path): not an object"); return }
            for (name, type) in fields.sorted(by: { $0.key < $1.key }) {
                guard let v = o[name] else { out.append("\(path).\(name): missing"); continue }
                let ok: Bool
                switch type {
                case "string": ok = v is String
                case "number": ok = v is NSNumber
                case "array": ok = v is [Any]
                case "object": ok = v is [String: Any]
                default: ok = false
                }
                if !ok { out.append("\(path).\(name): not a \(type) (\(v))") }
            }
        }
        need(json, "$", ["log": "object"])
        guard let log = (json as? [String: Any])?["log"] as? [String: Any] else { return out }
        need(log, "log", ["version": "string", "creator": "object", "entries": "array"])
        if log["version"] as? String != "1.2" { out.append("log.version: not \"1.2\"") }
        need(log["creator"], "log.creator", ["name": "string", "version": "string"])
        let iso = ISO8601DateFormatter()
        iso.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for (i, e) in ((log["entries"] as? [Any]) ?? []).enumerated() {
            let p = "log.entries[\(i)]"
            need(e, p, ["startedDateTime": "string", "time": "number", "request": "object", "response": "object",
                        "cache": "object", "timings": "object"])
            guard let entry = e as? [String: Any] else { continue }
            if let d = entry["startedDateTime"] as? String, iso.date(from: d) == nil { out.append("\(p).startedDateTime: not ISO 8601: \(d)") }
            need(entry["request"], p + ".request", ["method": "string", "url": "string", "httpVersion": "string", "cookies": "array",
                                                   "headers": "array", "queryString": "array", "headersSize": "number", "bodySize": "number"])
            if let post = (entry["request"] as? [String: Any])?["postData"] {
                need(post, p + ".request.postData", ["mimeType": "string", "text": "string"])
            }
            need(entry["response"], p + ".response", ["status": "number", "statusText": "string", "httpVersion": "string",
                                                     "cookies": "array", "headers": "array", "content": "object",
                                                     "redirectURL": "string", "headersSize": "number", "bodySize": "number"])
            need((entry["response"] as? [String: Any])?["content"], p + ".response.content", ["size": "number", "mimeType": "string"])
            for list in ["headers", "cookies", "queryString"] {
                for (side, key) in [("request", list), ("response", list)] {
                    for (j, nv) in (((entry[side] as? [String: Any])?[key] as? [Any]) ?? []).enumerated() {
                        need(nv, "\(p).\(side).\(key)[\(j)]", ["name": "string", "value": "string"])
                    }
                }
            }
            need(entry["timings"], p + ".timings", ["send": "number", "wait": "number", "receive": "number"])
            if let t = entry["timings"] as? [String: Any] {
                for k in ["send", "wait", "receive"] where ((t[k] as? Double) ?? -1) < 0 { out.append("\(p).timings.\(k): negative") }
                for k in ["blocked", "dns", "connect", "ssl"] {
                    if let v = t[k], !(v is NSNumber) { out.append("\(p).timings.\(k): not a number") }
                    if let v = t[k] as? Double, v < 0, v != -1 { out.append("\(p).timings.\(k): negative but not -1") }
                }
            }
        }
        return out
    }
}
