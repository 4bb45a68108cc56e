import Foundation
import PorterCore

/// How many of one plugin's loads may await their `destroy` in this process at once: from
/// the moment a load ended (or was stopped) and its destroy was queued until that destroy
/// returned. While `limit` of them wait, a new start waits its turn (first come, first
/// served) and is admitted when a destroy returns. Loads that are running do not count: a
/// plugin may run as many loads at once as the host asks of it.
///
/// Why: the host counts a load as done when the plugin reports its end, and starts the
/// next one; the plugin frees what the load held only in `destroy`, which runs after.
/// Nothing else ties the two rates together, so when destroys fall behind (a plugin that
/// joins its load's thread there waits for that thread to exit), finished loads pile up
/// with everything they hold — in a worker, a thread stack each until the address-space
/// limit refuses the next thread. Destroys run at once on each load's own queue
/// (`PluginLoad`), so the gate only closes for a plugin whose destroys block.
final class PluginLoadGate: @unchecked Sendable {
    let limit: Int
    private let lock = NSLock()
    /// Loads whose destroy was queued and has not returned.
    private var ending = 0
    /// Starts waiting for the gate to open, in order: the load's token and how to resume it.
    private var waiting: [(token: UInt, admit: @Sendable () -> Void)] = []

    init(limit: Int = PluginIsolation.liveLoadLimit) { self.limit = max(1, limit) }

    /// True when the load `token` may start now; else queues `admit` (called on the
    /// thread of the destroy that opened the gate) and returns false.
    func enter(_ token: UInt, admit: @escaping @Sendable () -> Void) -> Bool {
        lock.withLock {
            if ending < limit, waiting.isEmpty { return true }
            waiting.append((token, admit))
            return false
        }
    }

    /// A load's destroy was queued.
    func destroyQueued() { lock.withLock { ending += 1 } }

    /// A load's destroy returned: the waiting starts go on once fewer than `limit` wait
    /// for theirs.
    func destroyReturned() {
        let admits = lock.withLock { () -> [@Sendable () -> Void] in
            ending = max(0, ending - 1)
            guard ending < limit, !waiting.isEmpty else { return [] }
            defer { waiting.removeAll() }
            return waiting.map(\.admit)
        }
        for admit in admits { admit() }
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

    /// Destroys queued and not returned, and starts waiting (for tests and diagnostics).
    var counts: (ending: Int, waiting: Int) { lock.withLock { (ending, waiting.count) } }
}
