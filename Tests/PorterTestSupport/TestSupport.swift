import Foundation
import PorterCore
import PorterSession

/// A download delegate for resume tests: cancels with resume data once `cancelAt` bytes
/// are written (when set), and records the resume offset, the finished file and the error.
public final class ResumeRecorder: DownloadDelegate, @unchecked Sendable {
    public let lock = NSLock()
    public private(set) var resumeData: Data?
    public private(set) var resumedAt: Int64?
    public private(set) var file: Data?
    public private(set) var error: PorterError?
    public let done = DispatchSemaphore(value: 0)
    let cancelAt: Int64?

    public init(cancelAt: Int64?) { self.cancelAt = cancelAt }

    /// The totals `didWriteData` reported, and the one the cancel was asked at (for a
    /// failure's message: where the task was when it was told to stop).
    public private(set) var writes: [Int64] = []
    public private(set) var cancelledAt: Int64?

    public func downloadTask(_ task: DownloadTask, didWriteData w: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        lock.withLock {
            writes.append(totalBytesWritten)
            if let c = cancelAt, totalBytesWritten >= c, cancelledAt == nil { cancelledAt = totalBytesWritten }
        }
        if let c = cancelAt, totalBytesWritten >= c {
            task.cancel(byProducingResumeData: { d in self.lock.withLock { self.resumeData = d } })
        }
    }
    public func downloadTask(_ task: DownloadTask, didResumeAtOffset offset: Int64, expectedTotalBytes: Int64) {
        lock.withLock { resumedAt = offset }
    }
    public func downloadTask(_ task: DownloadTask, didFinishDownloadingTo location: URL) {
        lock.withLock { file = try? Data(contentsOf: location) }
    }
    public func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        lock.withLock { self.error = error }
        done.signal()
    }
}

/// Starts a helper server that prints "READY <port>" on its first line; returns the
/// process and the port (0 if it never said READY).
public func startReadyServer(_ executable: String, _ arguments: [String]) throws -> (Process, Int) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    let out = Pipe()
    p.standardOutput = out
    p.standardError = FileHandle.nullDevice
    try p.run()
    var line = Data()
    while !line.contains(UInt8(ascii: "\n")) {
        let d = out.fileHandleForReading.availableData
        if d.isEmpty { break }
        line.append(d)
    }
    let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    guard text.hasPrefix("READY "), let port = Int(text.dropFirst(6)) else { return (p, 0) }
    return (p, port)
}

/// The built `porter`: $PORTER_BIN (set by `make test`), else .build/debug/porter.
public let porterBinary: String = ProcessInfo.processInfo.environment["PORTER_BIN"]
    ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent(".build/debug/porter").path

public struct SpawnError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// Starts a server with posix_spawn, its standard streams on /dev/null. Not Foundation's
/// Process: daemons such as dante close every inherited descriptor at start, which
/// Foundation takes for an exit and then blocks its monitor thread in wait4 for good,
/// so no other Process of the test run is reaped again.
public func spawnDaemon(_ program: String, _ args: [String]) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    let argv = ([program] + args).map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var pid: pid_t = 0
    let rc = withDefaultSignals { posix_spawn(&pid, program, &actions, &$0, argv, environ) }
    guard rc == 0 else { throw SpawnError(message: "cannot start \(program): \(String(cString: strerror(rc)))") }
    return pid
}

/// posix_spawn attributes for a program a test starts: no signal blocked, every one at
/// its default. A child of a Dispatch worker thread (an async test) would inherit its
/// blocked signals and ignore SIGTERM (lighttpd then outlived its stop by the SIGKILL).
public func withDefaultSignals<R>(_ body: (inout posix_spawnattr_t) -> R) -> R {
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var none = sigset_t(), all = sigset_t()
    sigemptyset(&none)
    sigfillset(&all)
    posix_spawnattr_setsigmask(&attributes, &none)
    posix_spawnattr_setsigdefault(&attributes, &all)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    return body(&attributes)
}

public func isRunning(_ pid: pid_t) -> Bool {
    var status: Int32 = 0
    return waitpid(pid, &status, WNOHANG) == 0
}

/// The signal, then SIGKILL after 5 s; reaps the child.
public func stopDaemon(_ pid: pid_t, signal: Int32) {
    guard pid > 0 else { return }
    kill(pid, signal)
    let deadline = Date().addingTimeInterval(5)
    var status: Int32 = 0
    while true {
        let r = waitpid(pid, &status, WNOHANG)
        if r == pid || (r < 0 && errno == ECHILD) { return }
        if Date() > deadline {
            kill(pid, SIGKILL)
            _ = waitpid(pid, &status, 0)
            return
        }
        usleep(10_000)
    }
}

/// A port on 127.0.0.1 that was free a moment ago, or nil.
public func freeLoopbackPort() -> Int? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    addr.sin_port = 0
    let bound = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { return nil }
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
    }
    return Int(UInt16(bigEndian: addr.sin_port))
}

/// Starts a server on `count` loopback ports picked free, and waits for the event that
/// says how it went: every port accepts (started), or the server exited. A port picked
/// free may be taken by another process (a client's ephemeral port, another fixture)
/// before the server binds it, and the server then exits: it is started again on fresh
/// ports, up to `attempts` times. `launch` gets the ports, writes what names them and
/// returns the server's pid; `log` says what the server printed (for the error).
/// `wedged` only bounds a server that neither listens nor exits: generous, never the
/// measure of a healthy start on a loaded machine.
public func startListening(ports count: Int, attempts: Int = 5, wedged: Double = 180,
                           log: () -> String = { "" },
                           _ launch: ([Int]) throws -> pid_t) throws -> (ports: [Int], pid: pid_t) {
    var why = ""
    for attempt in 1...attempts {
        var ports: [Int] = []
        while ports.count < count {
            guard let p = freeLoopbackPort() else { throw SpawnError(message: "cannot bind a free port") }
            if !ports.contains(p) { ports.append(p) }
        }
        let pid = try launch(ports)
        let end = Date().addingTimeInterval(wedged)
        while true {
            if ports.allSatisfy(loopbackAccepts) { return (ports, pid) }
            if !isRunning(pid) {
                why = "exited (attempt \(attempt) of \(attempts), ports \(ports)): \(log())"
                break
            }
            if Date() > end {
                stopDaemon(pid, signal: SIGKILL)
                throw SpawnError(message: "neither listening on \(ports) nor exited after \(Int(wedged)) s: \(log())")
            }
            usleep(20_000)
        }
    }
    throw SpawnError(message: why)
}

/// True when something accepts connections on 127.0.0.1:port.
public func loopbackAccepts(_ port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    addr.sin_port = UInt16(port).bigEndian
    return withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    } == 0
}

/// A Process for `executable`, with this process's environment and `overrides` over it
/// (a nil value removes the variable).
func makeProcess(_ executable: String, _ arguments: [String], _ overrides: [String: String?]) -> Process {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for (k, v) in overrides { env[k] = v }
    p.environment = env
    return p
}

/// What a program printed and how it ended.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

/// The proxy variables a test of direct connections must not inherit.
public let proxyVariables = ["http_proxy", "https_proxy", "all_proxy", "HTTPS_PROXY", "ALL_PROXY"]

/// Runs `executable` to its end, its output captured (both streams read at once, so a
/// chatty program cannot block on a full pipe). `environment` entries are set over this
/// process's environment; a nil value removes the variable.
public func runProcess(_ executable: String, _ arguments: [String], environment: [String: String?] = [:],
                       input: String? = nil, currentDirectory: String? = nil) throws -> ProcessResult {
    let p = makeProcess(executable, arguments, environment)
    if let currentDirectory { p.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
    let out = Pipe(), err = Pipe(), inPipe = Pipe()
    p.standardOutput = out
    p.standardError = err
    if input != nil { p.standardInput = inPipe }
    try p.run()
    if let input {
        inPipe.fileHandleForWriting.write(Data(input.utf8))
        try inPipe.fileHandleForWriting.close()
    }
    let errText = Locked(Data())
    let errDone = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
        let d = err.fileHandleForReading.readDataToEndOfFile()
        errText.withLock { $0 = d }
        errDone.signal()
    }
    let o = out.fileHandleForReading.readDataToEndOfFile()
    errDone.wait()
    p.waitUntilExit()
    return ProcessResult(status: p.terminationStatus, stdout: String(decoding: o, as: UTF8.self),
                         stderr: String(decoding: errText.current, as: UTF8.self))
}

/// `runProcess` for set-up steps: throws, with what the program printed, unless it exits 0.
@discardableResult
public func runChecked(_ executable: String, _ arguments: [String], input: String? = nil,
                       currentDirectory: String? = nil) throws -> String {
    let r = try runProcess(executable, arguments, input: input, currentDirectory: currentDirectory)
    guard r.status == 0 else {
        throw SpawnError(message: "\(executable) \(arguments.joined(separator: " ")) exited \(r.status): \(r.stdout)\(r.stderr)")
    }
    return r.stdout
}

/// Starts `executable` in the background, its output discarded (for a test that waits
/// for it or kills it). `environment` as for `runProcess`.
public func startProcess(_ executable: String, _ arguments: [String], environment: [String: String?] = [:]) throws -> Process {
    let p = makeProcess(executable, arguments, environment)
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    try p.run()
    return p
}

/// The environment overrides that take the proxy variables away.
public var withoutProxies: [String: String?] { Dictionary(uniqueKeysWithValues: proxyVariables.map { ($0, nil) }) }

/// Reads a FIFO on a thread of its own until its writer closes; what arrived so far is
/// in the returned box.
public func readFIFOInBackground(_ path: String) -> Locked<Data> {
    let received = Locked(Data())
    let reader = Thread {
        let fd = open(path, O_RDONLY)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while fd >= 0 {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            received.withLock { $0.append(contentsOf: buffer[0..<n]) }
        }
        close(fd)
    }
    reader.start()
    return received
}

/// Waits until `condition` holds or `seconds` pass; true when it held. The deadline only
/// bounds a hang (it ends at once when the condition holds), so it is generous: a loaded
/// machine must not fail a test by being slow.
public func eventually(_ seconds: Double = 60, _ condition: () -> Bool) -> Bool {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}

/// The async twin of `eventually`: polls `condition` until it holds or `seconds` pass,
/// without blocking a thread of the concurrency pool; true when it held. The deadline
/// only bounds a hang, so it is generous.
public func eventuallyAsync(_ seconds: Double = 60, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end, !Task.isCancelled {
        if try await condition() { return true }
        try? await Task.sleep(nanoseconds: 10_000_000)
    }
    return try await condition()
}

/// Reads `fd` to its end on a thread of its own (the other end of a pipe); the closure
/// returned waits for the end and gives every byte read.
public func drainPipe(_ fd: Int32) -> () -> Data {
    let result = Locked(Data())
    let done = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n <= 0 { break }
            result.withLock { $0.append(contentsOf: buffer[0..<n]) }
        }
        done.signal()
    }
    return {
        done.wait()
        return result.withLock { $0 }
    }
}
