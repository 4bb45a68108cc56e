import Foundation
import PorterCore

/// How many loads of one plugin may be alive in this process at once: from the plugin's
/// `start` until its `destroy` returned. Past `limit` a start waits its turn (first come,
/// first served) and is admitted when an earlier load's destroy returns.
///
/// Why: the host counts a load as done when the plugin reports its end, and starts the
/// next one; the plugin frees what the load held only in `destroy`, which runs after.
/// Nothing else ties the two rates together, so when destroys fall behind (a plugin that
/// joins its load's thread there waits for that thread to exit), finished loads pile up
/// with everything they hold — in a worker, a thread stack each until the address-space
/// limit refuses the next thread.
final class PluginLoadGate: @unchecked Sendable {
    let limit: Int
    private let lock = NSLock()
    private var live = 0
    /// Starts waiting for a slot, in order: the load's token and how to resume it.
    private var waiting: [(token: UInt, admit: @Sendable () -> Void)] = []

    init(limit: Int = PluginIsolation.liveLoadLimit) { self.limit = max(1, limit) }

    /// Takes a slot for the load `token` and returns true, or queues `admit` (called with
    /// the slot taken, on the thread of the `leave` that freed it) and returns false.
    func enter(_ token: UInt, admit: @escaping @Sendable () -> Void) -> Bool {
        lock.withLock {
            if live < limit, waiting.isEmpty {
                live += 1
                return true
            }
            waiting.append((token, admit))
            return false
        }
    }

    /// Gives a slot back: the first waiting start gets it.
    func leave() {
        let next = lock.withLock { () -> (@Sendable () -> Void)? in
            if !waiting.isEmpty { return waiting.removeFirst().admit }
            live = max(0, live - 1)
            return nil
        }
        next?()
    }

    /// Takes the load `token` out of the line (it was stopped before its turn); false if
    /// it was not waiting.
    func withdraw(_ token: UInt) -> Bool {
        lock.withLock {
            guard let i = waiting.firstIndex(where: { $0.token == token }) else { return false }
            waiting.remove(at: i)
            return true
        }
    }

    /// Loads holding a slot, and starts waiting for one (for tests and diagnostics).
    var counts: (live: Int, waiting: Int) { lock.withLock { (live, waiting.count) } }
}
