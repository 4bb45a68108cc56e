import CPorterIPC
import Foundation
import Porter
import PorterBackground
import PorterCore
import PorterIPC
import PorterSession
import PorterStorage

// A job's end: where the file goes, the journal's last word, the holder told or the
// session's application launched; and the partial files porterd keeps.
extension Daemon {
    /// Moves the partial file resume data names to `partial`, when it is one porterd kept
    /// (`endWithResumeData`): named `task-<n>.part.resume` directly in porterd's partial
    /// folder, a regular file of this user's with one link and at least `bytes` long,
    /// looked at and renamed relative to the folder without following a link. Resume
    /// data is the application's (stored, sent by any client): it must not make porterd
    /// take, append to or hand back a file of its choosing.
    func adoptPartial(_ named: String, bytes: Int64, as partial: String) -> Bool {
        let prefix = partialsFolder + "/"
        guard named.hasPrefix(prefix), case let name = String(named.dropFirst(prefix.count)),
              PartialFile.isDaemonsName(name),
              partial.hasPrefix(prefix), case let target = String(partial.dropFirst(prefix.count)), !target.contains("/") else { return false }
        let dir = open(partialsFolder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard dir >= 0 else { return false }
        defer { close(dir) }
        let fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == geteuid(), st.st_nlink == 1,
              Int64(st.st_size) >= bytes else { return false }
        return renameat(dir, name, dir, target) == 0
    }

    func syncFile(_ path: String) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return fsync(fd) == 0
    }


    func endWithResumeData(_ t: Transfer) {
        checkpoint(t)
        closeFile(t)
        var data: Data?
        if let partial = t.row.partial, t.row.received > 0, t.row.validator != nil {
            // The partial file becomes the caller's: move it out of the daemon's way.
            let kept = partial + ".resume"
            if rename(partial, kept) == 0 {
                // The spec's headers lost their secrets when the task was queued.
                data = ResumeData(url: t.row.spec.url, method: t.row.spec.method, headers: t.row.spec.headers, validator: t.row.validator,
                                  bytesReceived: t.row.received, expectedTotalBytes: t.row.expected, partialFilePath: kept).encoded()
            }
        }
        holders[t.row.session]?.send(.resumeData(task: t.row.id, data))
        // Without resume data nobody will use the partial file: it goes.
        end(t, error: PorterError(.cancelled, "cancelled", url: t.row.spec.url, resumeData: data), status: nil, keepPartial: data != nil)
    }

    /// Runs the session's launch command (once until a process holds the session again),
    /// as this user, detached, with PORTER_BACKGROUND_SESSION naming the session: Linux
    /// has no app to wake, so a service is started to collect its files.
    func launch(_ session: String) {
        guard let argv = (try? journal.launchOnce(session)) ?? nil, let program = argv.first else {
            return note("session \(session): events wait and no process holds it; it has no launch command to run (none, or it ran already)")
        }
        var env = ProcessInfo.processInfo.environment
        env["PORTER_BACKGROUND_SESSION"] = session
        var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        var cEnv: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            cArgs.forEach { free($0) }
            cEnv.forEach { free($0) }
        }
        if porter_ipc_spawn_detached_env(program, &cArgs, &cEnv) == 0 {
            note("session \(session): events wait and no process holds it: ran \(argv)")
        } else {
            note("session \(session): cannot run its launch command \(argv): \(String(cString: strerror(errno)))")
        }
    }

    /// The task's end: the file goes where it belongs, the state and the events are
    /// committed together, then the holder (if any) hears them.
    func end(_ t: Transfer, error: PorterError?, status: Int?, keepPartial: Bool = false) {
        deadlines.cancel(t.row.id)  // the scheduler cancelled it already; never one left behind
        for (id, p) in pendingChallenges where p.transfer === t {
            p.timer.cancel()
            pendingChallenges[id] = nil
        }
        if t.fd >= 0 { fsync(t.fd) }
        closeFile(t)
        var error = error
        var events: [BackgroundEvent] = []
        if error == nil, t.row.spec.kind == .download, let partial = t.row.partial {
            if let destination = t.row.spec.destination {
                // porter --background -o FILE: the daemon puts it there itself, by the output
                // rule every writer follows (devices and FIFOs written through, never
                // replaced; the mode a new file or the existing one has; nothing partial at
                // the destination). A FIFO nobody reads fails at once: porterd never waits.
                if !syncFile(partial) { note("task \(t.row.id): cannot sync \(partial)") }
                do {
                    try OutputFile.place(partial, at: destination, nonBlocking: true)
                } catch let failure {
                    error = PorterError(.cannotMoveFile, "porterd cannot put the download at \(destination): \(failure.message)",
                                        url: t.row.spec.url, cause: failure.cause)
                }
            } else {
                let folder = finishedFolder(t.row.session)
                let file = folder + "/task-\(t.row.id)"
                if (try? PrivateFiles.makeFolder(folder)) == nil {
                    // A planted link or someone else's folder: never written through.
                    error = PorterError(.cannotMoveFile, "porterd refuses \(folder): not its own private folder")
                    unlink(partial)
                } else if rename(partial, file) == 0 {
                    events.append(BackgroundEvent(sequence: 0, task: t.row.id, kind: .finishedDownloading, file: file, statusCode: status))
                } else {
                    error = PorterError(.cannotMoveFile, "porterd cannot keep the download", cause: .errno(errno))
                }
            }
        } else if !keepPartial, let partial = t.row.partial {
            unlink(partial)
        }
        let wire = BackgroundProtocol.wire(error)
        events.append(BackgroundEvent(sequence: 0, task: t.row.id, kind: .completed, statusCode: status,
                                      errorCode: wire.code, errorMessage: wire.message))
        t.row.state = "completed"
        t.row.errorCode = wire.code
        t.row.errorMessage = wire.message
        t.row.nextAttempt = nil
        transfers[t.row.id] = nil
        do {
            let committed = try journal.finish(t.row, events: events)
            note("task \(t.row.id) \(error.map { "failed: \($0.message)" } ?? "finished") (\(t.row.received) bytes)")
            if let c = holders[t.row.session] {
                for e in committed { c.send(.event(e)) }
            } else {
                launch(t.row.session)
            }
        } catch {
            note("task \(t.row.id): the journal refused its end: \(error)")
        }
    }
}
