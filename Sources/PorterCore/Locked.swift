/// Porter's version, for User-Agent strings and listings.
public let porterVersion = "0.1.0"

import Synchronization

/// A value behind a lock: the one way Porter shares mutable state across threads.
public final class Locked<Value>: @unchecked Sendable {
    /// The lock lives in this object (a futex word): an `NSLock` was two more allocations
    /// (the object and its pthread mutex) per `Locked`, and a task makes several.
    @usableFromInline let mutex = Mutex<Void>(())
    /// Unchecked by the runtime's exclusivity enforcement (a call per access, and every
    /// lock in Porter goes through here): the lock already makes each access exclusive,
    /// and a nested `withLock` on the same value deadlocks before it could overlap.
    @usableFromInline @exclusivity(unchecked) var value: Value
    public init(_ value: Value) { self.value = value }
    /// Inlinable, so each caller gets it specialised for its types: unspecialised, the
    /// `R?` below asked the runtime for `Optional<R>`'s metadata on every call.
    @inlinable
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        // The result leaves through a local: `Mutex.withLock` wants a `sending` result,
        // which a generic one cannot promise; the lock still covers the whole call.
        var result: R?
        try mutex.withLock { _ in result = try body(&value) }
        // Set unless `body` threw (and then this line is not reached).
        return result.unsafelyUnwrapped
    }
    @inlinable
    public var current: Value { withLock { $0 } }
}

package final class AtomicCounter: Sendable {
    private let value = Atomic<UInt64>(0)
    package init() {}
    package func next() -> UInt64 {
        value.wrappingAdd(1, ordering: .relaxed).newValue
    }
}
