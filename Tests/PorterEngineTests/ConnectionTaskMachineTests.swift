import Foundation
import PorterCore
import XCTest
@testable import PorterEngine

/// Every sequence of events up to a length, for both kinds of connection task: the
/// promises the machine makes hold whatever the connection, the peer, the timers and the
/// app do, in whatever order.
final class ConnectionTaskMachineTests: XCTestCase {
    typealias M = ConnectionTaskMachine

    /// What the test can do next; turned into an event with what the trace knows (the
    /// current attempt, the operations asked, the timers armed).
    enum Move: CaseIterable {
        case resume, cancel, close, closeBadCode
        case connected, connectedStale, retry, opened, openedStale
        case failed, failedStale, peerClosed, closeFrameReceived, closeFrameWritten
        case violationNow, violationDeferred, appWaits
        case fireFirstTimer, fireLastTimer
        case askSend, askReceive, askWithTimeout
        case answerFirst, failFirst

        static let stream: [Move] = [.resume, .cancel, .close, .failed, .peerClosed, .askWithTimeout, .askReceive,
                                     .answerFirst, .failFirst, .fireFirstTimer]
        static let webSocket: [Move] = [.resume, .cancel, .close, .closeBadCode, .connected, .connectedStale, .retry, .opened,
                                        .openedStale, .failed, .failedStale, .peerClosed, .closeFrameReceived, .closeFrameWritten,
                                        .violationNow, .violationDeferred, .appWaits, .fireFirstTimer, .fireLastTimer,
                                        .askSend, .askReceive, .answerFirst, .failFirst]
    }

    struct Trace {
        var machine: M
        var attempt = -1
        var handshakeAttempt: Int?
        var nextID = 1
        var asked: [M.Operation] = []
        var performed: Set<Int> = []
        var answered: Set<Int> = []
        var armed: Set<M.Timer> = []
        var finishes = 0
        var end: M.End?
        var opens = 0
        var closeFrames = 0
        var running = 0
        var completedShown = 0
        var mode: M.Mode?
    }

    func event(_ move: Move, _ t: inout Trace) -> M.Event? {
        let err = PorterError(.networkConnectionLost, "lost")
        var unanswered: [M.Operation] { t.asked.filter { !t.answered.contains($0.id) } }
        switch move {
        case .resume: return .resume
        case .cancel: return .cancel
        case .close: return .close(code: 1000, reason: Data("bye".utf8))
        case .closeBadCode: return .close(code: 1006, reason: Data())
        case .connected: return .connected(attempt: max(t.attempt, 0))
        case .connectedStale: return .connected(attempt: t.attempt - 1)
        case .retry: return .retry(attempt: max(t.attempt, 0), url: URL(string: "ws://127.0.0.1/next")!)
        case .opened: return .opened(attempt: max(t.attempt, 0))
        case .openedStale: return .opened(attempt: t.attempt - 1)
        case .failed: return .failed(err, closeCode: 1006, attempt: nil)
        case .failedStale: return .failed(err, closeCode: nil, attempt: t.attempt - 1)
        case .peerClosed: return .peerClosed
        case .closeFrameReceived: return .closeFrameReceived(code: 1001, reason: nil)
        case .closeFrameWritten: return .closeFrameWritten
        case .violationNow: return .violation(PorterError(.badServerResponse, "bad frame"), closeCode: 1002, deferred: false)
        case .violationDeferred: return .violation(PorterError(.badServerResponse, "bad frame"), closeCode: 1007, deferred: true)
        case .appWaits: return .appWaits
        case .fireFirstTimer, .fireLastTimer:
            // A timer that is not armed fires too (a work item that ran as it was cancelled).
            let sorted = t.armed.sorted { $0.rank < $1.rank }
            guard let timer = move == .fireFirstTimer ? sorted.first : sorted.last else { return .timerFired(.closing) }
            return .timerFired(timer)
        case .askSend, .askReceive, .askWithTimeout:
            let op = M.Operation(id: t.nextID, waitsForOpen: move == .askSend,
                                 timeoutError: move == .askWithTimeout ? PorterError(.timedOut, "op") : nil)
            t.nextID += 1
            t.asked.append(op)
            return .asked(op)
        case .answerFirst: return unanswered.first.map { .answered(id: $0.id) } ?? .answered(id: 99)
        case .failFirst: return unanswered.first.map { .operationFailed(id: $0.id, err) } ?? .operationFailed(id: 99, err)
        }
    }

    /// Applies one event and checks every promise on what came out.
    func step(_ t: inout Trace, _ event: M.Event, _ path: @autoclosure () -> String) {
        let endedBefore = t.finishes > 0
        let actions = t.machine.handle(event)
        // A timer that fires is no longer armed.
        if case .timerFired(let timer) = event { t.armed.remove(timer) }
        var askedNow: Int?
        if case .asked(let op) = event { askedNow = op.id }
        for a in actions {
            if endedBefore {
                guard case .fail(let id, _) = a, id == askedNow else {
                    return XCTFail("\(a) after the end: \(path())")
                }
            }
            switch a {
            case .publishState(.running):
                XCTAssertEqual(t.completedShown, 0, "running after completed: \(path())")
                t.running += 1
            case .publishEnd:
                t.completedShown += 1
                XCTAssertEqual(t.completedShown, 1, "the end shown twice: \(path())")
            case .publishState(.completed):
                XCTFail("completed without its end: \(path())")
            case .publishState(let s):
                XCTFail("\(s) published: \(path())")
            case .connect(let attempt):
                XCTAssertGreaterThan(attempt, t.attempt, "attempts go forward: \(path())")
                if attempt > 0 {
                    XCTAssertEqual(t.handshakeAttempt, attempt - 1, "a new connection before the last one's handshake was answered: \(path())")
                }
                t.attempt = attempt
                t.handshakeAttempt = nil
            case .sendHandshake(let attempt):
                XCTAssertEqual(attempt, t.attempt, "a handshake for an old connection: \(path())")
                XCTAssertNil(t.handshakeAttempt, "two handshakes on one connection: \(path())")
                t.handshakeAttempt = attempt
            case .closeConnection:
                break
            case .schedule(let timer):
                XCTAssertTrue(t.armed.insert(timer).inserted, "\(timer) scheduled twice: \(path())")
            case .cancelTimer(let timer):
                XCTAssertNotNil(t.armed.remove(timer), "\(timer) cancelled but not armed: \(path())")
            case .reportOpen:
                t.opens += 1
                XCTAssertNotNil(t.handshakeAttempt, "open without a handshake: \(path())")
            case .enter(let mode):
                t.mode = mode
            case .writeClose:
                t.closeFrames += 1
                XCTAssertGreaterThan(t.opens, 0, "a close frame on a connection never open: \(path())")
            case .perform(let id):
                let op = t.asked.first { $0.id == id }
                XCTAssertNotNil(op, "an operation never asked: \(path())")
                XCTAssertTrue(t.performed.insert(id).inserted, "performed twice: \(path())")
                if op?.waitsForOpen == true {
                    XCTAssertEqual(t.opens, 1, "a send before the opening: \(path())")
                    XCTAssertEqual(t.mode, .open, "a send during the closing: \(path())")
                }
            case .succeed(let id):
                XCTAssertTrue(t.performed.contains(id), "answered before it went ahead: \(path())")
                XCTAssertTrue(t.answered.insert(id).inserted, "answered twice: \(path())")
            case .fail(let id, _):
                XCTAssertTrue(t.answered.insert(id).inserted, "answered twice: \(path())")
            case .finish(let end):
                t.finishes += 1
                t.end = end
                XCTAssertEqual(t.completedShown, 1, "ended without showing completed: \(path())")
                XCTAssertTrue(t.armed.isEmpty, "timers left armed at the end: \(t.armed) \(path())")
                XCTAssertEqual(Set(t.asked.map(\.id)), t.answered, "operations left unanswered at the end: \(path())")
                if t.machine.kind == .stream { XCTAssertNil(end.closeCode, path()) }
                if end.error == nil { XCTAssertNotNil(end.closeCode, "a clean end without a close code: \(path())") }
            }
        }
        if let i = actions.firstIndex(where: { if case .finish = $0 { return true }; return false }) {
            XCTAssertEqual(i, actions.count - 1, "actions after the finish: \(path())")
        }
        XCTAssertLessThanOrEqual(t.finishes, 1, "two ends: \(path())")
        XCTAssertLessThanOrEqual(t.opens, 1, "opened twice: \(path())")
        XCTAssertLessThanOrEqual(t.closeFrames, 1, "two close frames: \(path())")
        XCTAssertLessThanOrEqual(t.running, 1, "started twice: \(path())")
        XCTAssertEqual(t.machine.hasEnded, t.finishes == 1, "the machine and its reports disagree: \(path())")
        if t.opens > 0 { XCTAssertFalse(t.armed.contains(.opening), "the opening timer runs on an open connection: \(path())") }
        if t.mode == .closing, t.finishes == 0 {
            XCTAssertTrue(t.armed.contains(.closing), "a closing handshake without its timer: \(path())")
        }
        if let op = t.asked.last, askedNow == op.id, t.finishes > 0 {
            XCTAssertTrue(t.answered.contains(op.id), "an operation asked after the end waits forever: \(path())")
        }
    }

    func walk(_ kind: M.Kind, moves: [Move], depth: Int, from prefix: [Move] = []) -> Int {
        var start = Trace(machine: M(kind: kind, url: URL(string: "ws://127.0.0.1/")))
        for m in prefix {
            guard let e = event(m, &start) else { continue }
            step(&start, e, "prefix \(prefix)")
        }
        var sequences = 0
        func go(_ t: Trace, _ depth: Int, _ path: [Move]) {
            sequences += 1
            guard depth > 0 else { return }
            for m in moves {
                var n = t
                guard let e = event(m, &n) else { continue }
                step(&n, e, "\(prefix) + \(path + [m])")
                if m == .failedStale || m == .openedStale || m == .connectedStale {
                    XCTAssertEqual(n.finishes, t.finishes, "a given-up attempt's report ended the task: \(path + [m])")
                    XCTAssertEqual(n.opens, t.opens, "a given-up attempt's report opened the task: \(path + [m])")
                }
                go(n, depth - 1, path + [m])
            }
        }
        go(start, depth, [])
        return sequences
    }

    /// Stream tasks: every sequence of 5 events from a fresh task, from one resumed with a
    /// timed read waiting, and from one with a read answered and a write waiting.
    func testEveryStreamSequenceKeepsThePromises() {
        var n = walk(.stream, moves: Move.stream, depth: 5)
        n += walk(.stream, moves: Move.stream, depth: 5, from: [.askWithTimeout, .resume])
        n += walk(.stream, moves: Move.stream, depth: 5, from: [.resume, .askReceive, .answerFirst, .askReceive])
        print("ConnectionTaskMachine (stream): \(n) sequences of up to 5 events from 3 starting points")
        XCTAssertGreaterThan(n, 300_000)
    }

    /// WebSocket tasks: every sequence of 4 events from a fresh task, and of 4 more from
    /// each point the opening passes (resumed, connected, open with a send waiting, closing
    /// with a receive waiting).
    func testEveryWebSocketSequenceKeepsThePromises() {
        var n = walk(.webSocket, moves: Move.webSocket, depth: 4)
        n += walk(.webSocket, moves: Move.webSocket, depth: 4, from: [.askSend, .resume])
        n += walk(.webSocket, moves: Move.webSocket, depth: 4, from: [.askSend, .resume, .connected])
        n += walk(.webSocket, moves: Move.webSocket, depth: 4, from: [.askSend, .resume, .connected, .opened])
        n += walk(.webSocket, moves: Move.webSocket, depth: 4, from: [.resume, .connected, .opened, .askReceive, .close])
        n += walk(.webSocket, moves: Move.webSocket, depth: 4, from: [.resume, .connected, .opened, .violationDeferred])
        print("ConnectionTaskMachine (WebSocket): \(n) sequences of up to 4 events from 6 starting points")
        XCTAssertGreaterThan(n, 1_000_000)
    }

    /// The shapes the shells rely on, spelled out.
    func testAnOpeningACloseAndAnEnd() {
        var m = M(kind: .webSocket, url: URL(string: "ws://127.0.0.1/"))
        XCTAssertEqual(names(m.handle(.asked(M.Operation(id: 1, waitsForOpen: true)))), [], "a send before the opening waits")
        XCTAssertEqual(names(m.handle(.resume)), ["publishState", "schedule(opening)", "connect"])
        XCTAssertEqual(names(m.handle(.connected(attempt: 0))), ["sendHandshake"])
        XCTAssertEqual(names(m.handle(.retry(attempt: 0, url: URL(string: "ws://127.0.0.1/b")!))), ["closeConnection", "connect"])
        XCTAssertEqual(names(m.handle(.retry(attempt: 1, url: URL(string: "ws://127.0.0.1/c")!))), [],
                       "a challenge answered twice does not connect twice")
        XCTAssertEqual(names(m.handle(.opened(attempt: 0))), [], "an old attempt's answer is dropped")
        XCTAssertEqual(names(m.handle(.connected(attempt: 1))), ["sendHandshake"])
        XCTAssertEqual(names(m.handle(.opened(attempt: 1))), ["cancelTimer(opening)", "enter(open)", "reportOpen", "perform(1)"])
        XCTAssertEqual(names(m.handle(.close(code: 1000, reason: Data()))), ["enter(closing)", "writeClose", "schedule(closing)"])
        XCTAssertEqual(names(m.handle(.asked(M.Operation(id: 2, waitsForOpen: true)))), ["fail(2)"], "no send after our close")
        let end = m.handle(.closeFrameReceived(code: 1000, reason: nil))
        XCTAssertEqual(names(end), ["cancelTimer(closing)", "closeConnection", "publishEnd", "fail(1)", "finish"],
                       "the send still in flight is answered at the end")
        guard case .finish(let e) = end.last else { return XCTFail() }
        XCTAssertNil(e.error)
        XCTAssertEqual(e.closeCode, 1000)
        XCTAssertEqual(names(m.handle(.cancel)), [])

        var lost = M(kind: .webSocket)
        _ = lost.handle(.resume)
        _ = lost.handle(.connected(attempt: 0))
        _ = lost.handle(.opened(attempt: 0))
        guard case .finish(let l)? = lost.handle(.peerClosed).last else { return XCTFail() }
        XCTAssertEqual(l.error?.code, .networkConnectionLost)
        XCTAssertEqual(l.closeCode, 1006)

        var stream = M(kind: .stream)
        XCTAssertEqual(names(stream.handle(.asked(M.Operation(id: 1)))), ["perform(1)"], "a read before resume waits in the stream")
        XCTAssertEqual(names(stream.handle(.resume)), ["publishState", "connect"])
        XCTAssertEqual(names(stream.handle(.peerClosed)), [], "the end of the stream is data")
        XCTAssertEqual(names(stream.handle(.cancel)), ["closeConnection", "publishEnd", "fail(1)", "finish"])
    }

    func names(_ actions: [M.Action]) -> [String] {
        actions.map { a in
            switch a {
            case .publishState: return "publishState"
            case .publishEnd: return "publishEnd"
            case .connect: return "connect"
            case .sendHandshake: return "sendHandshake"
            case .closeConnection: return "closeConnection"
            case .schedule(let t): return "schedule(\(t))"
            case .cancelTimer(let t): return "cancelTimer(\(t))"
            case .reportOpen: return "reportOpen"
            case .enter(let m): return "enter(\(m))"
            case .writeClose: return "writeClose"
            case .perform(let id): return "perform(\(id))"
            case .succeed(let id): return "succeed(\(id))"
            case .fail(let id, _): return "fail(\(id))"
            case .finish: return "finish"
            }
        }
    }
}
