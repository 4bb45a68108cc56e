import Foundation

/// Fixed-size byte buffers recycled through `Data`'s deallocator: a handler that reads
/// into them allocates nothing per chunk once the pool is warm, and memory stays flat
/// (buffers freed on another thread would otherwise pile up in malloc's per-thread
/// arenas). The `Data` it hands out is ordinary, zero-based and owned by whoever holds
/// it; when the last copy goes, the buffer returns here.
public final class BufferPool: @unchecked Sendable {
    public let bufferSize: Int
    private let keep: Int
    private let lock = NSLock()
    private var free: [UnsafeMutableRawPointer] = []

    /// `keep`: how many idle buffers to hold; more are released to the system.
    public init(bufferSize: Int, keep: Int) {
        self.bufferSize = bufferSize
        self.keep = keep
    }

    deinit { for p in free { p.deallocate() } }

    /// A buffer of `bufferSize` bytes to fill, then pass to `data(_:count:)`.
    public func take() -> UnsafeMutableRawPointer {
        lock.lock()
        if let p = free.popLast() {
            lock.unlock()
            return p
        }
        lock.unlock()
        return UnsafeMutableRawPointer.allocate(byteCount: bufferSize, alignment: 16)
    }

    /// Returns a buffer that was not wrapped in `Data`.
    public func give(_ p: UnsafeMutableRawPointer) {
        lock.lock()
        if free.count < keep {
            free.append(p)
            lock.unlock()
        } else {
            lock.unlock()
            p.deallocate()
        }
    }

    /// Wraps the first `count` bytes of a taken buffer without copying.
    public func data(_ p: UnsafeMutableRawPointer, count: Int) -> Data {
        Data(bytesNoCopy: p, count: count, deallocator: .custom { [weak self] ptr, _ in
            if let self { self.give(ptr) } else { ptr.deallocate() }
        })
    }
}
