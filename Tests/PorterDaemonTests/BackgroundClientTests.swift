import Foundation
import PorterBackground
@testable import PorterSession
import XCTest

/// PorterSession depends on no IPC module: a background session finds its client by the
/// mangled type name of PorterBackground's provider (`Session.backgroundClientProvider`).
/// A rename or move of the provider that leaves the name behind fails here by name,
/// rather than as every background test timing out on tasks that fail at once.
final class BackgroundClientTests: XCTestCase {
    func testBackgroundSessionsFindPorterBackgroundsClient() {
        let found = Session.backgroundClientProvider.map { ObjectIdentifier($0) }
        XCTAssertEqual(found, ObjectIdentifier(BackgroundLinkProvider.self),
                       "Session.backgroundClientProvider's name does not name PorterBackground.BackgroundLinkProvider")
    }
}
