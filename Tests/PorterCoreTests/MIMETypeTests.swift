import XCTest
@testable import PorterCore

final class MIMETypeTests: XCTestCase {
    /// `bareEssence`, the shortcut the http handler takes for a plain Content-Type, gives
    /// exactly what the full parse gives whenever it answers, and leaves every other
    /// value (parameters, upper case, spaces, bad tokens) to the parse.
    func testBareEssenceAgreesWithTheParse() {
        let bare = ["application/octet-stream", "text/html", "image/svg+xml", "a/b", "application/vnd.api+json",
                    "x-y/z.w", "text/x-c++"]
        for text in bare {
            XCTAssertEqual(MIMEType.bareEssence(text), text)
            XCTAssertEqual(MIMEType.bareEssence(text), MIMEType(parsing: text)?.essence, text)
        }
        let others = ["Text/HTML", "text/html; charset=utf-8", "text/html;", " text/html", "text/html ", "text/",
                      "/html", "text", "", "text//html", "text/ht ml", "text/h\u{e9}", "text/html/x", "te\"xt/html",
                      "text/html,text/plain"]
        for text in others {
            XCTAssertNil(MIMEType.bareEssence(text), text)
        }
        // What the parse makes of those: the handler's answer for them is unchanged.
        XCTAssertEqual(MIMEType(parsing: "Text/HTML")?.essence, "text/html")
        XCTAssertEqual(MIMEType(parsing: "text/html; charset=utf-8")?.parameter("charset"), "utf-8")
        XCTAssertNil(MIMEType(parsing: "text/"))
    }
}
