import XCTest
@testable import PorterCore
@testable import PorterSession

final class TaskStateMachineTests: XCTestCase {
    typealias M = TaskStateMachine

    private func running(asks: Bool = false, maxRedirects: Int = 20) -> M {
        var m = M(maximumRedirects: maxRedirects, asksResponseDisposition: asks)
        XCTAssertEqual(m.handle(.resume), .start)
        return m
    }

    private func h(_ m: M, _ e: M.HandlerEvent) -> M.Event { .handler(generation: m.generation, e) }

    func testStartsSuspendedAndStartsOnce() {
        var m = M(maximumRedirects: 20, asksResponseDisposition: false)
        XCTAssertEqual(m.lifecycle, .suspended)
        XCTAssertEqual(m.handle(.resume), .start)
        XCTAssertEqual(m.lifecycle, .running)
        XCTAssertEqual(m.handle(.resume), .none)
        XCTAssertEqual(m.handle(.suspend), .pauseDelivery)
        XCTAssertEqual(m.lifecycle, .suspended)
        XCTAssertEqual(m.handle(.suspend), .none)
        XCTAssertEqual(m.handle(.resume), .resumeDelivery, "a second resume after suspend resumes, never restarts")
    }

    func testHappyPath() {
        var m = running()
        XCTAssertEqual(m.handle(h(m, .response)), .deliverResponse)
        XCTAssertEqual(m.handle(h(m, .data)), .deliverData)
        XCTAssertEqual(m.handle(h(m, .data)), .deliverData)
        XCTAssertEqual(m.handle(h(m, .finish)), .complete(.finished))
        XCTAssertEqual(m.lifecycle, .completed)
    }

    func testExactlyOneCompletionWhateverTheHandlerDoes() {
        var m = running()
        _ = m.handle(h(m, .response))
        XCTAssertEqual(m.handle(h(m, .finish)), .complete(.finished))
        for e: M.HandlerEvent in [.finish, .data, .fail, .response, .redirect(allowed: true), .challenge(1), .cachedResponseValid] {
            XCTAssertEqual(m.handle(h(m, e)), .none, "\(e) after completion must do nothing")
        }
        XCTAssertEqual(m.handle(.cancel), .none)
        XCTAssertEqual(m.handle(.timeout), .none)
        XCTAssertEqual(m.handle(.resume), .none)
    }

    func testCancelCompletesAtOnceAndIgnoresTheRest() {
        var m = running()
        XCTAssertEqual(m.handle(.cancel), .stopAndComplete(.cancelled))
        XCTAssertEqual(m.lifecycle, .canceling)
        XCTAssertEqual(m.handle(.cancel), .none, "a second cancel is a no-op")
        XCTAssertEqual(m.handle(h(m, .response)), .none)
        XCTAssertEqual(m.handle(h(m, .finish)), .none)
        XCTAssertEqual(m.handle(.completionDelivered), .none)
        XCTAssertEqual(m.lifecycle, .completed)
    }

    func testCancelBeforeResume() {
        var m = M(maximumRedirects: 20, asksResponseDisposition: false)
        XCTAssertEqual(m.handle(.cancel), .stopAndComplete(.cancelled))
        XCTAssertEqual(m.handle(.resume), .none, "a cancelled task never starts")
    }

    func testDataBeforeResponseIsAViolationThatEndsTheTask() {
        var m = running()
        guard case .stopAndComplete(.error(.protocolViolation, _)) = m.handle(h(m, .data)) else {
            return XCTFail("data before response must fail the task")
        }
        XCTAssertEqual(m.lifecycle, .completed)
    }

    func testFinishWithoutResponseFails() {
        var m = running()
        guard case .stopAndComplete(.error(.protocolViolation, _)) = m.handle(h(m, .finish)) else {
            return XCTFail("finish without response must fail")
        }
    }

    func testSecondResponseIsDropped() {
        var m = running()
        _ = m.handle(h(m, .response))
        guard case .ignoreViolation = m.handle(h(m, .response)) else { return XCTFail() }
        XCTAssertEqual(m.handle(h(m, .data)), .deliverData)
    }

    func testSuspendDefersHandlerEventsUntilResume() {
        var m = running()
        _ = m.handle(.suspend)
        XCTAssertEqual(m.handle(h(m, .response)), .deferEvent)
        XCTAssertFalse(m.canProcessHandlerEvents)
        XCTAssertEqual(m.handle(.resume), .resumeDelivery)
        XCTAssertTrue(m.canProcessHandlerEvents)
        XCTAssertEqual(m.handle(h(m, .response)), .deliverResponse)
    }

    func testFailKeepsItsPlaceBehindAPendingDecision() {
        var m = running(asks: true)
        XCTAssertEqual(m.handle(h(m, .response)), .askResponseDisposition)
        XCTAssertEqual(m.handle(h(m, .data)), .deferEvent)
        XCTAssertEqual(m.handle(h(m, .fail)), .deferEvent, "the data before the failure is delivered first")
        XCTAssertEqual(m.handle(.responseDecision(.allow)), .continueAfterDecision)
        XCTAssertEqual(m.handle(h(m, .data)), .deliverData)
        XCTAssertEqual(m.handle(h(m, .fail)), .stopAndComplete(.failed))
        XCTAssertEqual(m.handle(.responseDecision(.allow)), .none, "a late decision finds the task completed")
    }

    func testCancelStillEndsASuspendedTaskAtOnce() {
        var m = running()
        _ = m.handle(.suspend)
        XCTAssertEqual(m.handle(h(m, .fail)), .deferEvent)
        XCTAssertEqual(m.handle(.cancel), .stopAndComplete(.cancelled))
    }

    func testResponseDisposition() {
        var m = running(asks: true)
        XCTAssertEqual(m.handle(h(m, .response)), .askResponseDisposition)
        XCTAssertEqual(m.handle(h(m, .data)), .deferEvent, "no data reaches anyone before the decision")
        XCTAssertEqual(m.handle(h(m, .finish)), .deferEvent)
        XCTAssertEqual(m.handle(.responseDecision(.allow)), .continueAfterDecision)
        XCTAssertEqual(m.handle(h(m, .data)), .deliverData)

        var c = running(asks: true)
        _ = c.handle(h(c, .response))
        XCTAssertEqual(c.handle(.responseDecision(.cancel)), .stopAndComplete(.cancelled))

        var d = running(asks: true)
        _ = d.handle(h(d, .response))
        XCTAssertEqual(d.handle(.responseDecision(.becomeDownload)), .becomeDownload)
        XCTAssertEqual(d.handle(h(d, .data)), .deliverData)
        XCTAssertEqual(d.handle(.responseDecision(.allow)), .none, "a decision nobody asked for is ignored")
    }

    func testRedirectFollowBumpsGenerationAndDropsTheOldHandler() {
        var m = running()
        let old = m.generation
        XCTAssertEqual(m.handle(h(m, .redirect(allowed: true))), .askRedirect)
        XCTAssertEqual(m.handle(h(m, .data)), .deferEvent)
        XCTAssertEqual(m.handle(.redirectDecision(follow: true)), .followRedirect)
        XCTAssertEqual(m.redirectCount, 1)
        XCTAssertNotEqual(m.generation, old)
        XCTAssertEqual(m.handle(.handler(generation: old, .finish)), .none, "the old handler is not heard any more")
        XCTAssertEqual(m.handle(h(m, .response)), .deliverResponse)
    }

    func testRedirectRefusedByDelegateCompletesWithTheRedirectResponse() {
        var m = running()
        _ = m.handle(h(m, .redirect(allowed: true)))
        XCTAssertEqual(m.handle(.redirectDecision(follow: false)), .completeWithRedirectResponse)
        XCTAssertEqual(m.lifecycle, .completed)
    }

    func testRedirectLimitAndScheme() {
        var m = running(maxRedirects: 2)
        for _ in 0..<2 {
            XCTAssertEqual(m.handle(h(m, .redirect(allowed: true))), .askRedirect)
            XCTAssertEqual(m.handle(.redirectDecision(follow: true)), .followRedirect)
        }
        guard case .stopAndComplete(.error(.tooManyRedirects, _)) = m.handle(h(m, .redirect(allowed: true))) else {
            return XCTFail("third redirect must exceed the limit")
        }
        var s = running()
        guard case .stopAndComplete(.error(.redirectNotAllowed, _)) = s.handle(h(s, .redirect(allowed: false))) else {
            return XCTFail("refused scheme")
        }
        var after = running()
        _ = after.handle(h(after, .response))
        guard case .stopAndComplete(.error(.protocolViolation, _)) = after.handle(h(after, .redirect(allowed: true))) else {
            return XCTFail("redirect after a response is a violation")
        }
    }

    func testChallengeWaitsAndRepliesOrCancels() {
        var m = running()
        XCTAssertEqual(m.handle(h(m, .challenge(7))), .askChallenge(7))
        XCTAssertEqual(m.handle(h(m, .response)), .deferEvent)
        XCTAssertEqual(m.handle(.challengeDecision(8, cancel: false)), .none, "an answer to another challenge is ignored")
        XCTAssertEqual(m.handle(.challengeDecision(7, cancel: false)), .replyChallenge(7))
        XCTAssertEqual(m.handle(h(m, .response)), .deliverResponse)

        var c = running()
        _ = c.handle(h(c, .challenge(1)))
        guard case .stopAndComplete(.error(.userCancelledAuthentication, _)) = c.handle(.challengeDecision(1, cancel: true)) else {
            return XCTFail()
        }
    }

    func testCancelDuringChallenge() {
        var m = running()
        _ = m.handle(h(m, .challenge(3)))
        XCTAssertEqual(m.handle(.cancel), .stopAndComplete(.cancelled))
        XCTAssertEqual(m.handle(.challengeDecision(3, cancel: false)), .none)
    }

    func testWithdrawnChallenge() {
        var m = running()
        _ = m.handle(h(m, .challenge(3)))
        XCTAssertEqual(m.handle(h(m, .challengeWithdrawn(3))), .forgetChallenge(3))
        XCTAssertEqual(m.handle(.challengeDecision(3, cancel: false)), .none, "the answer to a withdrawn challenge is dropped")
        XCTAssertEqual(m.handle(h(m, .challengeWithdrawn(9))), .none)
    }

    func testTimeoutOnlyWhileActive() {
        var idle = M(maximumRedirects: 20, asksResponseDisposition: false)
        XCTAssertEqual(idle.handle(.timeout), .none, "a task never started cannot time out")
        var m = running()
        guard case .stopAndComplete(.error(.timedOut, _)) = m.handle(.timeout) else { return XCTFail() }
        XCTAssertEqual(m.handle(.timeout), .none)
    }

    func testCachedResponseValid() {
        var m = running()
        XCTAssertEqual(m.handle(h(m, .cachedResponseValid)), .deliverCachedResponse)
        _ = m.handle(h(m, .response))
        guard case .ignoreViolation = m.handle(h(m, .cachedResponseValid)) else { return XCTFail() }
    }

    /// Every sequence of up to four events from a rich alphabet keeps the invariants:
    /// at most one completing action, and nothing but `.none` after it.
    func testExhaustiveSequencesCompleteAtMostOnce() {
        let alphabet: [(M) -> M.Event] = [
            { _ in .resume }, { _ in .suspend }, { _ in .cancel }, { _ in .timeout },
            { .handler(generation: $0.generation, .response) }, { .handler(generation: $0.generation, .data) },
            { .handler(generation: $0.generation, .finish) }, { .handler(generation: $0.generation, .fail) },
            { .handler(generation: $0.generation, .redirect(allowed: true)) },
            { .handler(generation: $0.generation, .challenge(1)) },
            { _ in .responseDecision(.allow) }, { _ in .redirectDecision(follow: true) },
            { _ in .challengeDecision(1, cancel: false) }, { _ in .completionDelivered },
        ]
        var sequences = 0
        func walk(_ m: M, depth: Int, completed: Bool) {
            if depth == 0 { sequences += 1; return }
            for make in alphabet {
                var next = m
                let action = next.handle(make(next))
                let completes: Bool
                switch action {
                case .complete, .stopAndComplete, .completeWithRedirectResponse: completes = true
                default: completes = false
                }
                if completed { XCTAssertEqual(action, .none, "action after completion") }
                XCTAssertFalse(completed && completes, "two completions")
                if completes { XCTAssertTrue(next.isFinal) }
                walk(next, depth: depth - 1, completed: completed || completes)
            }
        }
        for asks in [false, true] {
            walk(M(maximumRedirects: 1, asksResponseDisposition: asks), depth: 5, completed: false)
        }
        XCTAssertEqual(sequences, 2 * Int(pow(14.0, 5.0)))
    }
}
