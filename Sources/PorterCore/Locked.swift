/// Porter's version, for User-Agent strings and listings.
public let porterVersion = "0.1.0"

import Foundation

/// A value behind a lock: the one way Porter shares mutable state across threads.
public final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    /// Unchecked by the runtime's exclusivity enforcement (a call per access, and every
    /// lock in Porter goes through here): the lock already makes each access exclusive,
    /// and a nested `withLock` on the same value deadlocks before it could overlap.
    @exclusivity(unchecked) private var value: Value
    public init(_ value: Value) { self.value = value }
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
    public var current: Value { withLock { $0 } }
}

package final class AtomicCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value: UInt64 = 0
    package init() {}
    package func next() -> UInt64 {
        lock.lock(); defer { lock.unlock() }
        value &+= 1
        return value
    }
}
