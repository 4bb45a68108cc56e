import Foundation
import HTTPTypes
import XCTest
@testable import PorterCore
@testable import PorterEngine

/// The task state machine on its own: events in, payload-carrying actions out.
final class TaskStateMachineTests: XCTestCase {
    typealias M = TaskStateMachine

    static let url = URL(string: "http://a.example/start")!
    let request = Request(url: TaskStateMachineTests.url)
    let response = Response(url: TaskStateMachineTests.url, mimeType: "text/plain", expectedContentLength: 3, statusCode: 200)
    let chunk = Data("abc".utf8)

    func policy(max: Int = 20, allowed: Set<String> = ["http", "https"], accepts: Bool = true) -> RedirectPolicy {
        RedirectPolicy(maximumRedirects: max, allowedSchemes: allowed) { _ in accepts }
    }

    func challenge() -> AuthenticationChallenge {
        AuthenticationChallenge(protectionSpace: ProtectionSpace(host: "a.example", port: 80, protocol: "http", realm: "r",
                                                                 authenticationMethod: .httpBasic),
                                proposedCredential: nil, previousFailureCount: 0) { _ in }
    }

    func redirect(to target: String) -> HandlerReport {
        var next = request
        next.url = URL(string: target)!
        let r = Response(url: request.url, mimeType: nil, expectedContentLength: 0, statusCode: 302, headerFields: [.location: target])
        return .redirect(next, r)
    }

    /// A short name for an action and what it carries.
    func tag(_ a: M.Action) -> String {
        func outcome(_ o: M.Outcome) -> String {
            switch o {
            case .finished: return "finished"
            case .cancelled: return "cancelled"
            case .failed(let e): return "failed(\(e.code))"
            case .error(let code, _): return "error(\(code))"
            }
        }
        switch a {
        case .none: return "none"
        case .start(let r): return "start(\(r.url.absoluteString))"
        case .load(let r, let cached, let paused, _):
            return "load(\(r.url.absoluteString)\(cached != nil ? ",cached" : "")\(paused ? ",paused" : ""))"
        case .serveCached(_, let served, let revalidated, _): return "serveCached(\(served != nil),\(revalidated))"
        case .pauseHandler: return "pauseHandler"
        case .resumeHandler: return "resumeHandler"
        case .deliverResponse(let r, _): return "deliverResponse(\(r.statusCode ?? 0))"
        case .askResponseDisposition: return "askResponseDisposition"
        case .continueAfterDecision: return "continueAfterDecision"
        case .becomeDownload: return "becomeDownload"
        case .deliverData(let d): return "deliverData(\(d.count))"
        case .discardData(let n): return "discardData(\(n))"
        case .recordResponse(let r, let then): return "record(\(r.statusCode ?? 0)):" + tag(then)
        case .restartIdleClock: return "restartIdleClock"
        case .resumeDataUnavailable: return "resumeDataUnavailable"
        case .askRedirect(let r, _): return "askRedirect(\(r.url.absoluteString))"
        case .followRedirect(let r): return "followRedirect(\(r.url.absoluteString))"
        case .completeWithRedirectResponse(_, _): return "completeWithRedirectResponse"
        case .askChallenge(let id, let c): return id == c.identifier ? "askChallenge" : "askChallenge(mismatch)"
        case .replyChallenge(_, let d): return "replyChallenge(\(d))"
        case .ignoreViolation: return "ignoreViolation"
        case .complete(let o, _): return "complete(\(outcome(o)))"
        case .stopAndComplete(let o, _): return "stopAndComplete(\(outcome(o)))"
        case .checkConnectivity(let r): return "checkConnectivity(\(r.url.absoluteString))"
        case .waitForConnectivity(let notify): return "waitForConnectivity(\(notify))"
        case .retryLoad(let r): return "retryLoad(\(r.url.absoluteString))"
        }
    }

    func step(_ m: inout M, _ e: M.Event) -> String { tag(m.handle(e)) }
    func report(_ m: inout M, _ r: HandlerReport) -> String { tag(m.handle(.handler(generation: m.generation, r))) }
    /// The actions of the kept reports the machine now lets through.
    func drain(_ m: inout M) -> [String] {
        var out: [String] = []
        while let a = m.nextDeferredAction() { out.append(tag(a)) }
        return out
    }

    func planned(_ r: Request, policy: CachePolicy = .useProtocolCachePolicy, hit: CachedResponse? = nil) -> M.Event {
        .loadPlanned(r, CacheStep.Lookup(policy: policy, hit: hit))
    }

    private func running(asks: Bool = false, policy p: RedirectPolicy? = nil, waits: Bool = false) -> M {
        var m = M(request: request, redirectPolicy: p ?? policy(), asksResponseDisposition: asks, waitsForConnectivity: waits)
        XCTAssertEqual(step(&m, .resume), "start(http://a.example/start)")
        XCTAssertEqual(step(&m, planned(request)), "load(http://a.example/start)")
        return m
    }

    func testStartsSuspendedPlansThenLoadsOnce() {
        var m = M(request: request, redirectPolicy: policy(), asksResponseDisposition: false)
        XCTAssertEqual(m.lifecycle, .suspended)
        XCTAssertEqual(step(&m, .resume), "start(http://a.example/start)")
        XCTAssertEqual(m.lifecycle, .running)
        XCTAssertEqual(step(&m, .resume), "none")
        XCTAssertEqual(report(&m, .response(response, .allowed)), "record(200):none", "nothing from a handler before the load is planned")
        XCTAssertEqual(step(&m, planned(request)), "load(http://a.example/start)")
        XCTAssertEqual(step(&m, planned(request)), "none", "a second plan is ignored")
        XCTAssertEqual(drain(&m), ["deliverResponse(200)"], "the early report was kept, not lost")
        XCTAssertEqual(step(&m, .suspend), "pauseHandler")
        XCTAssertEqual(m.lifecycle, .suspended)
        XCTAssertEqual(step(&m, .suspend), "none")
        XCTAssertEqual(step(&m, .resume), "resumeHandler", "a second resume after suspend resumes, never restarts")
    }

    func testSuspendedWhilePlanningLoadsPaused() {
        var m = M(request: request, redirectPolicy: policy(), asksResponseDisposition: false)
        _ = m.handle(.resume)
        XCTAssertEqual(step(&m, .suspend), "none", "no handler yet")
        XCTAssertEqual(step(&m, .backlog), "none")
        XCTAssertEqual(step(&m, planned(request)), "load(http://a.example/start,paused)")
    }

    func testHappyPathCarriesThePayloads() {
        var m = running()
        XCTAssertEqual(report(&m, .response(response, .allowed)), "record(200):deliverResponse(200)")
        XCTAssertEqual(report(&m, .data(chunk)), "deliverData(3)")
        guard case .deliverData(let d) = m.handle(.handler(generation: m.generation, .data(Data("xy".utf8)))) else {
            return XCTFail("data must be delivered")
        }
        XCTAssertEqual(d, Data("xy".utf8), "the action carries the very bytes")
        XCTAssertEqual(report(&m, .finish), "complete(finished)")
        XCTAssertEqual(m.lifecycle, .completed)
    }

    func testExactlyOneCompletionWhateverTheHandlerDoes() {
        var m = running()
        _ = report(&m, .response(response, .allowed))
        XCTAssertEqual(report(&m, .finish), "complete(finished)")
        let late: [HandlerReport] = [.finish, .data(chunk), .fail(PorterError(.unknown, "x")), .response(response, .allowed),
                                     redirect(to: "http://b.example/"), .challenge(challenge()),
                                     .cachedResponseValid(serving: nil, revalidated: false)]
        for r in late {
            // Nothing, except that data nobody will see gives its flow credit back.
            let expected = if case .data(let d) = r { "discardData(\(d.count))" } else { "none" }
            XCTAssertEqual(report(&m, r), expected, "\(r) after completion must do nothing")
        }
        XCTAssertEqual(step(&m, .cancel(producingResumeData: false)), "none")
        XCTAssertEqual(step(&m, .timeout), "none")
        XCTAssertEqual(step(&m, .resume), "none")
        XCTAssertEqual(step(&m, .backlog), "none")
        XCTAssertNil(m.nextDeferredAction())
    }

    func testCancelCompletesAtOnceAndIgnoresTheRest() {
        var m = running()
        XCTAssertEqual(step(&m, .cancel(producingResumeData: true)), "stopAndComplete(cancelled)")
        XCTAssertTrue(m.wantsResumeData)
        XCTAssertEqual(m.lifecycle, .canceling)
        XCTAssertEqual(step(&m, .cancel(producingResumeData: false)), "none", "a second cancel is a no-op")
        XCTAssertEqual(report(&m, .response(response, .allowed)), "none")
        XCTAssertEqual(step(&m, .completionDelivered), "none")
        XCTAssertEqual(m.lifecycle, .completed)
    }

    func testCancelBeforeResume() {
        var m = M(request: request, redirectPolicy: policy(), asksResponseDisposition: false)
        XCTAssertEqual(step(&m, .cancel(producingResumeData: false)), "stopAndComplete(cancelled)")
        XCTAssertEqual(step(&m, .resume), "none", "a cancelled task never starts")
    }

    func testStartFailureOnlyWhilePlanning() {
        var m = M(request: request, redirectPolicy: policy(), asksResponseDisposition: false)
        XCTAssertEqual(step(&m, .startFailed(PorterError(.unsupportedURL, "x"))), "none", "not started: nothing to fail")
        _ = m.handle(.resume)
        XCTAssertEqual(step(&m, .startFailed(PorterError(.unsupportedURL, "x"))), "stopAndComplete(failed(unsupportedURL))")
        var loaded = running()
        XCTAssertEqual(step(&loaded, .startFailed(PorterError(.unsupportedURL, "x"))), "none")
    }

    func testDataBeforeResponseAndFinishWithoutResponseAreViolations() {
        var m = running()
        XCTAssertEqual(report(&m, .data(chunk)), "stopAndComplete(error(protocolViolation))")
        XCTAssertEqual(m.lifecycle, .completed)
        var f = running()
        XCTAssertEqual(report(&f, .finish), "stopAndComplete(error(protocolViolation))")
    }

    func testSecondResponseIsDropped() {
        var m = running()
        _ = report(&m, .response(response, .allowed))
        XCTAssertEqual(report(&m, .response(response, .allowed)), "record(200):ignoreViolation")
        XCTAssertEqual(report(&m, .data(chunk)), "deliverData(3)")
    }

    func testSuspendKeepsReportsWithTheirPayloadsUntilResume() {
        var m = running()
        _ = m.handle(.suspend)
        XCTAssertEqual(report(&m, .response(response, .allowed)), "record(200):none")
        XCTAssertEqual(report(&m, .data(chunk)), "none")
        XCTAssertEqual(m.deferredCount, 2)
        XCTAssertFalse(m.canProcessHandlerEvents)
        XCTAssertEqual(drain(&m), [], "nothing leaves while suspended")
        XCTAssertEqual(step(&m, .resume), "resumeHandler")
        XCTAssertEqual(drain(&m), ["deliverResponse(200)", "deliverData(3)"])
        XCTAssertEqual(report(&m, .data(chunk)), "deliverData(3)")
    }

    func testAReportBehindKeptOnesWaitsItsTurn() {
        var m = running()
        _ = m.handle(.suspend)
        _ = report(&m, .response(response, .allowed))
        _ = m.handle(.resume)
        // Not drained yet: a new report must not overtake the kept response.
        XCTAssertEqual(report(&m, .data(chunk)), "none")
        XCTAssertEqual(drain(&m), ["deliverResponse(200)", "deliverData(3)"])
    }

    func testFailKeepsItsPlaceBehindAPendingDecision() {
        var m = running(asks: true)
        XCTAssertEqual(report(&m, .response(response, .allowed)), "record(200):askResponseDisposition")
        XCTAssertEqual(report(&m, .data(chunk)), "none")
        XCTAssertEqual(report(&m, .fail(PorterError(.networkConnectionLost, "x"))), "none",
                       "the data before the failure is delivered first")
        XCTAssertEqual(step(&m, .responseDecision(.allow)), "continueAfterDecision")
        XCTAssertEqual(drain(&m), ["deliverData(3)", "stopAndComplete(failed(networkConnectionLost))"])
        XCTAssertEqual(step(&m, .responseDecision(.allow)), "none", "a late decision finds the task completed")
    }

    func testCancelStillEndsASuspendedTaskAtOnce() {
        var m = running()
        _ = m.handle(.suspend)
        XCTAssertEqual(report(&m, .fail(PorterError(.unknown, "x"))), "none")
        XCTAssertEqual(step(&m, .cancel(producingResumeData: false)), "stopAndComplete(cancelled)")
        XCTAssertEqual(m.deferredCount, 0, "kept reports go with the task")
    }

    func testResponseDisposition() {
        var m = running(asks: true)
        XCTAssertEqual(report(&m, .response(response, .allowed)), "record(200):askResponseDisposition")
        XCTAssertEqual(report(&m, .data(chunk)), "none", "no data reaches anyone before the decision")
        XCTAssertEqual(report(&m, .finish), "none")
        XCTAssertEqual(step(&m, .responseDecision(.allow)), "continueAfterDecision")
        XCTAssertEqual(drain(&m), ["deliverData(3)", "complete(finished)"])

        var c = running(asks: true)
        _ = report(&c, .response(response, .allowed))
        XCTAssertEqual(step(&c, .responseDecision(.cancel)), "stopAndComplete(cancelled)")

        var d = running(asks: true)
        _ = report(&d, .response(response, .allowed))
        XCTAssertEqual(step(&d, .responseDecision(.becomeDownload)), "becomeDownload")
        XCTAssertEqual(report(&d, .data(chunk)), "deliverData(3)")
        XCTAssertEqual(step(&d, .responseDecision(.allow)), "none", "a decision nobody asked for is ignored")
    }

    func testFlowPauseAndSuspendCombine() {
        var m = running()
        _ = report(&m, .response(response, .allowed))
        XCTAssertEqual(step(&m, .backlog), "pauseHandler")
        XCTAssertEqual(step(&m, .backlog), "none")
        XCTAssertEqual(step(&m, .suspend), "none", "already paused by the consumer")
        XCTAssertEqual(step(&m, .drained), "none", "still suspended: the handler stays paused")
        XCTAssertEqual(step(&m, .resume), "resumeHandler")
        XCTAssertEqual(step(&m, .backlog), "pauseHandler")
        XCTAssertEqual(step(&m, .resume), "none", "resume of a running task changes nothing")
        XCTAssertEqual(step(&m, .suspend), "none")
        XCTAssertEqual(step(&m, .resume), "none", "resumed, but the consumer still holds too much")
        XCTAssertTrue(m.handlerPaused)
        XCTAssertEqual(step(&m, .drained), "resumeHandler")
        XCTAssertFalse(m.handlerPaused)
        XCTAssertEqual(step(&m, .drained), "none")
        XCTAssertEqual(report(&m, .data(chunk)), "deliverData(3)", "flow pause does not hold reports back")
    }

    func testRedirectFollowBumpsGenerationAndDropsTheOldHandler() {
        var m = running()
        let old = m.generation
        XCTAssertEqual(report(&m, redirect(to: "http://a.example/next")), "record(302):askRedirect(http://a.example/next)")
        XCTAssertEqual(report(&m, .data(chunk)), "none")
        var chosen = Request(url: URL(string: "http://a.example/chosen")!)
        chosen.method = "GET"
        XCTAssertEqual(step(&m, .redirectDecision(chosen)), "followRedirect(http://a.example/chosen)",
                       "the delegate's choice is what is loaded")
        XCTAssertEqual(m.redirectCount, 1)
        XCTAssertNotEqual(m.generation, old)
        XCTAssertEqual(m.deferredCount, 0, "the old handler's kept reports are dropped")
        XCTAssertEqual(tag(m.handle(.handler(generation: old, .finish))), "none", "the old handler is not heard any more")
        XCTAssertEqual(step(&m, planned(chosen)), "load(http://a.example/chosen)")
        XCTAssertEqual(report(&m, .response(response, .allowed)), "record(200):deliverResponse(200)")
    }

    func testRedirectRefusedByDelegateCompletesWithTheRedirectResponse() {
        var m = running()
        _ = report(&m, redirect(to: "http://a.example/next"))
        XCTAssertEqual(step(&m, .redirectDecision(nil)), "completeWithRedirectResponse")
        XCTAssertEqual(m.lifecycle, .completed)
    }

    func testRedirectLimitSchemesAndOrder() {
        var m = running(policy: policy(max: 2))
        for i in 0..<2 {
            XCTAssertEqual(report(&m, redirect(to: "http://a.example/\(i)")), "record(302):askRedirect(http://a.example/\(i))")
            let next = Request(url: URL(string: "http://a.example/\(i)")!)
            XCTAssertEqual(step(&m, .redirectDecision(next)), "followRedirect(http://a.example/\(i))")
            _ = m.handle(planned(next))
        }
        XCTAssertEqual(report(&m, redirect(to: "http://a.example/3")), "record(302):stopAndComplete(error(tooManyRedirects))")

        var s = running(policy: policy(allowed: ["http", "https"]))
        XCTAssertEqual(report(&s, redirect(to: "file:///etc/passwd")), "record(302):stopAndComplete(error(redirectNotAllowed))")
        var p = running(policy: policy(allowed: ["http", "https", "gopher"], accepts: false))
        XCTAssertEqual(report(&p, redirect(to: "gopher://h/")), "record(302):stopAndComplete(error(redirectNotAllowed))",
                       "an allowed scheme whose handler refuses to be a target")
        var ok = running(policy: policy(allowed: ["http", "https"]))
        XCTAssertEqual(report(&ok, redirect(to: "https://a.example/")), "record(302):askRedirect(https://a.example/)")

        var after = running()
        _ = report(&after, .response(response, .allowed))
        XCTAssertEqual(report(&after, redirect(to: "http://a.example/x")), "record(302):stopAndComplete(error(protocolViolation))")
    }

    func testRedirectToAnotherOriginLosesTheCredentials() {
        var start = request
        start.headerFields[.authorization] = "Basic c2VjcmV0"
        start.headerFields[.cookie] = "a=b"
        start.headerFields[.proxyAuthorization] = "Basic eA=="
        var m = M(request: start, redirectPolicy: policy(), asksResponseDisposition: false)
        _ = m.handle(.resume)
        _ = m.handle(planned(start))
        for (target, keeps) in [("http://a.example/same", true), ("http://A.EXAMPLE/case", true),
                                ("http://b.example/other", false), ("https://a.example/scheme", false),
                                ("http://a.example:8080/port", false)] {
            var copy = m
            var proposed = start
            proposed.url = URL(string: target)!
            let r = Response(url: start.url, mimeType: nil, expectedContentLength: 0, statusCode: 302, headerFields: [.location: target])
            guard case .recordResponse(_, .askRedirect(let prepared, _)) = copy.handle(.handler(generation: copy.generation, .redirect(proposed, r))) else {
                return XCTFail("\(target) must be asked about")
            }
            XCTAssertEqual(prepared.headerFields[.authorization] != nil, keeps, target)
            XCTAssertEqual(prepared.headerFields[.cookie] != nil, keeps, target)
            XCTAssertEqual(prepared.headerFields[.proxyAuthorization] != nil, keeps, target)
        }
    }

    func testChallengeWaitsAndRepliesOrCancels() {
        var m = running()
        let c = challenge()
        XCTAssertEqual(report(&m, .challenge(c)), "askChallenge")
        XCTAssertEqual(report(&m, .response(response, .allowed)), "record(200):none")
        XCTAssertEqual(step(&m, .challengeDecision(c.identifier + 1000, .performDefaultHandling)), "none",
                       "an answer to another challenge is ignored")
        guard case .replyChallenge(let replied, _) = m.handle(.challengeDecision(c.identifier, .performDefaultHandling)) else {
            return XCTFail("the answer goes to the handler")
        }
        XCTAssertEqual(replied.identifier, c.identifier, "the reply carries the challenge it answers")
        XCTAssertEqual(drain(&m), ["deliverResponse(200)"])

        var k = running()
        let c2 = challenge()
        _ = report(&k, .challenge(c2))
        XCTAssertEqual(step(&k, .challengeDecision(c2.identifier, .cancelAuthenticationChallenge)),
                       "stopAndComplete(error(userCancelledAuthentication))")
    }

    func testCancelDuringChallenge() {
        var m = running()
        let c = challenge()
        _ = report(&m, .challenge(c))
        XCTAssertEqual(step(&m, .cancel(producingResumeData: false)), "stopAndComplete(cancelled)")
        XCTAssertEqual(step(&m, .challengeDecision(c.identifier, .performDefaultHandling)), "none")
    }

    func testWithdrawnChallengeJumpsTheLine() {
        var m = running()
        let c = challenge()
        _ = report(&m, .challenge(c))
        _ = report(&m, .response(response, .allowed))
        XCTAssertEqual(report(&m, .challengeWithdrawn(c)), "none")
        XCTAssertEqual(m.wait, .none, "the wait ends although a report is kept ahead of the withdrawal")
        XCTAssertEqual(step(&m, .challengeDecision(c.identifier, .performDefaultHandling)), "none",
                       "the answer to a withdrawn challenge is dropped")
        XCTAssertEqual(drain(&m), ["deliverResponse(200)"])
        XCTAssertEqual(report(&m, .challengeWithdrawn(challenge())), "none")
    }

    func testTimeoutOnlyWhileActive() {
        var idle = M(request: request, redirectPolicy: policy(), asksResponseDisposition: false)
        XCTAssertEqual(step(&idle, .timeout), "none", "a task never started cannot time out")
        var m = running()
        XCTAssertEqual(step(&m, .timeout), "stopAndComplete(error(timedOut))")
        XCTAssertEqual(step(&m, .timeout), "none")
    }

    /// The clock: the machine decides whether idle time counts and whether it is a
    /// timeout; the shell only measures.
    func testTheClockCountsOnlyTheTimeThePeerOwes() {
        let late = M.Event.clock(idleFor: 61, elapsed: 61, idleLimit: 60, totalLimit: 600)
        var idle = M(request: request, redirectPolicy: policy(), asksResponseDisposition: false)
        XCTAssertEqual(step(&idle, late), "none", "a task never started has no clock")
        var m = running()
        XCTAssertEqual(step(&m, .clock(idleFor: 59, elapsed: 59, idleLimit: 60, totalLimit: 600)), "none")
        var suspended = running()
        _ = suspended.handle(.suspend)
        XCTAssertEqual(step(&suspended, late), "restartIdleClock", "suspended: not the peer's time")
        XCTAssertEqual(step(&suspended, .clock(idleFor: 0, elapsed: 601, idleLimit: 60, totalLimit: 600)),
                       "stopAndComplete(error(timedOut))", "the resource limit holds even while suspended")
        var paused = running()
        _ = paused.handle(.backlog)
        XCTAssertEqual(step(&paused, late), "restartIdleClock", "held back by the consumer")
        var asking = running(asks: true)
        _ = asking.handle(.handler(generation: asking.generation, .response(response, .allowed)))
        XCTAssertEqual(step(&asking, late), "restartIdleClock", "waiting for the delegate")
        XCTAssertEqual(step(&m, late), "stopAndComplete(error(timedOut))")
        XCTAssertEqual(step(&m, late), "none")
    }

    /// A response's store effects (cookies, cache invalidation) are an action of their
    /// own, ahead of whatever the response leads to, and only for the current handler.
    func testResponseStoreEffectsComeFirst() {
        var m = running()
        let old = m.generation
        guard case .recordResponse(let r, let then) = m.handle(.handler(generation: old, redirect(to: "http://a.example/n"))) else {
            return XCTFail("a redirect's cookies are stored before the next hop")
        }
        XCTAssertEqual(r.statusCode, 302)
        XCTAssertEqual(tag(then), "askRedirect(http://a.example/n)")
        _ = m.handle(.redirectDecision(Request(url: URL(string: "http://a.example/n")!)))
        XCTAssertEqual(tag(m.handle(.handler(generation: old, .response(response, .allowed)))), "none",
                       "a replaced handler's response touches no store")
        _ = m.handle(planned(Request(url: URL(string: "http://a.example/n")!)))
        XCTAssertEqual(report(&m, .response(response, .allowed)), "record(200):deliverResponse(200)")
        XCTAssertEqual(report(&m, .finish), "complete(finished)")
        XCTAssertEqual(report(&m, .response(response, .allowed)), "none", "nothing after the end")
    }

    /// Data the consumer will never see gives its flow credit back, whichever way it is
    /// dropped: a replaced handler's, after the end, or kept and then dropped.
    func testDroppedDataGivesItsCreditBack() {
        var m = running()
        let old = m.generation
        _ = report(&m, .response(response, .allowed))
        _ = m.handle(.suspend)
        XCTAssertEqual(report(&m, .data(chunk)), "none", "kept while suspended")
        XCTAssertEqual(m.keptDataBytes, 3)
        XCTAssertEqual(step(&m, .cancel(producingResumeData: false)), "stopAndComplete(cancelled)")
        XCTAssertEqual(drain(&m), ["discardData(3)"], "kept data dropped by the end")
        XCTAssertEqual(tag(m.handle(.handler(generation: old, .data(chunk)))), "discardData(3)", "after the end")

        var r = running(asks: false)
        _ = report(&r, redirect(to: "http://a.example/n"))
        XCTAssertEqual(report(&r, .data(chunk)), "none", "kept behind the redirect decision")
        XCTAssertEqual(step(&r, .redirectDecision(Request(url: URL(string: "http://a.example/n")!))), "followRedirect(http://a.example/n)")
        XCTAssertEqual(drain(&r), ["discardData(3)"], "the old hop's kept data")
        XCTAssertEqual(tag(r.handle(.handler(generation: old, .data(chunk)))), "discardData(3)", "a replaced handler's")
    }

    /// The completing action carries what the shell needs: redirects followed, whether
    /// the cancel asked for resume data; and a cancel for resume data after the end says so.
    func testTheEndCarriesWhatTheShellNeeds() {
        var m = running()
        _ = report(&m, redirect(to: "http://a.example/n"))
        _ = m.handle(.redirectDecision(Request(url: URL(string: "http://a.example/n")!)))
        _ = m.handle(planned(Request(url: URL(string: "http://a.example/n")!)))
        guard case .stopAndComplete(.cancelled, let ending) = m.handle(.cancel(producingResumeData: true)) else {
            return XCTFail("the cancel ends the task")
        }
        XCTAssertEqual(ending, M.Ending(redirectCount: 1, producesResumeData: true))
        XCTAssertEqual(step(&m, .cancel(producingResumeData: true)), "resumeDataUnavailable")
        XCTAssertEqual(step(&m, .cancel(producingResumeData: false)), "none")
        var f = running()
        _ = report(&f, .response(response, .allowed))
        guard case .complete(.finished, let e) = f.handle(.handler(generation: f.generation, .finish)) else { return XCTFail() }
        XCTAssertEqual(e, M.Ending(redirectCount: 0, producesResumeData: false))
    }

    func testCacheStep() {
        let stored = CachedResponse(response: response, data: chunk)
        func first(_ policy: CachePolicy, hit: CachedResponse?) -> String {
            var m = M(request: request, redirectPolicy: self.policy(), asksResponseDisposition: false)
            _ = m.handle(.resume)
            return step(&m, planned(request, policy: policy, hit: hit))
        }
        XCTAssertEqual(first(.useProtocolCachePolicy, hit: stored), "load(http://a.example/start,cached)")
        XCTAssertEqual(first(.reloadRevalidatingCacheData, hit: stored), "load(http://a.example/start,cached)")
        XCTAssertEqual(first(.reloadIgnoringLocalCacheData, hit: stored), "load(http://a.example/start)")
        XCTAssertEqual(first(.returnCacheDataElseLoad, hit: stored), "serveCached(false,false)")
        XCTAssertEqual(first(.returnCacheDataElseLoad, hit: nil), "load(http://a.example/start)")
        XCTAssertEqual(first(.returnCacheDataDontLoad, hit: stored), "serveCached(false,false)")
        XCTAssertEqual(first(.returnCacheDataDontLoad, hit: nil), "stopAndComplete(error(resourceUnavailable))")
    }

    func testCachedResponseValid() {
        var m = M(request: request, redirectPolicy: policy(), asksResponseDisposition: false)
        _ = m.handle(.resume)
        _ = m.handle(planned(request, hit: CachedResponse(response: response, data: chunk)))
        XCTAssertEqual(report(&m, .cachedResponseValid(serving: response, revalidated: true)), "serveCached(true,true)")
        XCTAssertEqual(report(&m, .cachedResponseValid(serving: nil, revalidated: false)),
                       "stopAndComplete(error(protocolViolation))", "served once; a second claim has nothing to serve")

        var none = running()
        XCTAssertEqual(report(&none, .cachedResponseValid(serving: nil, revalidated: false)),
                       "stopAndComplete(error(protocolViolation))", "no stored response was handed over")
        var late = running()
        _ = report(&late, .response(response, .allowed))
        XCTAssertEqual(report(&late, .cachedResponseValid(serving: nil, revalidated: false)), "ignoreViolation")
    }

    /// waitsForConnectivity: a connection failure before any response asks for a route
    /// check; no route means wait (the delegate hears it once), a network change loads the
    /// hop's request again, and a route that exists means the failure was real.
    func testWaitsForConnectivity() {
        var m = M(request: request, redirectPolicy: policy(), asksResponseDisposition: false, waitsForConnectivity: true)
        _ = m.handle(.resume)
        _ = m.handle(planned(request))
        let stale = m.generation
        XCTAssertEqual(report(&m, .fail(PorterError(.cannotConnectToHost, "ENETUNREACH"))), "checkConnectivity(http://a.example/start)")
        XCTAssertEqual(tag(m.handle(.handler(generation: stale, .finish))), "none", "the failed handler is not heard again")
        XCTAssertEqual(step(&m, .networkChanged), "none", "not waiting yet: the check is under way")
        XCTAssertEqual(step(&m, .connectivityChecked(reachable: false)), "waitForConnectivity(true)")
        XCTAssertEqual(step(&m, .connectivityChecked(reachable: false)), "none")
        XCTAssertEqual(step(&m, .networkChanged), "retryLoad(http://a.example/start)")
        XCTAssertEqual(step(&m, planned(request)), "load(http://a.example/start)")
        XCTAssertEqual(report(&m, .fail(PorterError(.cannotFindHost, "no DNS"))), "checkConnectivity(http://a.example/start)")
        XCTAssertEqual(step(&m, .connectivityChecked(reachable: false)), "waitForConnectivity(false)", "the delegate hears it once")
        XCTAssertEqual(step(&m, .timeout), "stopAndComplete(error(timedOut))")

        // A route exists: the server refused; the original failure ends the task.
        var refused = running(waits: true)
        XCTAssertEqual(report(&refused, .fail(PorterError(.cannotConnectToHost, "ECONNREFUSED"))), "checkConnectivity(http://a.example/start)")
        XCTAssertEqual(step(&refused, .connectivityChecked(reachable: true)), "stopAndComplete(failed(cannotConnectToHost))")

        // Not asked to wait, or a response already came, or another failure: fail at once.
        var plain = running()
        XCTAssertEqual(report(&plain, .fail(PorterError(.cannotConnectToHost, "x"))), "stopAndComplete(failed(cannotConnectToHost))")
        var late = running(waits: true)
        _ = report(&late, .response(response, .allowed))
        XCTAssertEqual(report(&late, .fail(PorterError(.cannotConnectToHost, "x"))), "stopAndComplete(failed(cannotConnectToHost))")
        // A lost connection may have carried the request (a POST): never sent again.
        var lost = running(waits: true)
        XCTAssertEqual(report(&lost, .fail(PorterError(.networkConnectionLost, "x"))), "stopAndComplete(failed(networkConnectionLost))")
        var other = running(waits: true)
        XCTAssertEqual(report(&other, .fail(PorterError(.secureConnectionFailed, "x"))), "stopAndComplete(failed(secureConnectionFailed))")
        // Cancel while waiting.
        var waiting = running(waits: true)
        _ = report(&waiting, .fail(PorterError(.cannotConnectToHost, "x")))
        _ = waiting.handle(.connectivityChecked(reachable: false))
        XCTAssertEqual(step(&waiting, .cancel(producingResumeData: false)), "stopAndComplete(cancelled)")
        XCTAssertEqual(step(&waiting, .networkChanged), "none")
    }

    /// Every sequence of four events (and of seven flow events) from a rich alphabet (kept reports let
    /// through after each) keeps the invariants: at most one completing action, nothing
    /// but `.none` after it, the handler paused exactly while suspended or backlogged,
    /// and no report kept once the task is over.
    func testExhaustiveSequencesCompleteAtMostOnce() {
        let c = challenge()
        let full: [(M) -> M.Event] = [
            { _ in .resume }, { _ in .suspend }, { _ in .cancel(producingResumeData: false) }, { _ in .timeout },
            { _ in .backlog }, { _ in .drained },
            { [request] _ in .loadPlanned(request, CacheStep.Lookup(policy: .useProtocolCachePolicy, hit: nil)) },
            { [response] in .handler(generation: $0.generation, .response(response, .allowed)) },
            { [chunk] in .handler(generation: $0.generation, .data(chunk)) },
            { .handler(generation: $0.generation, .finish) },
            { .handler(generation: $0.generation, .fail(PorterError(.unknown, "x"))) },
            { [self] in .handler(generation: $0.generation, redirect(to: "http://a.example/r")) },
            { .handler(generation: $0.generation, .challenge(c)) },
            { _ in .responseDecision(.allow) }, { [request] _ in .redirectDecision(request) },
            { _ in .challengeDecision(c.identifier, .performDefaultHandling) }, { _ in .completionDelivered },
            { .handler(generation: $0.generation, .fail(PorterError(.cannotConnectToHost, "no route"))) },
            { _ in .connectivityChecked(reachable: false) }, { _ in .connectivityChecked(reachable: true) },
            { _ in .networkChanged },
            { _ in .clock(idleFor: 100, elapsed: 1, idleLimit: 60, totalLimit: 600) },
        ]
        var alphabet = full
        var sequences = 0
        func completes(_ a: M.Action) -> Bool {
            switch a {
            case .complete, .stopAndComplete, .completeWithRedirectResponse: return true
            default: return false
            }
        }
        /// A response's store effects come first; what follows is the action proper.
        func flatten(_ a: M.Action) -> [M.Action] {
            if case .recordResponse(_, let then) = a { return [a] + flatten(then) }
            return [a]
        }
        func walk(_ m: M, depth: Int, completed: Bool, paused: Bool, held: Int, trail: [M.Event]) {
            if depth == 0 { sequences += 1; return }
            for make in alphabet {
                var next = m
                let event = make(next)
                let trail = trail + [event]
                var actions = flatten(next.handle(event))
                while let a = next.nextDeferredAction() { actions += flatten(a) }
                var done = completed
                var handlerPaused = paused
                // Flow credit: every byte reported is held until it is delivered or
                // given back, exactly once.
                var held = held
                if case .handler(_, .data(let d)) = event { held += d.count }
                for action in actions {
                    switch action {
                    case .deliverData(let d): held -= d.count
                    case .discardData(let n): held -= n
                    default: break
                    }
                    if case .recordResponse = action { XCTAssertFalse(done, "a store effect after completion") }
                    if done, case .discardData = action {} else if done {
                        XCTAssertEqual(tag(action), "none", "action after completion")
                    }
                    if completes(action) {
                        XCTAssertFalse(done, "two completions")
                        XCTAssertTrue(next.isFinal)
                        done = true
                    }
                    switch action {
                    case .pauseHandler:
                        XCTAssertFalse(handlerPaused, "paused twice")
                        handlerPaused = true
                    case .resumeHandler:
                        XCTAssertTrue(handlerPaused, "resumed without a pause after \(trail.map { "\($0)".prefix(40) })")
                        handlerPaused = false
                    case .load(_, _, let p, _):
                        handlerPaused = p
                    case .followRedirect, .retryLoad:
                        // A new handler comes; it is made paused or not by `load`.
                        handlerPaused = next.handlerPaused
                    default: break
                    }
                }
                // Between `start` and `load` there is no handler to pause.
                if !next.isFinal, next.started, next.wait != .plan {
                    XCTAssertEqual(handlerPaused, next.handlerPaused, "pause state drifted after \(trail.map { "\($0)".prefix(40) })")
                }
                if next.isFinal { XCTAssertEqual(next.deferredCount, 0) }
                XCTAssertEqual(held, next.keptDataBytes, "flow credit lost or given back twice after \(trail.map { "\($0)".prefix(40) })")
                walk(next, depth: depth - 1, completed: done, paused: handlerPaused, held: held, trail: trail)
            }
        }
        for (asks, waits) in [(false, false), (true, false), (false, true)] {
            walk(M(request: request, redirectPolicy: policy(max: 1), asksResponseDisposition: asks, waitsForConnectivity: waits),
                 depth: 4, completed: false, paused: false, held: 0, trail: [])
        }
        XCTAssertEqual(sequences, 3 * Int(pow(Double(full.count), 4.0)))
        // Longer runs of the events that move the pause state.
        alphabet = [full[0], full[1], full[4], full[5], full[7], full[8], full[13]]
        sequences = 0
        var loaded = M(request: request, redirectPolicy: policy(max: 1), asksResponseDisposition: true)
        _ = loaded.handle(.resume)
        _ = loaded.handle(planned(request))
        walk(loaded, depth: 7, completed: false, paused: false, held: 0, trail: [])
        XCTAssertEqual(sequences, Int(pow(Double(alphabet.count), 7.0)))
    }
}
