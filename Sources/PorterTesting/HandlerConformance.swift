@_exported import PorterTestKit
import PorterCore
import XCTest
import Foundation

/// The handler contract as an XCTest assertion: runs `ConformanceKit` against an
/// in-process handler and fails the test with each broken rule and its fix.
///
///     func testMyHandlerKeepsTheContract() {
///         HandlerConformance.check(MyHandler.self, url: URL(string: "my://example/item")!)
///     }
public enum HandlerConformance {
    /// Checks a `ProtocolHandler` type. Returns the report (also when it passed).
    @discardableResult
    public static func check(_ type: any ProtocolHandler.Type, url: URL, options: ConformanceOptions = ConformanceOptions(),
                             file: StaticString = #filePath, line: UInt = #line) -> ConformanceReport {
        fail(ConformanceKit.run(type, url: url, options: options), file: file, line: line)
    }

    /// Checks any handler factory (a plugin's, a wrapper's) with a request of your own.
    @discardableResult
    public static func check(factory: any ProtocolHandlerFactory, request: Request, options: ConformanceOptions = ConformanceOptions(),
                             file: StaticString = #filePath, line: UInt = #line) -> ConformanceReport {
        fail(ConformanceKit.run(factory: factory, request: request, options: options), file: file, line: line)
    }

    private static func fail(_ report: ConformanceReport, file: StaticString, line: UInt) -> ConformanceReport {
        for finding in report.findings {
            XCTFail("\(report.handler) breaks the handler contract:\n\(finding)", file: file, line: line)
        }
        return report
    }
}
