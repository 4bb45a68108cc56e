/// Which loads may start now when a loop limits its connections per host, and in which
/// order the others start later: higher `Request.priority` first, then first come.
///
/// libcurl queues a transfer over CURLMOPT_MAX_HOST_CONNECTIONS itself, first come first
/// served, with no notion of priority; so a loop admits to its multi handle only as many
/// loads per host as they may have connections and keeps the rest here. Only loads that
/// use a connection alone are counted (HTTP/1.x, FTP): loads that may share one (HTTP/2
/// over TLS) never wait here — libcurl multiplexes them, and their priority is their
/// stream weight. No I/O: the loop performs what it answers (and tests drive it alone).
struct HostQueue<ID: Hashable> {
    /// Loads per host that may run at once (0: no limit).
    let limit: Int
    private struct Host {
        var running: Set<ID> = []
        /// Highest priority first; equal priorities in arrival order.
        var waiting: [(id: ID, priority: Float)] = []

        mutating func arrive(_ id: ID, priority: Float, limit: Int) -> Bool {
            if limit <= 0 || running.count < limit {
                running.insert(id)
                return true
            }
            let at = waiting.firstIndex { $0.priority < priority } ?? waiting.endIndex
            waiting.insert((id, priority), at: at)
            return false
        }

        /// The load that starts in `id`'s place, and whether the host has no load left.
        mutating func leave(_ id: ID) -> (next: ID?, idle: Bool) {
            var next: ID?
            if running.remove(id) != nil {
                if !waiting.isEmpty {
                    let first = waiting.removeFirst().id
                    running.insert(first)
                    next = first
                }
            } else {
                waiting.removeAll { $0.id == id }
            }
            return (next, running.isEmpty && waiting.isEmpty)
        }
    }
    private var hosts: [String: Host] = [:]
    private var hostOf: [ID: String] = [:]

    init(limit: Int) { self.limit = limit }

    /// A load for `host` arrives: true when it may start now; false when it waits (a
    /// later `leave` names it).
    mutating func arrive(_ id: ID, host: String, priority: Float) -> Bool {
        hostOf[id] = host
        // Changed in place (the dictionary's modify accessor): a copy taken out and
        // written back would share, and so copy, the host's `running` set every time.
        return hosts[host, default: Host()].arrive(id, priority: priority, limit: limit)
    }

    /// A load ended (or was cancelled, waiting or not): the load that starts in its
    /// place, if any.
    mutating func leave(_ id: ID) -> ID? {
        guard let host = hostOf.removeValue(forKey: id), let index = hosts.index(forKey: host) else { return nil }
        let (next, idle) = hosts.values[index].leave(id)
        if idle { hosts.remove(at: index) }
        return next
    }

    /// Loads waiting for a slot, all hosts.
    var waitingCount: Int { hosts.values.reduce(0) { $0 + $1.waiting.count } }
}
