import XCTest
@testable import PorterStorage

/// The umask read from /proc/self/status (without setting it) is the process's own.
final class FileCreationMaskTests: XCTestCase {
    func testTheMaskIsTheProcesssOwnAndStaysUnchanged() {
        let saved = umask(0o027)
        defer { umask(saved) }
        XCTAssertEqual(FileCreationMask.fromProcStatus(), 0o027, "read from /proc/self/status, not from the fallback")
        XCTAssertEqual(FileCreationMask.current, 0o027)
        umask(0o077)
        XCTAssertEqual(FileCreationMask.current, 0o077)
        // Reading it did not change it.
        XCTAssertEqual(umask(0o077), 0o077)
    }

    func testTheStatusLineIsParsedStrictly() {
        func parse(_ text: String) -> mode_t? { FileCreationMask.parse(ArraySlice(Array(text.utf8))) }
        XCTAssertEqual(parse("Name:\tporter\nUmask:\t0022\nState:\tR (running)\n"), 0o022)
        XCTAssertEqual(parse("Umask:\t0777"), 0o777, "the last line needs no newline")
        XCTAssertEqual(parse("Umask:  007 \n"), 0o007, "blanks around the value")
        XCTAssertNil(parse("Name:\tporter\nState:\tR\n"), "no Umask line: the caller falls back")
        XCTAssertNil(parse("Umask:\t0028\n"), "not octal")
        XCTAssertNil(parse("Umask:\t\n"))
        XCTAssertNil(parse("Umask:\t0 22\n"))
        XCTAssertNil(parse("Umask:\t0000000022\n"), "too long to be a mode")
        XCTAssertNil(parse(""))
    }
}
