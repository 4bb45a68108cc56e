import Foundation
import XCTest

/// A test case with its own nginx (`NginxFixture`): started once before the class's first
/// test, stopped after its last. A fixture that failed to start fails every test of the
/// class with its reason. A subclass that needs the process set up first (bootstrap,
/// another server) overrides `class func setUp()` and calls `super.setUp()` after that.
///
/// The subclasses live in other test modules: swift-corelibs-xctest's test discovery finds
/// their test methods through a base class in this module (checked with `swift test list`).
open class NginxTestCase: XCTestCase {
    /// Per class: each subclass starts and stops its own server.
    nonisolated(unsafe) private static var fixtures: [ObjectIdentifier: Result<NginxFixture, Error>] = [:]
    private static let lock = NSLock()

    /// The running server (set before each test).
    public private(set) var nginx: NginxFixture!

    override open class func setUp() {
        super.setUp()
        let started = Result { try NginxFixture() }
        lock.withLock { fixtures[ObjectIdentifier(self)] = started }
    }

    override open class func tearDown() {
        let fixture = lock.withLock { fixtures.removeValue(forKey: ObjectIdentifier(self)) }
        if case .success(let n)? = fixture { n.stop() }
        super.tearDown()
    }

    override open func setUpWithError() throws {
        try super.setUpWithError()
        switch Self.lock.withLock({ Self.fixtures[ObjectIdentifier(type(of: self))] }) {
        case .success(let n)?: nginx = n
        case .failure(let e)?: throw e
        case nil: throw NginxFixture.Failure.setup("no nginx fixture for \(type(of: self))")
        }
    }
}
