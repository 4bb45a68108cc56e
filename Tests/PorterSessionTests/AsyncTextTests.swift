import XCTest
@testable import PorterCore
@testable import PorterSession

/// pieces://h/N — the text in the request property "text", delivered N bytes at a time,
/// so that line endings and UTF-8 sequences fall across chunk boundaries.
final class PiecesHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["pieces"] }
    let request: Request
    let client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }
    func startLoading() {
        let bytes = (request.property(forKey: "raw") as? Data).map(Array.init) ?? Array(((request.property(forKey: "text") as? String) ?? "").utf8)
        let size = max(1, Int(request.url.lastPathComponent) ?? 1)
        let client = self.client, url = request.url
        Thread.detachNewThread {
            client.didReceive(okResponse(url, length: Int64(bytes.count), mime: "text/plain"), cacheStoragePolicy: .notAllowed)
            var i = 0
            while i < bytes.count {
                client.didLoad(Data(bytes[i..<min(bytes.count, i + size)]))
                i += size
            }
            client.didFinishLoading()
        }
    }
    func stopLoading() {}
}

/// Issue 14: `AsyncBytes.lines` and `characters`, as Foundation's.
final class AsyncTextTests: XCTestCase {
    private func session() -> Session {
        Session(configuration: testConfiguration { $0.handlers = [TypeHandlerFactory(PiecesHandler.self)] })
    }

    private func bytes(_ text: String, piece: Int) async throws -> AsyncBytes {
        var r = Request(url: URL(string: "pieces://h/\(piece)")!)
        r.setProperty(text, forKey: "text")
        return try await session().bytes(for: r).0
    }

    func testLinesEndAtEveryKindOfLineEnding() async throws {
        let text = "one\ntwo\r\nthree\rfour\u{85}five\u{2028}six\u{2029}\n\nlast é 🇫🇷"
        let expected = ["one", "two", "three", "four", "five", "six", "", "", "last é 🇫🇷"]
        for piece in [1, 2, 3, 7, 1000] {
            var lines: [String] = []
            for try await line in try await bytes(text, piece: piece).lines { lines.append(line) }
            XCTAssertEqual(lines, expected, "pieces of \(piece) bytes")
        }
        // A final line ending does not make an empty last line.
        var lines: [String] = []
        for try await line in try await bytes("a\nb\n", piece: 1).lines { lines.append(line) }
        XCTAssertEqual(lines, ["a", "b"])
    }

    func testCharactersStayWholeAcrossChunks() async throws {
        // é as e + combining acute, a flag (two scalars), a family emoji (ZWJ sequence).
        let text = "ae\u{301}🇫🇷x👨‍👩‍👧z"
        for piece in [1, 2, 5, 1000] {
            var characters: [Character] = []
            for try await c in try await bytes(text, piece: piece).characters { characters.append(c) }
            XCTAssertEqual(characters, Array(text), "pieces of \(piece) bytes")
        }
        // Malformed UTF-8 becomes U+FFFD, as String(decoding:) does.
        var r = Request(url: URL(string: "pieces://h/1")!)
        r.setProperty(Data([0x61, 0xC3, 0xFF, 0x62]), forKey: "raw")   // a, a broken sequence, b
        let (raw, _) = try await session().bytes(for: r)
        var characters: [Character] = []
        for try await c in raw.characters { characters.append(c) }
        XCTAssertEqual(String(characters), String(decoding: [0x61, 0xC3, 0xFF, 0x62] as [UInt8], as: UTF8.self))
    }
}
