import HTTPTypes
import XCTest
import PorterCore
import PorterSession
@testable import PorterData
import PorterStorage

final class DataURLTests: XCTestCase {
    private func decode(_ s: String) throws -> DataURL { try DataURL.decode(s) }
    private func text(_ s: String) throws -> String { String(decoding: try decode(s).body, as: UTF8.self) }
    private func mime(_ s: String) throws -> String { try decode(s).mimeType.description }

    func testRFC2397Basics() throws {
        XCTAssertEqual(try text("data:,Hello%20World"), "Hello World")
        XCTAssertEqual(try mime("data:,x"), "text/plain;charset=US-ASCII", "RFC 2397 default")
        XCTAssertEqual(try text("data:text/plain;base64,SGVsbG8sIFdvcmxkIQ=="), "Hello, World!")
        XCTAssertEqual(try mime("data:text/html;charset=utf-8,<b>"), "text/html;charset=utf-8")
        XCTAssertEqual(try decode("data:image/gif;base64,R0lGODdhAQABAIAAAP///////ywAAAAAAQABAAACAkQBADs=").body.count, 35)
        XCTAssertEqual(try mime("data:;charset=utf-8,x"), "text/plain;charset=utf-8", "parameters without a type get text/plain")
        XCTAssertEqual(try text("data:,"), "")
    }

    func testBase64OnlyAsTheLastParameter() throws {
        // ";base64" not last: the body is taken literally and base64 is not a parameter.
        XCTAssertEqual(try text("data:text/plain;base64;charset=x,SGk="), "SGk=")
        XCTAssertEqual(try text("data:;BASE64,SGk="), "Hi", "case-insensitive")
        XCTAssertEqual(try text("data:;base64 ,SGk="), "Hi", "the header is trimmed before the base64 check (WHATWG)")
        XCTAssertEqual(try text("data:;base64x,SGk="), "SGk=")
        XCTAssertEqual(try text("data:; base64,SGk="), "Hi", "spaces between ; and base64 are allowed")
        XCTAssertEqual(try text("data:text/plain;charset=utf-8;base64,SGk="), "Hi")
        XCTAssertEqual(try mime("data:text/plain;charset=utf-8;base64,SGk="), "text/plain;charset=utf-8")
        XCTAssertEqual(try text("data:base64,SGk="), "SGk=", "without ';' it is a bad type, not base64")
    }

    func testForgivingBase64() throws {
        XCTAssertEqual(try text("data:;base64,SGVs bG8=\n"), "Hello", "ASCII whitespace is ignored")
        XCTAssertEqual(try text("data:;base64,SGVsbG8"), "Hello", "padding is optional")
        XCTAssertEqual(try text("data:;base64,SGVsbA=="), "Hell")
        XCTAssertEqual(try text("data:;base64,SGVsbA"), "Hell")
        XCTAssertEqual(try text("data:;base64,%53%47%6B%3D"), "Hi", "percent-decoded before base64")
        XCTAssertEqual(try text("data:;base64,"), "")
        for bad in ["data:;base64,SGVsbA=", "data:;base64,S", "data:;base64,SGk=x", "data:;base64,SG*k",
                    "data:;base64,SGVsbA===", "data:;base64,=SGk", "data:;base64,SGVsb===="] {
            XCTAssertThrowsError(try decode(bad), bad) { e in
                XCTAssertEqual((e as? PorterError)?.code, .cannotDecodeRawData, bad)
            }
        }
    }

    func testPercentDecodingAndFragments() throws {
        XCTAssertEqual(try text("data:,a%2Cb%"), "a,b%", "a lone % stays")
        XCTAssertEqual(try text("data:,100%zz"), "100%zz")
        XCTAssertEqual(try text("data:,x#frag"), "x", "the fragment is not data")
        XCTAssertEqual(try text("data:,a,b"), "a,b", "only the first comma separates")
        XCTAssertEqual(try decode("data:,%FF%00").body, Data([0xFF, 0x00]))
        XCTAssertEqual(try text("DATA:,upper"), "upper")
        XCTAssertEqual(try text("data:,é"), "é")
    }

    func testMediaTypes() throws {
        XCTAssertEqual(try mime("data:TEXT/HTML;CHARSET=UTF-8,x"), "text/html;charset=UTF-8", "type and names lower-cased, value kept")
        XCTAssertEqual(try mime("data: text/html ,x"), "text/html", "surrounding whitespace stripped")
        XCTAssertEqual(try mime("data:text/html;a=\"b;c\",x"), "text/html;a=\"b;c\"")
        XCTAssertEqual(try mime("data:text/html;a=1;a=2,x"), "text/html;a=1", "the first of a repeated parameter wins")
        XCTAssertEqual(try mime("data:text,x"), "text/plain;charset=US-ASCII", "no subtype: the default")
        XCTAssertEqual(try mime("data:text/,x"), "text/plain;charset=US-ASCII")
        XCTAssertEqual(try mime("data:te xt/plain,x"), "text/plain;charset=US-ASCII")
        XCTAssertEqual(try mime("data:image/svg+xml;utf8,<svg/>"), "image/svg+xml", "a parameter with no value is dropped")
        XCTAssertEqual(try mime("data:text/plain;charset=\"utf\\-8\",x"), "text/plain;charset=utf-8")
        XCTAssertEqual(try mime("data:text/plain;x=,y"), "text/plain")
    }

    func testMalformed() {
        for bad in ["data:text/plain", "data:", "http://x,y", "dat:,x", "data:no-comma#a,b"] {
            XCTAssertThrowsError(try decode(bad), bad) { e in
                XCTAssertEqual((e as? PorterError)?.code, .badURL, bad)
            }
        }
    }

    func testMIMETypeParser() {
        XCTAssertNil(MIMEType(parsing: ""))
        XCTAssertNil(MIMEType(parsing: "/"))
        XCTAssertNil(MIMEType(parsing: "a/b c"))
        XCTAssertEqual(MIMEType(parsing: "a/b ; c=d ")?.description, "a/b;c=d")
        XCTAssertEqual(MIMEType(parsing: "a/b;c=\"\"")?.description, "a/b;c=\"\"")
        XCTAssertEqual(MIMEType(parsing: "a/b;c=\"x y\"")?.parameter("C"), "x y")
        XCTAssertEqual(MIMEType(parsing: "a/b;c=\"unterminated")?.parameter("c"), "unterminated")

        // Cut at ASCII delimiters only: text beyond ASCII stays whole.
        XCTAssertEqual(MIMEType(parsing: "a/b;c=\"\\é\\\"x\"")?.parameter("c"), "é\"x", "escapes, one before a two-byte scalar")
        XCTAssertEqual(MIMEType(parsing: "a/b;c=\"é\";d=ü")?.parameter("c"), "é")
        XCTAssertNil(MIMEType(parsing: "a/b;c=€")?.parameter("c"), "U+20AC is outside quoted-string's obs-text")
        XCTAssertEqual(MIMEType(parsing: "\t A/B\t;\tcharset = x")?.description, "a/b", "'charset ' is not a token")
        XCTAssertEqual(MIMEType(parsing: "text/html;charset=UTF-8 \t")?.parameter("charset"), "UTF-8")
        XCTAssertEqual(MIMEType(parsing: "text/html;;;charset=a;charset=b")?.parameter("charset"), "a")
        XCTAssertEqual(MIMEType(parsing: "text/html;x=\"a\\")?.parameter("x"), "a\\", "a backslash at the end stays")
        XCTAssertNil(MIMEType(parsing: "té/b"))
    }

    /// One or more fields of a name: `combined` agrees with the subscript.
    func testCombinedFieldValue() {
        var f = HTTPFields()
        XCTAssertNil(f.combined(.contentType))
        f.append(HTTPField(name: .contentType, value: "text/plain"))
        XCTAssertEqual(f.combined(.contentType), "text/plain")
        f.append(HTTPField(name: .contentEncoding, value: "gzip"))
        f.append(HTTPField(name: .contentEncoding, value: "br"))
        XCTAssertEqual(f.combined(.contentEncoding), "gzip, br")
        f.append(HTTPField(name: .cookie, value: "a=1"))
        f.append(HTTPField(name: .cookie, value: "b=2"))
        XCTAssertEqual(f.combined(.cookie), f[.cookie])
    }

    func testLargeBase64MatchesFoundation() throws {
        var bytes = [UInt8](repeating: 0, count: 1_000_003)
        for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i &* 2654435761 >> 7) }
        let original = Data(bytes)
        let url = "data:application/octet-stream;base64," + original.base64EncodedString()
        XCTAssertEqual(try decode(url).body, original)
        let wrapped = "data:;base64," + original.base64EncodedString(options: .lineLength76Characters)
        XCTAssertEqual(try decode(wrapped).body, original, "line breaks every 76 characters are whitespace")
    }

    /// Differential check of the decoder's fast and slow paths against Foundation's
    /// encoder: every length up to 300, with whitespace and padding varied.
    func testForgivingBase64AgainstFoundationAtEveryLength() throws {
        var rng = SystemRandomNumberGenerator()
        for length in 0...300 {
            let original = Data((0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) })
            var encoded = Array(original.base64EncodedString().utf8)
            if Bool.random(using: &rng) { while encoded.last == UInt8(ascii: "=") { encoded.removeLast() } }
            if length > 0 && Bool.random(using: &rng) {
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    encoded.insert([0x20, 0x0A, 0x09, 0x0D, 0x0C].randomElement(using: &rng)!,
                                   at: Int.random(in: 0...encoded.count, using: &rng))
                }
            }
            let url = "data:;base64," + String(decoding: encoded, as: UTF8.self)
            XCTAssertEqual(try DataURL.decode(url).body, original, "length \(length): \(url)")
            if !encoded.isEmpty {
                var broken = encoded
                broken.insert(UInt8(ascii: "*"), at: Int.random(in: 0..<broken.count, using: &rng))
                XCTAssertThrowsError(try DataURL.decode("data:;base64," + String(decoding: broken, as: UTF8.self)), "length \(length)")
            }
        }
    }

    func testHandlerThroughASession() async throws {
        let registry = HandlerRegistry()
        registry.register(DataHandler.self)
        var config = SessionConfiguration.ephemeral
        config.registry = registry
        let session = Session(configuration: config)
        let (data, response) = try await session.data(from: URL(string: "data:text/plain;charset=utf-8;base64,SGk=")!)
        XCTAssertEqual(data, Data("Hi".utf8))
        XCTAssertEqual(response.mimeType, "text/plain")
        XCTAssertEqual(response.textEncodingName, "utf-8")
        XCTAssertEqual(response.expectedContentLength, 2)
        let badURL = URL(string: "data:;base64,%%%")!
        do {
            _ = try await session.data(from: badURL)
            XCTFail()
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .cannotDecodeRawData)
            XCTAssertEqual(e.url, badURL)
        }
        // A body larger than one chunk arrives whole.
        let big = Data(repeating: 7, count: 3 * DataHandler.chunkSize + 5)
        let (bigData, _) = try await session.data(from: URL(string: "data:;base64," + big.base64EncodedString())!)
        XCTAssertEqual(bigData, big)
    }
}
