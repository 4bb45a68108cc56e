import Foundation
import Glibc

/// Copies what a worker writes to its stderr pipe to this process's stderr, line by line:
/// each line prefixed with the plugin's name, control characters escaped (no escape
/// sequence of a plugin's reaches the user's terminal), at most `lineLimit` bytes of a
/// line and `totalLimit` bytes in all.
///
/// A thread copies as the bytes come; `drain()` copies at once whatever the worker wrote
/// before an event the host saw (the end of a load, the worker's exit), so what a plugin
/// wrote before its load ended is on stderr before the load's end is reported — and
/// before a program that exits at that point is gone. No timing decides what is shown.
final class WorkerStderr: @unchecked Sendable {
    static let lineLimit = 1024
    static let totalLimit = 1 << 20

    private let fd: Int32
    private let prefix: String
    /// Held while bytes are read and copied, so the thread and `drain()` keep the order.
    private let lock = NSLock()
    // Under the lock:
    private var line: [UInt8] = []
    private var cut = false
    private var written = 0
    /// The pipe said end of file (every writer closed it).
    private var ended = false

    private init(fd: Int32, plugin: String) {
        self.fd = fd
        self.prefix = "porter: plugin \(WorkerStderr.escaped(Array(plugin.utf8.prefix(128)))): "
    }

    /// Starts copying from `fd` (the read end of the worker's stderr pipe; taken over:
    /// closed once the worker and everything it started closed the other end).
    static func start(from fd: Int32, plugin: String, pid: pid_t) -> WorkerStderr {
        // Non-blocking: `drain()` must never wait for bytes that are not there.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let copier = WorkerStderr(fd: fd, plugin: plugin)
        let thread = Thread { copier.copyUntilEnd() }
        thread.name = "porter-plugin-\(pid)-stderr"
        thread.stackSize = 128 << 10
        thread.start()
        return copier
    }

    /// Copies everything in the pipe now — at least all the worker wrote before the
    /// caller saw its event — without waiting for more.
    func drain() {
        lock.withLock {
            var pending: Int32 = 0
            // Only what is there now: a worker that keeps writing cannot hold the caller.
            guard !ended, ioctl(fd, UInt(FIONREAD), &pending) == 0 else { return }
            var left = Int(pending)
            while left > 0 {
                let n = readOnce(max: left)
                if n <= 0 { return }
                left -= n
            }
        }
    }

    /// The copier thread: waits for bytes (or the end) and copies them, until the end.
    private func copyUntilEnd() {
        while true {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, -1)
            if r < 0 && errno == EINTR { continue }
            let over = lock.withLock { () -> Bool in
                if r < 0 { finishLine(); ended = true }
                if !ended { _ = readOnce(max: 4096) }
                return ended
            }
            if over { break }
        }
        Glibc.close(fd)
    }

    /// One read of at most `max` bytes, copied; the count read, 0 at the end, -1 when
    /// nothing is there. Under the lock.
    private func readOnce(max: Int) -> Int {
        var buffer = [UInt8](repeating: 0, count: min(max, 4096))
        var n: Int
        repeat {
            n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        } while n < 0 && errno == EINTR
        if n < 0 {
            if errno == EAGAIN || errno == EWOULDBLOCK { return -1 }
            finishLine()
            ended = true
            return 0
        }
        if n == 0 {
            finishLine()
            ended = true
            return 0
        }
        for byte in buffer[0..<n] {
            if byte == 0x0A { finishLine(); continue }
            if line.count < WorkerStderr.lineLimit { line.append(byte) } else { cut = true }
        }
        return n
    }

    /// Writes the line so far (if any) to stderr. Under the lock.
    private func finishLine() {
        guard !line.isEmpty || cut else { return }
        if written < WorkerStderr.totalLimit {
            let text = prefix + WorkerStderr.escaped(line) + (cut ? "…" : "") + "\n"
            written += text.utf8.count
            if written >= WorkerStderr.totalLimit { FileHandle.standardError.write(Data((text + prefix + "(more output dropped)\n").utf8)) }
            else { FileHandle.standardError.write(Data(text.utf8)) }
        }
        line.removeAll(keepingCapacity: true)
        cut = false
    }

    /// The line as text with every control character (C0, DEL, C1) and invalid UTF-8
    /// written as an escape, so nothing in it acts on a terminal.
    static func escaped(_ bytes: [UInt8]) -> String {
        var out = ""
        for scalar in String(decoding: bytes, as: UTF8.self).unicodeScalars {
            let v = scalar.value
            switch v {
            case 0x09: out += "\\t"
            case 0x0D: out += "\\r"
            case 0x5C: out += "\\\\"
            case 0..<0x20, 0x7F..<0xA0, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069, 0xFFFD:
                out += String(format: "\\u{%X}", v)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
