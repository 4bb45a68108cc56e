import Foundation
import PorterCore

/// One rule of the handler contract (`ProtocolHandler`, `porter_plugin.h`), with the fix
/// a handler that breaks it needs.
public struct ConformanceRule: Sendable, Hashable, CustomStringConvertible {
    public let id: String
    public let rule: String
    public let fix: String
    public var description: String { "\(id): \(rule)" }

    public static let endsOnce = ConformanceRule(id: "ends-once",
        rule: "a load ends exactly once: one didFinishLoading, didFail(with:), cachedResponseIsValid or wasRedirected",
        fix: "keep a 'finished' flag set under a lock and report the end only when it flips; in C, return after porter_host.did_finish / did_fail")
    public static let ends = ConformanceRule(id: "ends",
        rule: "every load ends: report didFinishLoading or didFail(with:) (in C: did_finish / did_fail)",
        fix: "report the end on every path, errors included, and give the I/O an idle timeout of its own (Request.timeoutInterval, porter_request.timeout_interval) that fails with .timedOut")
    public static let responseFirst = ConformanceRule(id: "response-before-data",
        rule: "body bytes come after the response head: didReceive(_:cacheStoragePolicy:) once, then didLoad",
        fix: "report the response (did_receive_response) before the first didLoad (did_load_data), even for a scheme without headers: a Response with the MIME type and the expected length (-1 if unknown)")
    public static let oneResponse = ConformanceRule(id: "one-response",
        rule: "a load reports at most one response head",
        fix: "for a new resource report wasRedirected(to:redirectResponse:) instead of a second response")
    public static let quietAfterEnd = ConformanceRule(id: "quiet-after-end",
        rule: "nothing is reported after the end (finish, fail, redirect)",
        fix: "stop the I/O thread before reporting the end, or check a 'finished' flag before every client call")
    public static let challengeFirst = ConformanceRule(id: "challenge-before-response",
        rule: "challenges come before the response head",
        fix: "raise didReceive(_ challenge:) while connecting or logging in, and report the response only once the answer arrived")
    public static let quietAfterRedirect = ConformanceRule(id: "redirect-ends-load",
        rule: "after wasRedirected the handler reports nothing more (Porter decides, then stops it)",
        fix: "return from the load after was_redirected; do not report the redirect response's body or a finish")
    public static let startReturns = ConformanceRule(id: "start-returns",
        rule: "startLoading (start) returns promptly: the I/O runs on a thread, queue or event loop of the handler's own",
        fix: "start a thread (or schedule on your event loop) in startLoading and return; never block on the network in it")
    public static let stopReturns = ConformanceRule(id: "stop-returns",
        rule: "stopLoading (stop) returns promptly, in every phase of the load",
        fix: "only set a 'stopped' flag (and wake the I/O thread, e.g. close its socket or signal a pipe) in stopLoading; never wait there for a thread that may be blocked in a client call")
    public static let quietAfterStop = ConformanceRule(id: "quiet-after-stop",
        rule: "after stopLoading the handler stops calling the client (at most one call already under way)",
        fix: "check the 'stopped' flag before every client call on the I/O thread, and stop reading from the network")
    public static let pauseReturns = ConformanceRule(id: "pause-returns",
        rule: "pauseDelivery / resumeDelivery only flip state and return — also when called from inside a client call",
        fix: "use FlowControl (Swift) or an atomic flag and a condition variable (C): pause sets the flag, the delivery loop parks between chunks; never take a lock in pause that the delivery thread holds while it calls the client")
    public static let resumeContinues = ConformanceRule(id: "resume-continues",
        rule: "after resumeDelivery the load goes on and ends",
        fix: "wake the parked delivery loop in resumeDelivery (FlowControl.resume(), pthread_cond_broadcast)")
    public static let lengthMatches = ConformanceRule(id: "length-matches",
        rule: "the body is as long as the response's expected length says (when it is not -1 and no content coding applies)",
        fix: "set expectedContentLength (expected_length) to the bytes you will deliver, or -1 when you do not know")
    public static let challengeAnswered = ConformanceRule(id: "challenge-answered",
        rule: "after a challenge is answered — even with 'reject this protection space' — the load goes on and ends",
        fix: "let every reply lead the I/O thread on: use the credential, try the next method, or report the response it has (a 401) or a failure (in C: act on every PORTER_DISPOSITION_*); when the application cancels, Porter stops the handler itself")
    public static let noCrash = ConformanceRule(id: "no-crash",
        rule: "the plugin does not crash (its worker process stays alive)",
        fix: "run the load with `porter --plugins-in-process -v URL` under gdb or valgrind to find the fault; check pointers the host gave you are used only between start and destroy")
    public static let schemesValid = ConformanceRule(id: "schemes",
        rule: "a handler declares at least one scheme, in lower case (a letter, then letters, digits, + - .)",
        fix: "return lower-case scheme names from `schemes` (the descriptor's scheme list)")
    public static let canonicalStable = ConformanceRule(id: "canonical-stable",
        rule: "canonicalRequest is idempotent and a request is cache-equivalent to itself",
        fix: "make canonicalRequest(for:) a pure normalisation (lower-case host, default port removed, …) that returns its input when applied twice")

    public static let all: [ConformanceRule] = [.ends, .endsOnce, .responseFirst, .oneResponse, .quietAfterEnd, .challengeFirst,
        .quietAfterRedirect, .startReturns, .stopReturns, .quietAfterStop, .pauseReturns, .resumeContinues, .lengthMatches,
        .challengeAnswered, .noCrash, .schemesValid, .canonicalStable]
}

/// A broken rule, where it was seen and what happened.
public struct ConformanceFinding: Sendable, CustomStringConvertible {
    public let rule: ConformanceRule
    public let scenario: String
    public let detail: String
    public var description: String {
        "FAIL [\(scenario)] \(rule.id): \(rule.rule)\n    what happened: \(detail)\n    fix: \(rule.fix)"
    }
}

/// What `ConformanceKit.run` found.
public struct ConformanceReport: Sendable, CustomStringConvertible {
    public let handler: String
    public let url: URL
    /// Each scenario run and a one-line outcome ("ok", "skipped: …").
    public var scenarios: [(name: String, outcome: String)] = []
    public var findings: [ConformanceFinding] = []
    public var passed: Bool { findings.isEmpty }
    public func broke(_ rule: ConformanceRule) -> Bool { findings.contains { $0.rule == rule } }
    public var description: String {
        var lines = ["handler conformance: \(handler) with \(url.absoluteString)"]
        for s in scenarios { lines.append("  \(s.name): \(s.outcome)") }
        for f in findings { lines.append(f.description) }
        lines.append(passed ? "PASS: \(scenarios.count) scenarios, no rule broken"
                            : "FAILED: \(Set(findings.map(\.rule.id)).count) rule(s) broken")
        return lines.joined(separator: "\n")
    }
}

public struct ConformanceOptions: Sendable {
    /// How long a load may take before it counts as never finishing. Generous: the
    /// suite runs on loaded machines.
    public var loadTimeout: TimeInterval = 20
    /// How long startLoading, stopLoading, pauseDelivery may block before they count as
    /// hanging.
    public var callTimeout: TimeInterval = 10
    /// How long to watch for reports after the end (a detection window, not a bound
    /// a correct handler must meet).
    public var settle: TimeInterval = 0.3
    /// The answer to a challenge in the plain load (cancel is tried separately).
    public var challengeAnswer: ChallengeDisposition = .performDefaultHandling
    public init() {}
}

/// Runs the handler contract against a handler, as Porter drives it (on the executor the
/// handler asks for), and reports each rule it breaks with the fix.
public enum ConformanceKit {
    /// Runs the contract against a `ProtocolHandler` type (its declared schemes are
    /// checked as written).
    public static func run(_ type: any ProtocolHandler.Type, url: URL, options: ConformanceOptions = ConformanceOptions()) -> ConformanceReport {
        var report = run(factory: TypeHandlerFactory(type), request: Request(url: url), options: options)
        if !report.broke(.schemesValid), type.schemes.isEmpty || type.schemes.contains(where: { !isScheme($0) }) {
            report.findings.insert(ConformanceFinding(rule: .schemesValid, scenario: "declaration", detail: "schemes: \(type.schemes.sorted())"), at: 0)
        }
        return report
    }

    public static func run(factory: any ProtocolHandlerFactory, url: URL, options: ConformanceOptions = ConformanceOptions()) -> ConformanceReport {
        run(factory: factory, request: Request(url: url), options: options)
    }

    public static func run(factory: any ProtocolHandlerFactory, request: Request, options: ConformanceOptions = ConformanceOptions()) -> ConformanceReport {
        var report = ConformanceReport(handler: factory.name, url: request.url)
        var findings: [ConformanceFinding] = []
        func add(_ rule: ConformanceRule, _ scenario: String, _ detail: String) {
            if !findings.contains(where: { $0.rule == rule && $0.scenario == scenario }) {
                findings.append(ConformanceFinding(rule: rule, scenario: scenario, detail: detail))
            }
        }
        // Static rules.
        if factory.schemes.isEmpty || factory.schemes.contains(where: { !Self.isScheme($0) }) {
            add(.schemesValid, "declaration", "schemes: \(factory.schemes.sorted())")
        }
        let c1 = factory.canonicalRequest(for: request)
        let c2 = factory.canonicalRequest(for: c1)
        if c1.url != c2.url || c1.method != c2.method || !factory.requestIsCacheEquivalent(request, request) {
            add(.canonicalStable, "declaration", "canonical: \(c1.url.absoluteString), twice: \(c2.url.absoluteString); equivalent to itself: \(factory.requestIsCacheEquivalent(request, request))")
        }
        report.scenarios.append(("declaration", "ok"))

        // 1. A whole load.
        let full = Probe(factory: factory, request: request, options: options)
        full.start()
        let ended = full.waitForEnd(options.loadTimeout)
        full.settle()
        let log = full.log
        full.checkOrder(scenario: "load", add: add)
        if !full.startReturned { add(.startReturns, "load", "startLoading had not returned after \(Int(options.callTimeout)) s") }
        if !ended {
            add(.ends, "load", "no end after \(Int(options.loadTimeout)) s; reports so far: \(full.summary)")
            full.stop()
        } else if let error = log.failure, error.code == .pluginCrashed {
            add(.noCrash, "load", error.message)
        }
        report.scenarios.append(("load", ended ? "ended: \(full.summary)" : "never ended"))
        let sawResponse = log.response != nil
        let sawData = log.bytes > 0
        let challenged = log.challenges > 0

        // 2. Cancel in every phase the load goes through.
        var phases: [(String, (Probe.Log) -> Bool)] = [("cancel-after-start", { _ in true })]
        if sawResponse { phases.append(("cancel-after-response", { $0.response != nil })) }
        if sawData { phases.append(("cancel-after-data", { $0.bytes > 0 })) }
        if challenged { phases.append(("cancel-during-challenge", { $0.challenges > 0 })) }
        for (name, reached) in phases {
            let p = Probe(factory: factory, request: request, options: options)
            p.holdChallenges = name == "cancel-during-challenge"
            p.start()
            guard p.waitUntil(options.loadTimeout, { reached($0) }) else {
                report.scenarios.append((name, "skipped: the phase was not reached"))
                p.stop()
                continue
            }
            if p.log.ended && name != "cancel-after-start" {
                report.scenarios.append((name, "skipped: the load ended before it could be stopped"))
                continue
            }
            let returned = p.stop()
            if !returned { add(.stopReturns, name, "stopLoading had not returned after \(Int(options.callTimeout)) s") }
            p.settle(longer: true)
            let late = p.callsAfterStop
            if late.count > 1 { add(.quietAfterStop, name, "\(late.count) calls after stopLoading returned: \(late.prefix(5).joined(separator: ", "))") }
            p.checkOrder(scenario: name, add: add)
            if let e = p.log.failure, e.code == .pluginCrashed { add(.noCrash, name, e.message) }
            report.scenarios.append((name, returned ? "ok" : "stopLoading hung"))
        }

        // 3. Pause from inside the first report, resume from another thread.
        if ended && (sawResponse || sawData) {
            let p = Probe(factory: factory, request: request, options: options)
            p.pauseInsideFirstReport = true
            p.start()
            let reported = p.waitUntil(options.loadTimeout) { $0.pauseCalledIn != nil }
            let paused = reported && p.waitUntil(options.callTimeout + 1) { $0.pauseReturned != nil }
            if !reported {
                report.scenarios.append(("pause-resume", "skipped: no report came this time"))
                p.stop()
            } else if !paused || p.log.pauseReturned == false {
                add(.pauseReturns, "pause-resume", "pauseDelivery, called inside the client's \(p.log.pauseCalledIn ?? "first") call, had not returned after \(Int(options.callTimeout)) s (a deadlock with the delivery thread)")
                report.scenarios.append(("pause-resume", "pauseDelivery hung"))
            } else {
                Thread.sleep(forTimeInterval: options.settle)
                let resumed = p.onExecutor(options.callTimeout) { $0.resumeDelivery() }
                if !resumed { add(.pauseReturns, "pause-resume", "resumeDelivery had not returned after \(Int(options.callTimeout)) s") }
                if !p.waitForEnd(options.loadTimeout) {
                    add(.resumeContinues, "pause-resume", "paused in the first report, resumed later: no end after \(Int(options.loadTimeout)) s; reports: \(p.summary)")
                    p.stop()
                } else if p.log.bytes != log.bytes && log.failure == nil && p.log.failure == nil {
                    add(.resumeContinues, "pause-resume", "\(p.log.bytes) bytes with a pause, \(log.bytes) without")
                }
                p.settle()
                p.checkOrder(scenario: "pause-resume", add: add)
                report.scenarios.append(("pause-resume", "ok"))
            }
        }

        // 4. A challenge answered with "reject this protection space" must still end the
        // load. (A cancelled challenge never reaches the handler: Porter stops it, which
        // the cancel-during-challenge scenario covers.)
        if challenged {
            let p = Probe(factory: factory, request: request, options: options)
            p.answer = .rejectProtectionSpace
            p.start()
            if !p.waitForEnd(options.loadTimeout) {
                add(.challengeAnswered, "challenge-reject", "the challenge was answered with rejectProtectionSpace; no end after \(Int(options.loadTimeout)) s; reports: \(p.summary)")
                p.stop()
            }
            p.settle()
            p.checkOrder(scenario: "challenge-reject", add: add)
            report.scenarios.append(("challenge-reject", "ok"))
        }
        if let redirect = log.redirect { report.scenarios.append(("redirect", "redirected to \(redirect.absoluteString)")) }
        report.findings = findings
        return report
    }

    static func isScheme(_ s: String) -> Bool {
        guard let first = s.unicodeScalars.first, ("a"..."z").contains(first) else { return false }
        return s.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || "+-.".unicodeScalars.contains($0) }
    }
}

/// Drives one handler as the session would and records every call it makes.
final class Probe: ProtocolClient, @unchecked Sendable {
    struct Log {
        var calls: [String] = []
        var response: Response?
        var responses = 0
        var bytes = 0
        var ends: [String] = []
        var failure: PorterError?
        var redirect: URL?
        var challenges = 0
        var ended: Bool { !ends.isEmpty }
        var violations: [(ConformanceRule, String)] = []
        var pauseReturned: Bool?
        var pauseCalledIn: String?
        var stopReturnedAt: Int?   // index into calls when stopLoading returned
    }

    let context: SessionContext
    let executor: any TaskExecutor
    private let factory: any ProtocolHandlerFactory
    private let request: Request
    private let options: ConformanceOptions
    private let cond = NSCondition()
    private var state = Log()
    private var handler: (any ProtocolHandler)?
    private(set) var startReturned = true
    var answer: ChallengeDisposition
    var holdChallenges = false
    var pauseInsideFirstReport = false

    init(factory: any ProtocolHandlerFactory, request: Request, options: ConformanceOptions) {
        self.factory = factory
        self.request = request
        self.options = options
        self.answer = options.challengeAnswer
        var configuration = SessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = options.loadTimeout
        let base = SessionContext(configuration: configuration, sessionIdentifier: UInt64.random(in: 1...UInt64.max))
        executor = factory.executor(for: request, context: base) ?? QueueExecutor(label: "porter.conformance")
        context = SessionContext(configuration: configuration, sessionIdentifier: base.sessionIdentifier, executor: executor)
    }

    var log: Log { cond.lock(); defer { cond.unlock() }; return state }
    var summary: String {
        let l = log
        return l.calls.isEmpty ? "none" : l.calls.prefix(8).joined(separator: ", ") + (l.calls.count > 8 ? ", … (\(l.calls.count) calls)" : "")
    }
    var callsAfterStop: [String] {
        let l = log
        guard let at = l.stopReturnedAt else { return [] }
        return Array(l.calls[at...])
    }

    /// Runs `body` with the handler on the executor; false when it did not return in time.
    @discardableResult
    func onExecutor(_ timeout: TimeInterval, _ body: @escaping @Sendable (any ProtocolHandler) -> Void) -> Bool {
        guard let handler else { return true }
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) let h = handler
        executor.execute { body(h); done.signal() }
        return done.wait(timeout: .now() + timeout) == .success
    }

    func start() {
        let made = DispatchSemaphore(value: 0)
        executor.execute {
            self.handler = self.factory.makeHandler(request: self.request, cachedResponse: nil, client: self)
            made.signal()
        }
        guard made.wait(timeout: .now() + options.callTimeout) == .success else {
            startReturned = false
            return
        }
        startReturned = onExecutor(options.callTimeout) { $0.startLoading() }
    }

    @discardableResult
    func stop() -> Bool {
        let ok = onExecutor(options.callTimeout) { $0.stopLoading() }
        cond.lock(); state.stopReturnedAt = state.calls.count; cond.unlock()
        return ok
    }

    func waitUntil(_ timeout: TimeInterval, _ predicate: (Log) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        cond.lock(); defer { cond.unlock() }
        while !predicate(state) {
            if !cond.wait(until: deadline) { return predicate(state) }
        }
        return true
    }

    func waitForEnd(_ timeout: TimeInterval) -> Bool { waitUntil(timeout) { $0.ended } }

    /// Watches for late reports a little (a detection window).
    func settle(longer: Bool = false) { Thread.sleep(forTimeInterval: options.settle * (longer ? 2 : 1)) }

    func checkOrder(scenario: String, add: (ConformanceRule, String, String) -> Void) {
        let l = log
        for (rule, detail) in l.violations { add(rule, scenario, detail) }
        if l.ends.count > 1 { add(.endsOnce, scenario, "ended \(l.ends.count) times: \(l.ends.joined(separator: ", "))") }
        if let r = l.response, r.expectedContentLength >= 0, l.ends.first == "didFinishLoading",
           r.value(forHeader: "Content-Encoding") == nil, Int64(l.bytes) != r.expectedContentLength,
           l.stopReturnedAt == nil {
            add(.lengthMatches, scenario, "expected length \(r.expectedContentLength), \(l.bytes) bytes delivered")
        }
    }

    private func record(_ call: String, _ update: (inout Log) -> Void) {
        cond.lock()
        state.calls.append(call)
        update(&state)
        cond.broadcast()
        cond.unlock()
    }

    private func afterEnd(_ call: String, _ l: inout Log) {
        if let last = l.ends.last {
            let rule: ConformanceRule = last == "wasRedirected" ? .quietAfterRedirect : .quietAfterEnd
            l.violations.append((rule, "\(call) after \(last)"))
        }
    }

    private func maybePause(in call: String) {
        guard pauseInsideFirstReport else { return }
        cond.lock()
        let first = state.pauseCalledIn == nil
        if first { state.pauseCalledIn = call }
        cond.unlock()
        guard first, let handler else { return }
        // The call comes from the handler's thread: pause right here, as the session does
        // when its buffer fills, and watch whether it comes back.
        let returned = DispatchSemaphore(value: 0)
        let timeout = options.callTimeout
        DispatchQueue.global().async {
            let ok = returned.wait(timeout: .now() + timeout) == .success
            self.cond.lock()
            if self.state.pauseReturned == nil { self.state.pauseReturned = ok }
            self.cond.broadcast()
            self.cond.unlock()
        }
        handler.pauseDelivery()
        returned.signal()
    }

    // MARK: ProtocolClient

    func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy) {
        record("didReceive(response \(response.statusCode.map(String.init) ?? "-"))") { l in
            afterEnd("didReceive(response)", &l)
            l.responses += 1
            if l.responses > 1 { l.violations.append((.oneResponse, "a second response head (\(response))")) }
            if l.response == nil { l.response = response }
        }
        maybePause(in: "didReceive(response)")
    }

    func didLoad(_ data: Data) {
        record("didLoad(\(data.count))") { l in
            afterEnd("didLoad", &l)
            if l.response == nil && l.bytes == 0 { l.violations.append((.responseFirst, "didLoad(\(data.count) bytes) before any response")) }
            l.bytes += data.count
        }
        maybePause(in: "didLoad")
    }

    func wasRedirected(to request: Request, redirectResponse: Response) {
        record("wasRedirected(\(request.url.absoluteString))") { l in
            afterEnd("wasRedirected", &l)
            l.redirect = request.url
            l.ends.append("wasRedirected")
        }
    }

    func didFinishLoading() {
        record("didFinishLoading") { l in
            afterEnd("didFinishLoading", &l)
            l.ends.append("didFinishLoading")
        }
    }

    func didFail(with error: PorterError) {
        record("didFail(\(error.code))") { l in
            afterEnd("didFail", &l)
            if l.failure == nil { l.failure = error }
            l.ends.append("didFail(\(error.code))")
        }
    }

    func didReceive(_ challenge: AuthenticationChallenge) {
        record("didReceive(challenge \(challenge.protectionSpace.authenticationMethod))") { l in
            afterEnd("didReceive(challenge)", &l)
            if l.response != nil { l.violations.append((.challengeFirst, "a challenge after the response head")) }
            l.challenges += 1
        }
        if holdChallenges { return }
        let answer = self.answer
        DispatchQueue.global().async { challenge.reply(answer) }
    }

    func didCancel(_ challenge: AuthenticationChallenge) { record("didCancel(challenge)") { _ in } }

    func cachedResponseIsValid() {
        record("cachedResponseIsValid") { l in
            afterEnd("cachedResponseIsValid", &l)
            l.ends.append("cachedResponseIsValid")
        }
    }

    func didSendBodyData(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        record("didSendBodyData(\(totalBytesSent))") { l in afterEnd("didSendBodyData", &l) }
    }

    func didCollect(_ metrics: TransactionMetrics) { record("didCollect") { _ in } }

    func needNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void) {
        record("needNewBodyStream") { _ in }
        completion(nil)
    }
}
