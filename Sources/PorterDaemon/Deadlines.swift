/// The scheduler's timers, as one queue of deadlines: a job waiting for its earliest
/// begin or its next retry costs an entry here (an id and a time), not a timer of its
/// own; the daemon arms one timer, for the earliest. A value without clocks: the shell
/// asks what is due and when to wake.
struct Deadlines: Sendable {
    /// The live deadline of each job (one per job: a new one replaces the old).
    private var due: [Int: Double] = [:]
    /// A min-heap of (time, job); entries no longer in `due` are dropped when they surface.
    private var heap: [(at: Double, id: Int)] = []

    var isEmpty: Bool { due.isEmpty }
    var count: Int { due.count }

    /// When the earliest live deadline falls, if any.
    mutating func earliest() -> Double? {
        dropStale()
        return heap.first?.at
    }

    mutating func set(_ id: Int, at: Double) {
        due[id] = at
        heap.append((at, id))
        var i = heap.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            guard heap[i].at < heap[parent].at else { break }
            heap.swapAt(i, parent)
            i = parent
        }
        // Cancelled entries wait in the heap until they surface; when they outnumber the
        // live ones, the heap is rebuilt so it stays the size of what is due.
        if heap.count > 64, heap.count > 2 * due.count { rebuild() }
    }

    mutating func cancel(_ id: Int) { due[id] = nil }

    /// The deadlines due at `now`, earliest first; each is removed.
    mutating func popDue(now: Double) -> [(id: Int, at: Double)] {
        var out: [(id: Int, at: Double)] = []
        while let top = heap.first, top.at <= now {
            popTop()
            if due[top.id] == top.at {
                due[top.id] = nil
                out.append((top.id, top.at))
            }
        }
        return out
    }

    private mutating func dropStale() {
        while let top = heap.first, due[top.id] != top.at { popTop() }
    }

    private mutating func popTop() {
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        var i = 0
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < heap.count, heap[l].at < heap[m].at { m = l }
            if r < heap.count, heap[r].at < heap[m].at { m = r }
            if m == i { return }
            heap.swapAt(i, m)
            i = m
        }
    }

    private mutating func rebuild() {
        heap = due.map { (at: $0.value, id: $0.key) }.sorted { $0.at < $1.at }
    }
}
