import ArgumentParser
import Foundation
import Porter
import PorterIPC

/// `porter --background NAME`: hands downloads to porterd and returns; `porter jobs`
/// shows and steers them.
enum BackgroundCLI {
    static func connect() throws -> Channel {
        do {
            return try BackgroundProtocol.connectToDaemon()
        } catch {
            note("porter: cannot reach porterd: \(error)")
            throw ExitCode(PorterExit.cannotConnect.rawValue)
        }
    }

    static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// Queues each URL as a download into its -o file (or the URL's last path component
    /// with -O) and prints the task numbers.
    static func enqueue(session: String, urls: [String], outputs: [String], remoteName: Bool, headers: [String]) throws {
        guard !urls.isEmpty else { throw ValidationError("--background needs a URL") }
        var destinations: [String] = []
        for (i, text) in urls.enumerated() {
            guard let url = FetchOptions.guessURL(text, knownSchemes: Runner.knownSchemes), url.scheme != nil else {
                note("porter: not a valid URL: \(text)")
                throw ExitCode(PorterExit.unsupportedProtocol.rawValue)
            }
            if i < outputs.count, outputs[i] != "-" {
                destinations.append(absolute(outputs[i]))
            } else if remoteName, let name = PathText.fileName(from: url.path) {   // -O's one name rule
                destinations.append(absolute(name))
            } else {
                throw ValidationError("--background writes files: give -o FILE (one per URL) or -O")
            }
        }
        let channel = try connect()
        defer { channel.close() }
        try ipc { () throws(IPCError) in try channel.send(message: BackgroundClientMessage.attach(session: session, launchCommand: nil)) }
        // Tasks go out ahead of their answers (not one round trip per URL: ten thousand
        // URLs queue in a moment), at most `window` unanswered: neither porterd nor the
        // socket holds a backlog of the whole list.
        var pairs: [[String]] = []
        for h in headers {
            if let parsed = HeaderOption(h), case .add(let value) = parsed.action { pairs.append([parsed.name, value]) }
        }
        let resolved = urls.map { FetchOptions.guessURL($0, knownSchemes: Runner.knownSchemes)! }
        var refused = false
        let window = 128
        try ipc { () throws(IPCError) in
            var sent = 0
            var answered = 0
            while answered < resolved.count {
                while sent < resolved.count, sent - answered < window {
                    let spec = BackgroundTaskSpec(kind: .download, url: resolved[sent], headers: pairs, destination: destinations[sent])
                    try channel.send(message: BackgroundClientMessage.enqueue(reference: sent + 1, spec: spec))
                    sent += 1
                }
                switch try BackgroundProtocol.receive(on: channel) {
                case .enqueued(let r, let task) where r >= 1 && r <= resolved.count:
                    answered += 1
                    try channel.send(message: BackgroundClientMessage.control(task: task.id, .resume))
                    print("\(task.id)\t\(session)\t\(resolved[r - 1].maskingPassword) -> \(destinations[r - 1])")
                case .refused(let r, let message) where r >= 1 && r <= resolved.count:
                    answered += 1
                    refused = true
                    note("porter: porterd refused \(resolved[r - 1].maskingPassword): \(message)")
                default:
                    continue
                }
            }
            // The last resume is handled before this answer: nothing is lost when we close.
            try channel.send(message: BackgroundClientMessage.ping(reference: 0))
            while true {
                if case .pong(0) = try BackgroundProtocol.receive(on: channel) { break }
            }
        }
        if refused { throw ExitCode(PorterExit.other.rawValue) }
    }

    /// Runs a conversation with porterd; its failure ends the program with exit code 5.
    static func ipc<T>(_ body: () throws(IPCError) -> T) throws -> T {
        do {
            return try body()
        } catch {
            note("porter: porterd: \(error)")
            throw ExitCode(PorterExit.cannotConnect.rawValue)
        }
    }

    /// The tasks of the session the connection watches (porterd answers a connection
    /// about its own session only).
    static func list(_ channel: Channel) throws -> [BackgroundTaskSnapshot] {
        let answer = try ipc { () throws(IPCError) -> Result<[BackgroundTaskSnapshot], PorterError> in
            try channel.send(message: BackgroundClientMessage.list(session: nil, reference: 1))
            var all: [BackgroundTaskSnapshot] = []
            while true {
                switch try BackgroundProtocol.receive(on: channel) {
                case .taskPage(1, let page): all += page
                case .tasks(1, let last): return .success(all + last)
                case .refused(1, let message): return .failure(PorterError(.unsupportedConfiguration, message))
                default: continue
                }
            }
        }
        switch answer {
        case .success(let tasks): return tasks
        case .failure(let refusal):
            note("porter: porterd: \(refusal.message)")
            throw ExitCode(PorterExit.other.rawValue)
        }
    }

    static func row(_ t: BackgroundTaskSnapshot) -> String {
        var state = t.state
        if let next = t.nextAttempt, t.state == "running" {
            // porterd's number: clamped before it becomes an Int (a year away is plenty).
            let wait = (next - Date().timeIntervalSince1970).rounded()
            state = "retrying in \(wait.isFinite ? Int(min(max(0, wait), 366 * 86400)) : 0)s"
        }
        let size = t.expected >= 0 ? "\(t.received)/\(t.expected)" : "\(t.received)"
        var line = "\(t.id)\t\(t.session)\t\(state)\t\(size)\tretries \(t.retries)\t\(t.url.maskingPassword)"
        if let d = t.destination { line += " -> \(d)" }
        if let m = t.errorMessage { line += "\t(\(t.state == "completed" ? "failed" : "last error"): \(m))" }
        if let d = t.taskDescription { line += "\t\(d)" }
        return line
    }
}

struct Jobs: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jobs",
        abstract: "Background transfers run by porterd: list them, or cancel, suspend, resume or wait for one.",
        discussion: """
            porter jobs SESSION                       list the tasks of a background session
            porter jobs SESSION cancel|suspend|resume ID
            porter jobs SESSION wait ID               block until the task ends; the exit code is as for a foreground transfer

            porterd answers a client about one session only (the one named here, or the one
            an application holds): no client lists or steers another session's tasks.
            """)

    @Argument(help: "SESSION, optionally followed by an action (cancel, suspend, resume, wait) and a task ID.")
    var words: [String] = []

    static let actions = ["cancel", "suspend", "resume", "wait"]

    func validate() throws {
        guard let first = words.first else {
            throw ValidationError("porter jobs SESSION: name the background session (as given to porter --background SESSION)")
        }
        if Jobs.actions.contains(first) {
            throw ValidationError("porter jobs SESSION \(first) ID: task numbers belong to a session; name it first")
        }
        guard words.count == 1 || (words.count == 3 && Jobs.actions.contains(words[1]) && Int(words[2]) != nil) else {
            throw ValidationError("porter jobs SESSION [cancel|suspend|resume|wait ID]")
        }
    }

    func run() throws {
        let channel = try BackgroundCLI.connect()
        defer { channel.close() }
        try BackgroundCLI.ipc { () throws(IPCError) in try channel.send(message: BackgroundClientMessage.watch(session: words[0])) }
        guard words.count == 3, let id = Int(words[2]) else {
            for t in try BackgroundCLI.list(channel) { print(BackgroundCLI.row(t)) }
            return
        }
        let first = words[1]
        guard let task = try BackgroundCLI.list(channel).first(where: { $0.id == id }) else {
            note("porter: no task \(id) in background session \(words[0])")
            throw ExitCode(PorterExit.other.rawValue)
        }
        switch first {
        case "wait":
            try wait(for: task, on: channel)
        default:
            let action: BackgroundControl = first == "cancel" ? .cancel : first == "suspend" ? .suspend : .resume
            try BackgroundCLI.ipc { () throws(IPCError) in
                try channel.send(message: BackgroundClientMessage.control(task: id, action))
                try channel.send(message: BackgroundClientMessage.ping(reference: 1))
                while true {
                    if case .pong(1) = try BackgroundProtocol.receive(on: channel) { break }
                }
            }
        }
    }

    private func wait(for start: BackgroundTaskSnapshot, on channel: Channel) throws {
        let tty = isatty(2) == 1
        var task = start
        while task.state != "completed" {
            if tty { _ = writeAll(2, "\r\(BackgroundCLI.row(task))\u{1B}[K") }
            usleep(50_000)
            guard let now = try BackgroundCLI.list(channel).first(where: { $0.id == task.id }) else {
                if tty { _ = writeAll(2, "\n") }
                note("porter: task \(task.id) is gone (its session took its events)")
                return
            }
            task = now
        }
        if tty { _ = writeAll(2, "\n") }
        if let e = BackgroundProtocol.error(code: task.errorCode, message: task.errorMessage, url: task.url) {
            note("porter: \(e.message)")
            throw ExitCode(PorterExit(e).rawValue)
        }
        print(BackgroundCLI.row(task))
    }
}
