import PorterTestSupport
import XCTest
@testable import PorterCore
@testable import PorterSession
import Porter

final class SessionTests: XCTestCase {
    /// The stores `.default` and `.ephemeral` configurations get come from the `Porter` module.
    override class func setUp() { Porter.installDefaultStores() }

    private func url(_ s: String) -> URL { URL(string: s)! }

    // MARK: - many chunks, three styles

    func testManyChunksReachCompletionHandlersWhole() throws {
        let session = Session(configuration: testConfiguration())
        let done = Completion<(Data?, Response?, PorterError?)>()
        session.dataTask(with: url("chunks://h/500/1000")) { done.fulfil(($0, $1, $2)) }.resume()
        let (data, response, error) = try XCTUnwrap(done.wait())
        XCTAssertNil(error)
        XCTAssertEqual(response?.expectedContentLength, 500_000)
        XCTAssertEqual(data, patternBytes(from: 0, count: 500_000), "every chunk, in order (Foundation keeps only the last)")
    }

    func testManyChunksReachTheDelegateInOrderNeverConcurrently() {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let task = session.dataTask(with: url("chunks://h/300/333"))
        XCTAssertTrue(d.run(task))
        XCTAssertEqual(d.data(task), patternBytes(from: 0, count: 300 * 333))
        XCTAssertFalse(d.overlapped)
        let ev = d.events
        XCTAssertEqual(ev.first, "response 200")
        XCTAssertEqual(ev.filter { $0 == "data" }.count, 300)
        XCTAssertEqual(Array(ev.suffix(2)), ["metrics", "complete ok"])
        XCTAssertEqual(d.completions(task), 1)
        XCTAssertEqual(task.state, .completed)
        XCTAssertEqual(task.countOfBytesReceived, 99_900)
        XCTAssertEqual(task.progress.fractionCompleted, 1.0)
    }

    /// A session made with `delegateOnLoadingThread:` calls its delegate where the task
    /// runs: a task completes, whole and in order, while the delegate queue is blocked.
    func testDelegateOnTheLoadingThreadNeedsNoDelegateQueue() {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegateOnLoadingThread: d)
        let unblock = DispatchSemaphore(value: 0)
        session.delegateQueue.async { unblock.wait() }
        defer { unblock.signal() }
        let task = session.dataTask(with: url("chunks://h/300/333"))
        XCTAssertTrue(d.run(task))
        XCTAssertEqual(d.data(task), patternBytes(from: 0, count: 300 * 333))
        XCTAssertFalse(d.overlapped)
        XCTAssertEqual(d.events.first, "response 200")
        XCTAssertEqual(Array(d.events.suffix(2)), ["metrics", "complete ok"])
        XCTAssertEqual(d.completions(task), 1)

        // The queued way waits for the queue.
        let queued = RecordingDelegate()
        let blocked = Session(configuration: testConfiguration(), delegate: queued)
        let hold = DispatchSemaphore(value: 0)
        blocked.delegateQueue.async { hold.wait() }
        let waiting = blocked.dataTask(with: url("chunks://h/3/3"))
        let sawNothing = Locked(false)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) {
            sawNothing.withLock { $0 = queued.completions(waiting) == 0 && queued.events.isEmpty }
            hold.signal()
        }
        XCTAssertTrue(queued.run(waiting))
        XCTAssertTrue(sawNothing.current, "nothing reaches a blocked delegate queue")
    }

    func testManyChunksAsync() async throws {
        let session = Session(configuration: testConfiguration())
        let (data, response) = try await session.data(from: url("chunks://h/1000/100"))
        XCTAssertEqual(data, patternBytes(from: 0, count: 100_000))
        XCTAssertEqual(response.statusCode, 200)
    }

    // MARK: - redirects

    func testRedirectChainAllStyles() async throws {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let task = session.dataTask(with: url("redir://h/5"))
        XCTAssertTrue(d.run(task))
        XCTAssertEqual(String(decoding: d.data(task), as: UTF8.self), "arrived at h")
        XCTAssertEqual(d.events.filter { $0.hasPrefix("redirect") }.count, 5)
        XCTAssertEqual(task.currentRequest?.url.absoluteString, "redir://h/0")
        XCTAssertEqual(d.metrics(task)?.redirectCount, 5)

        let plain = Session(configuration: testConfiguration())
        let done = Completion<(Data?, PorterError?)>()
        plain.dataTask(with: url("redir://h/3")) { data, _, error in done.fulfil((data, error)) }.resume()
        let (data, error) = try XCTUnwrap(done.wait())
        XCTAssertNil(error)
        XCTAssertEqual(data.map { String(decoding: $0, as: UTF8.self) }, "arrived at h")

        let (asyncData, response) = try await plain.data(from: url("redir://h/7"))
        XCTAssertEqual(String(decoding: asyncData, as: UTF8.self), "arrived at h")
        XCTAssertEqual(response.url.absoluteString, "redir://h/0")
    }

    func testRedirectLoopFailsWithTooManyRedirects() async {
        let session = Session(configuration: testConfiguration { $0.maximumRedirects = 4 })
        do {
            _ = try await session.data(from: url("redir://h/loop"))
            XCTFail("a loop must fail")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .tooManyRedirects)
            XCTAssertEqual(e.url?.absoluteString, "redir://h/loop")
        } catch { XCTFail("\(error)") }
        let d = RecordingDelegate()
        let s2 = Session(configuration: testConfiguration(), delegate: d)
        let t = s2.dataTask(with: url("redir://h/loop"))
        XCTAssertTrue(d.run(t))
        XCTAssertEqual(d.error(t)?.code, .tooManyRedirects)
        XCTAssertEqual(d.events.filter { $0.hasPrefix("redirect") }.count, 20, "the default limit is 20")
    }

    func testRedirectToARefusedSchemeFails() async throws {
        let target = "data:,secret".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let session = Session(configuration: testConfiguration())
        do {
            _ = try await session.data(from: url("redir://h/to?\(target)"))
            XCTFail("redirect to data: must be refused by default")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .redirectNotAllowed)
        }
        // Opting in: redirect to a scheme the registry has (echo) once allowed.
        let echoTarget = "echo://h/".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let allowed = Session(configuration: testConfiguration { $0.allowedRedirectSchemes.insert("echo") })
        let (data, response) = try await allowed.data(from: url("redir://h/to?\(echoTarget)"))
        XCTAssertEqual(data, Data())
        XCTAssertEqual(response.url.absoluteString, "echo://h/")
    }

    func testDelegateRefusesOrChangesRedirect() {
        let d = RecordingDelegate()
        d.redirectAnswer = { _ in nil }
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("redir://h/2"))
        XCTAssertTrue(d.run(t))
        XCTAssertNil(d.error(t))
        XCTAssertEqual(t.response?.statusCode, 302, "the redirect response becomes the task's response")
        XCTAssertEqual(d.data(t), Data())

        let d2 = RecordingDelegate()
        d2.redirectAnswer = { r in var c = r; c.url = URL(string: "redir://elsewhere/0")!; return c }
        let s2 = Session(configuration: testConfiguration(), delegate: d2)
        let t2 = s2.dataTask(with: url("redir://h/9"))
        XCTAssertTrue(d2.run(t2))
        XCTAssertEqual(String(decoding: d2.data(t2), as: UTF8.self), "arrived at elsewhere")
    }

    func testCredentialsNeverCrossToAnotherHost() async throws {
        let session = Session(configuration: testConfiguration())
        var r = Request(url: url("redir://h/cross"))
        r.setValue("Basic c2VjcmV0", forHeader: "Authorization")
        r.setValue("sid=1", forHeader: "Cookie")
        r.setValue("yes", forHeader: "X-Keep")
        let (cross, _) = try await session.data(for: r)
        XCTAssertEqual(String(decoding: cross, as: UTF8.self), "auth=- cookie=- keep=yes")
        r.url = url("redir://h/same")
        let (same, _) = try await session.data(for: r)
        XCTAssertEqual(String(decoding: same, as: UTF8.self), "auth=Basic c2VjcmV0 cookie=sid=1 keep=yes")
    }

    // MARK: - challenges

    func testChallengeAcceptWrongThenRightRejectCancel() async throws {
        let d = RecordingDelegate()
        d.challengeAnswer = { c in
            c.previousFailureCount == 0 ? .useCredential(Credential(user: "alice", password: "wrong"))
                                        : .useCredential(Credential(user: "alice", password: "secret"))
        }
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("auth://h/login"))
        XCTAssertTrue(d.run(t))
        XCTAssertEqual(String(decoding: d.data(t), as: UTF8.self), "welcome alice")
        XCTAssertEqual(d.challenges.map(\.previousFailureCount), [0, 1])
        XCTAssertEqual(d.challenges.first?.protectionSpace.realm, "porter")

        let reject = RecordingDelegate()
        reject.challengeAnswer = { _ in .rejectProtectionSpace }
        let s2 = Session(configuration: testConfiguration(), delegate: reject)
        let t2 = s2.dataTask(with: url("auth://h/login"))
        XCTAssertTrue(reject.run(t2))
        XCTAssertEqual(String(decoding: reject.data(t2), as: UTF8.self), "anonymous")

        let cancel = RecordingDelegate()
        cancel.challengeAnswer = { _ in .cancelAuthenticationChallenge }
        let s3 = Session(configuration: testConfiguration(), delegate: cancel)
        let t3 = s3.dataTask(with: url("auth://h/login"))
        XCTAssertTrue(cancel.run(t3))
        XCTAssertEqual(cancel.error(t3)?.code, .userCancelledAuthentication)
        XCTAssertEqual(cancel.completions(t3), 1)

        let wrong = RecordingDelegate()
        wrong.challengeAnswer = { _ in .useCredential(Credential(user: "alice", password: "nope")) }
        let s4 = Session(configuration: testConfiguration(), delegate: wrong)
        let t4 = s4.dataTask(with: url("auth://h/login"))
        XCTAssertTrue(wrong.run(t4))
        XCTAssertEqual(wrong.error(t4)?.code, .userAuthenticationRequired)
        XCTAssertEqual(wrong.challenges.map(\.previousFailureCount), [0, 1, 2])
    }

    func testDefaultHandlingUsesTheProposedCredentialOnce() async throws {
        var config = testConfiguration()
        config.credentialStore = nil
        let session = Session(configuration: config)  // no delegate: default handling
        let (data, _) = try await session.data(from: url("auth://h/proposed"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "welcome alice")
        let (anon, response) = try await session.data(from: url("auth://h/login"))
        XCTAssertEqual(String(decoding: anon, as: UTF8.self), "unauthorized")
        XCTAssertEqual(response.statusCode, 401)
        // With the session's credential store, the credential used (persistence
        // .forSession) answers the same space's next challenge, as URLSession does.
        let remembering = Session(configuration: testConfiguration())
        _ = try await remembering.data(from: url("auth://h/proposed"))
        let (again, _) = try await remembering.data(from: url("auth://h/login"))
        XCTAssertEqual(String(decoding: again, as: UTF8.self), "welcome alice")
    }

    func testChallengeThroughCompletionHandlerStyle() throws {
        let d = RecordingDelegate()
        d.challengeAnswer = { _ in .useCredential(Credential(user: "alice", password: "secret")) }
        let session = Session(configuration: testConfiguration(), delegate: d)
        let done = Completion<Data?>()
        session.dataTask(with: url("auth://h/login")) { data, _, _ in done.fulfil(data) }.resume()
        XCTAssertEqual(try XCTUnwrap(done.wait()).map { String(decoding: $0, as: UTF8.self) }, "welcome alice")
        XCTAssertFalse(d.events.contains("data"), "with a completion handler the data delegate is not called")
    }

    func testWithdrawnChallengeIsNotAnswered() {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("auth://h/withdraw"))
        XCTAssertTrue(d.run(t))
        XCTAssertNil(d.error(t))
        XCTAssertEqual(String(decoding: d.data(t), as: UTF8.self), "withdrawn")
    }

    func testConnectionLevelChallengesGoToTheSessionDelegate() {
        final class TrustDelegate: TaskDelegate, @unchecked Sendable {
            let asked = Counter()
            func session(_ session: Session, didReceive challenge: AuthenticationChallenge,
                         completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
                asked.add(1)
                completion(.performDefaultHandling)
            }
        }
        final class TrustHandler: ProtocolHandler, @unchecked Sendable {
            static var schemes: Set<String> { ["trust"] }
            let request: Request, client: any ProtocolClient
            init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
                self.request = request; self.client = client
            }
            func startLoading() {
                let space = ProtectionSpace(host: "h", port: 1, protocol: "trust", realm: nil, authenticationMethod: .serverTrust,
                                            serverTrust: ServerTrust(certificateChain: [Data([1, 2, 3])], evaluationFailure: "self-signed"))
                client.didReceive(AuthenticationChallenge(protectionSpace: space, proposedCredential: nil, previousFailureCount: 0) { [client, request] d in
                    XCTAssertEqual(d, .performDefaultHandling)
                    client.didFail(with: PorterError(.serverCertificateUntrusted, "untrusted", url: request.url))
                })
            }
            func stopLoading() {}
        }
        final class SessionOnly: SessionDelegate, @unchecked Sendable {
            let asked = Counter()
            func session(_ session: Session, didReceive challenge: AuthenticationChallenge,
                         completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
                asked.add(1)
                completion(.performDefaultHandling)
            }
        }
        var config = testConfiguration()
        config.prependHandler(TrustHandler.self)
        let delegate = TrustDelegate()
        let session = Session(configuration: config, delegate: delegate)
        let done = Completion<PorterError?>()
        session.dataTask(with: url("trust://h/")) { _, _, e in done.fulfil(e) }.resume()
        XCTAssertEqual(done.wait()??.code, .serverCertificateUntrusted)
        XCTAssertEqual(delegate.asked.current, 1)

        // A delegate that is only a SessionDelegate is asked too.
        let plain = SessionOnly()
        let again = Completion<PorterError?>()
        Session(configuration: config, delegate: plain).dataTask(with: url("trust://h/")) { _, _, e in again.fulfil(e) }.resume()
        XCTAssertEqual(again.wait()??.code, .serverCertificateUntrusted)
        XCTAssertEqual(plain.asked.current, 1)
    }

    // MARK: - failures and misbehaving handlers

    func testFailMidBodyAllStyles() async throws {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("bad://h/fail-mid-body"))
        XCTAssertTrue(d.run(t))
        XCTAssertEqual(d.error(t)?.code, .networkConnectionLost)
        XCTAssertEqual(d.error(t)?.cause?.code, 104)
        XCTAssertEqual(d.error(t)?.url?.absoluteString, "bad://h/fail-mid-body", "errors carry the URL")
        XCTAssertEqual(d.data(t), Data("0123456789".utf8), "what arrived before the failure was delivered")

        let done = Completion<(Data?, PorterError?)>()
        session.dataTask(with: url("bad://h/fail-mid-body")) { data, _, e in done.fulfil((data, e)) }.resume()
        let (data, error) = try XCTUnwrap(done.wait())
        XCTAssertNil(data)
        XCTAssertEqual(error?.code, .networkConnectionLost)

        do {
            _ = try await session.data(from: url("bad://h/fail-mid-body"))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .networkConnectionLost) }
    }

    func testMisbehavingHandlersGetExactlyOneCompletion() {
        let expectations: [String: PorterError.Code?] = [
            "finish-twice": nil, "data-after-finish": nil, "fail-after-finish": nil,
            "data-before-response": .protocolViolation, "finish-without-response": .protocolViolation,
            "two-responses": nil,
        ]
        for (mode, code) in expectations {
            let d = RecordingDelegate()
            let session = Session(configuration: testConfiguration(), delegate: d)
            let t = session.dataTask(with: url("bad://h/\(mode)"))
            XCTAssertTrue(d.run(t), mode)
            Thread.sleep(forTimeInterval: 0.05)  // let any late calls arrive
            XCTAssertEqual(d.completions(t), 1, mode)
            XCTAssertEqual(d.error(t)?.code, code, mode)
            if mode == "data-after-finish" { XCTAssertEqual(d.data(t), Data("01234".utf8)) }
            if mode == "finish-twice" || mode == "two-responses" { XCTAssertEqual(d.data(t), Data("0123456789".utf8)) }
            XCTAssertFalse(d.overlapped)
        }
    }

    func testCancelASilentHandlerCompletesOnce() {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("bad://h/silent"))
        d.finished.enter()
        let stopsBefore = MisbehavingHandler.stops.current
        let startsBefore = MisbehavingHandler.silentStarts.current
        t.resume()
        XCTAssertTrue(eventually { MisbehavingHandler.silentStarts.current > startsBefore }, "the handler started")
        t.cancel()
        t.cancel()
        XCTAssertEqual(d.finished.wait(timeout: .now() + 120), .success)
        Thread.sleep(forTimeInterval: 0.05)  // a window for a late second completion: it can only miss one
        XCTAssertEqual(d.completions(t), 1)
        XCTAssertEqual(d.error(t)?.code, .cancelled)
        XCTAssertEqual(t.state, .completed)
        XCTAssertGreaterThan(MisbehavingHandler.stops.current, stopsBefore, "the handler was told to stop")
    }

    func testCancelBeforeResumeAndAsyncCancellation() async {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("chunks://h/1/1"))
        d.finished.enter()
        t.cancel()
        XCTAssertEqual(d.finished.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(d.error(t)?.code, .cancelled)

        let plain = Session(configuration: testConfiguration())
        let job = Task { try await plain.data(from: URL(string: "bad://h/silent")!) }
        try? await Task.sleep(nanoseconds: 50_000_000)
        job.cancel()
        do {
            _ = try await job.value
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .cancelled) } catch { XCTFail("\(error)") }
    }

    func testUnknownSchemeNamesTheRegisteredOnes() async {
        let session = Session(configuration: testConfiguration())
        do {
            _ = try await session.data(from: url("nope://x"))
            XCTFail()
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .unsupportedURL)
            XCTAssertTrue(e.message.contains("'nope'"), e.message)
            XCTAssertTrue(e.message.contains("chunks, echo"), e.message)
        } catch { XCTFail() }
    }

    /// The session's timeout timer outlives a task only until its next tick finds none
    /// running (tasks that start and end between ticks share it), and a task started
    /// after it was left running with a coarser tick still times out on time.
    func testTheTimeoutTimerStopsOnceNoTaskRunsAndStillServesLaterTasks() async throws {
        let s = Session(configuration: testConfiguration())
        for _ in 0..<5 { _ = try await s.data(from: url("echo://h/")) }
        XCTAssertTrue(eventually(60) { !s.timeouts.isTicking }, "the timer runs on with no task")
        for _ in 0..<5 { _ = try await s.data(from: url("echo://h/")) }   // leaves a timer with a 0.25 s tick
        var silent = Request(url: url("bad://h/silent"))
        silent.timeoutInterval = 0.2
        do {
            _ = try await s.data(for: silent)
            XCTFail("a silent handler was not timed out")
        } catch let e as PorterError { XCTAssertEqual(e.code, .timedOut) } catch { XCTFail("\(error)") }
        XCTAssertTrue(eventually(60) { !s.timeouts.isTicking })
    }

    func testTimeouts() async {
        let idle = Session(configuration: testConfiguration { $0.timeoutIntervalForRequest = 0.2 })
        let start = Date()
        do {
            _ = try await idle.data(from: url("bad://h/silent"))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .timedOut) } catch { XCTFail() }
        XCTAssertLessThan(Date().timeIntervalSince(start), 20, "the handler is silent forever")

        let total = Session(configuration: testConfiguration { $0.timeoutIntervalForResource = 0.2 })
        do {
            _ = try await total.data(from: url("bad://h/silent"))
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .timedOut) } catch { XCTFail() }
    }

    /// A background session runs downloads and uploads from a file in porterd; a data
    /// task is refused with a clear error, not run in-process under false pretences.
    func testBackgroundSessionsRefuseDataTasks() async throws {
        let home = try DaemonHome("porter-bg")
        home.install()
        defer { home.remove() }
        var config = SessionConfiguration.background(identifier: "com.example.bg")
        config.registry = testRegistry
        let session = Session(configuration: config)
        do {
            _ = try await session.data(from: url("chunks://h/1/1"))
            XCTFail("background sessions must not pretend")
        } catch let e as PorterError {
            XCTAssertEqual(e.code, .unsupportedConfiguration)
            XCTAssertTrue(e.message.contains("download tasks and upload tasks from a file"), e.message)
        } catch { XCTFail() }
        session.finishTasksAndInvalidate()
    }

    // MARK: - response disposition, cache

    func testResponseDispositionCancelAndBecomeDownload() {
        let d = RecordingDelegate()
        d.responseAnswer = { _ in .cancel }
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("chunks://h/10/10"))
        XCTAssertTrue(d.run(t))
        XCTAssertEqual(d.error(t)?.code, .cancelled)
        XCTAssertEqual(d.data(t), Data(), "no data after a cancel disposition")

        let dl = RecordingDelegate()
        dl.responseAnswer = { _ in .becomeDownload }
        let s2 = Session(configuration: testConfiguration(), delegate: dl)
        let t2 = s2.dataTask(with: url("chunks://h/50/1000"))
        XCTAssertTrue(dl.run(t2))
        XCTAssertTrue(dl.events.contains("becameDownload"))
        XCTAssertEqual(dl.data(t2), Data(), "after becoming a download no data goes to the data delegate")
        XCTAssertEqual(dl.file(t2), patternBytes(from: 0, count: 50_000))
        XCTAssertEqual(t2.state, .completed)
        let order = dl.events.filter { ["becameDownload", "finishedDownloading", "complete ok"].contains($0) }
        XCTAssertEqual(order, ["becameDownload", "finishedDownloading", "complete ok"])
    }

    func testCacheHandsBackAValidCachedResponseAndAsksWillCache() async throws {
        let cache = MemoryResponseCache()
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration { $0.responseCache = cache }, delegate: d)
        let first = session.dataTask(with: url("cache://h/a"))
        XCTAssertTrue(d.run(first))
        let firstBody = String(decoding: d.data(first), as: UTF8.self)
        XCTAssertTrue(d.events.contains("willCache"))
        XCTAssertEqual(cache.count, 1)
        let loads = CacheAwareHandler.loads.current
        let second = session.dataTask(with: url("cache://h/a"))
        XCTAssertTrue(d.run(second))
        XCTAssertEqual(String(decoding: d.data(second), as: UTF8.self), firstBody, "served from the cache")
        XCTAssertEqual(CacheAwareHandler.loads.current, loads, "the handler did not load again")
        XCTAssertEqual(d.metrics(second)?.transactionMetrics.first?.fetchType, "localCache")

        // The delegate refuses storage.
        let refusing = RecordingDelegate()
        refusing.cacheAnswer = { _ in nil }
        let other = MemoryResponseCache()
        let s2 = Session(configuration: testConfiguration { $0.responseCache = other }, delegate: refusing)
        XCTAssertTrue(refusing.run(s2.dataTask(with: url("cache://h/b"))))
        XCTAssertEqual(other.count, 0)

        // Nothing cached and loading forbidden.
        var r = Request(url: url("cache://h/never"))
        r.cachePolicy = .returnCacheDataDontLoad
        do {
            _ = try await Session(configuration: testConfiguration { $0.responseCache = MemoryResponseCache() }).data(for: r)
            XCTFail()
        } catch let e as PorterError { XCTAssertEqual(e.code, .resourceUnavailable) }
    }

    // MARK: - uploads

    func testUploadsFromDataFileAndStream() async throws {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let body = Data("hello upload".utf8)
        let t = session.uploadTask(with: Request(url: url("echo://h/")), from: body)
        XCTAssertEqual(t.originalRequest.method, "PUT")
        XCTAssertTrue(d.run(t))
        XCTAssertEqual(d.data(t), body)
        XCTAssertTrue(d.events.contains("sent 12/12"), "\(d.events)")
        XCTAssertEqual(t.countOfBytesSent, 12)

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("porter-up-\(UUID()).txt")
        try Data("from a file".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let (echoed, _) = try await session.upload(for: Request(url: url("echo://h/")), fromFile: file)
        XCTAssertEqual(String(decoding: echoed, as: UTF8.self), "from a file")

        d.bodyStream = { DataBodyStream(Data("streamed body".utf8)) }
        let s = session.uploadTask(withStreamedRequest: Request(url: url("echo://h/"), method: "POST"))
        XCTAssertTrue(d.run(s))
        XCTAssertEqual(String(decoding: d.data(s), as: UTF8.self), "streamed body")
        XCTAssertTrue(d.events.contains("needStream"))

        let none = RecordingDelegate()
        let s3 = Session(configuration: testConfiguration(), delegate: none)
        let t3 = s3.uploadTask(withStreamedRequest: Request(url: url("echo://h/"), method: "POST"))
        XCTAssertTrue(none.run(t3))
        XCTAssertEqual(none.error(t3)?.code, .requestBodyStreamExhausted)
    }

    func testRedirectOfAStreamBodyAsksForANewStream() {
        let d = RecordingDelegate()
        d.bodyStream = { DataBodyStream(Data("second copy".utf8)) }
        let session = Session(configuration: testConfiguration { $0.allowedRedirectSchemes.insert("echo") }, delegate: d)
        let target = "echo://h/".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        var r = Request(url: url("redir://h/to?\(target)"), method: "POST")
        r.body = .stream(DataBodyStream(Data("first copy".utf8)))
        let t = session.uploadTask(withStreamedRequest: r)
        XCTAssertTrue(d.run(t))
        XCTAssertNil(d.error(t))
        XCTAssertEqual(d.events.filter { $0 == "needStream" }.count, 1, "asked once, for the redirect")
        XCTAssertEqual(String(decoding: d.data(t), as: UTF8.self), "second copy", "the consumed stream is not reused")
    }

    func testAsyncAPIWithADelegateAnsweringChallenges() async throws {
        let d = RecordingDelegate()
        d.challengeAnswer = { c in
            .useCredential(Credential(user: "alice", password: c.previousFailureCount == 0 ? "typo" : "secret"))
        }
        let session = Session(configuration: testConfiguration(), delegate: d)
        let (data, _) = try await session.data(from: url("auth://h/login"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "welcome alice")
        XCTAssertEqual(d.challenges.map(\.previousFailureCount), [0, 1])
        let (bytes, _) = try await session.bytes(from: url("auth://h/login"))
        let collected = try await bytes.collect()
        XCTAssertEqual(String(decoding: collected, as: UTF8.self), "welcome alice")
    }

    func testRequestPropertiesTravelWithTheRequest() {
        var r = Request(url: url("chunks://h/1/1"))
        XCTAssertNil(r.property(forKey: "seen"))
        r.setProperty(true, forKey: "seen")
        r.setProperty(3, forKey: "count")
        XCTAssertEqual(r.property(forKey: "seen") as? Bool, true)
        XCTAssertEqual(r.property(forKey: "count") as? Int, 3)
        let copy = r
        r.removeProperty(forKey: "seen")
        XCTAssertNil(r.property(forKey: "seen"))
        XCTAssertEqual(copy.property(forKey: "seen") as? Bool, true, "a value type: the copy keeps its own")
        XCTAssertFalse(r.setValue("x", forHeader: "bad header"), "an invalid header name is refused, not trapped on")
    }

    // MARK: - suspend, resume, identity

    func testSuspendHoldsDeliveryUntilResume() {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("chunks://h/200/1000"))
        d.finished.enter()
        t.resume()
        t.suspend()
        XCTAssertEqual(t.state, .suspended)
        Thread.sleep(forTimeInterval: 0.2)
        let whileSuspended = d.events.filter { $0 == "data" }.count
        Thread.sleep(forTimeInterval: 0.2)
        XCTAssertEqual(d.events.filter { $0 == "data" }.count, whileSuspended, "nothing delivered while suspended")
        XCTAssertFalse(d.events.contains { $0.hasPrefix("complete") })
        t.resume()
        XCTAssertEqual(d.finished.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(d.data(t), patternBytes(from: 0, count: 200_000))
    }

    func testIdentifiersDescriptionsAndCounters() {
        let session = Session(configuration: testConfiguration())
        let a = session.dataTask(with: url("chunks://h/1/1"))
        let b = session.downloadTask(with: url("chunks://h/1/1"))
        XCTAssertEqual(b.taskIdentifier, a.taskIdentifier + 1)
        a.taskDescription = "first"
        XCTAssertEqual(a.taskDescription, "first")
        XCTAssertEqual(a.state, .suspended)
        XCTAssertEqual(session.allTasks.count, 2)
        a.priority = 7
        XCTAssertEqual(a.priority, 1)
        XCTAssertEqual(a.countOfBytesExpectedToReceive, -1)
        a.cancel(); b.cancel()
    }

    // MARK: - invalidation

    func testFinishTasksAndInvalidate() {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("chunks://h/100/1000"))
        d.finished.enter()
        t.resume()
        session.finishTasksAndInvalidate()
        XCTAssertEqual(d.finished.wait(timeout: .now() + 120), .success)
        XCTAssertNil(d.error(t), "running tasks finish")
        XCTAssertEqual(d.invalidated.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(d.events.last, "invalid")
        XCTAssertNil(session.delegate, "the delegate is released")

        let late = Completion<PorterError?>()
        session.dataTask(with: url("chunks://h/1/1")) { _, _, e in late.fulfil(e) }.resume()
        XCTAssertEqual(late.wait()??.code, .sessionInvalidated)
    }

    func testInvalidateAndCancel() {
        let d = RecordingDelegate()
        let session = Session(configuration: testConfiguration(), delegate: d)
        let t = session.dataTask(with: url("bad://h/silent"))
        d.finished.enter()
        t.resume()
        session.invalidateAndCancel()
        XCTAssertEqual(d.finished.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(d.error(t)?.code, .cancelled)
        XCTAssertEqual(d.invalidated.wait(timeout: .now() + 120), .success)
    }

    func testSessionHandlersComeBeforeTheRegistry() async throws {
        var config = testConfiguration()
        config.prependHandler(ShadowDataHandler.self)
        let (data, _) = try await Session(configuration: config).data(from: url("chunks://h/1/1"))
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "shadow")
    }

    /// Found by reading HTTPTypes while fuzzing resume data: HTTPFields traps at 65,535
    /// fields, and resume data is input an application hands back. The resumed request
    /// keeps the first 10,000 valid fields.
    func testResumeDataWithTooManyHeadersDoesNotTrap() {
        let pairs = (0..<70_000).map { ["X-H\($0 % 7)", "v\($0)"] } + [["Bad Name", "x"], ["only-one"]]
        let resume = ResumeData(url: URL(string: "https://example.com/f")!, method: "GET", headers: pairs, validator: nil,
                                bytesReceived: 1, expectedTotalBytes: 2, partialFilePath: "/nonexistent")
        let request = Session.request(resuming: resume)
        XCTAssertEqual(request.headerFields.count, 10_000)
        XCTAssertEqual(request.headerFields.first?.value, "v0")
        XCTAssertEqual(Session.request(resuming: ResumeData(url: resume.url, method: "GET", headers: [["Accept", "*/*"], ["Bad Name", "x"]],
                                                            validator: nil, bytesReceived: 1, expectedTotalBytes: 2,
                                                            partialFilePath: "/x")).headerFields.count, 1)
    }
}

/// The contract names no store: a configuration's stores are whatever was installed.
final class DefaultStoreTests: XCTestCase {
    func testPorterInstallsItsStoresAndAnInstalledProviderIsUsed() {
        Porter.installDefaultStores()
        let ephemeral = SessionConfiguration.ephemeral
        XCTAssertTrue(ephemeral.cookieStore is MemoryCookieStore)
        XCTAssertTrue(ephemeral.credentialStore is CredentialStore)
        XCTAssertTrue(ephemeral.responseCache is HTTPCache)
        XCTAssertFalse(ephemeral.cookieStore === SessionConfiguration.ephemeral.cookieStore, "each ephemeral configuration has its own")
        XCTAssertTrue(SessionConfiguration.default.cookieStore === PersistentCookieStore.shared)

        let cache = MemoryResponseCache()
        SessionConfiguration.installDefaultStores { _ in .init(responseCache: cache) }
        defer { Porter.installDefaultStores() }
        let mine = SessionConfiguration.default
        XCTAssertNil(mine.cookieStore)
        XCTAssertNil(mine.credentialStore)
        XCTAssertTrue(mine.responseCache === cache)
    }
}

/// Answers at once, from inside startLoading: instant://N/ sends N one-byte chunks
/// ("a", "b", ...; one when N is not a number).
final class InstantHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["instant"] }
    let request: Request
    let client: any ProtocolClient
    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }
    func startLoading() {
        let chunks = max(1, min(26, Int(request.url.host ?? "") ?? 1))
        client.didReceive(Response(url: request.url, mimeType: "text/plain", expectedContentLength: Int64(chunks), statusCode: 200),
                          cacheStoragePolicy: .notAllowed)
        for i in 0..<chunks { client.didLoad(Data([UInt8(0x61 + i)])) }
        client.didFinishLoading()
    }
    func stopLoading() {}
}

/// A delegate that starts the next task from each completion, as the CLI does.
final class ChainDelegate: TaskDelegate, @unchecked Sendable {
    let remaining = Locked(0)
    let done = DispatchSemaphore(value: 0)
    weak var session: Session?
    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        let left = remaining.withLock { n -> Int in n -= 1; return n }
        if left == 0 { done.signal(); return }
        session?.dataTask(with: URL(string: "instant://h/\(left)")!).resume()
    }
}

final class TaskChainTests: XCTestCase {
    /// Tasks answered at once, each started from the previous one's completion on the
    /// loading thread, run one after the other, not one inside the other (50,000 deep
    /// overflowed the stack: the CLI crashed on a list of cached URLs).
    func testResumeFromACompletionDoesNotNest() {
        let chain = ChainDelegate()
        let session = Session(configuration: testConfiguration { $0.prependHandler(InstantHandler.self) },
                              delegateOnLoadingThread: chain)
        chain.session = session
        chain.remaining.withLock { $0 = 50_000 }
        session.dataTask(with: URL(string: "instant://h/start")!).resume()
        XCTAssertEqual(chain.done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(chain.remaining.current, 0)
    }
}

final class CancelOnFirstChunk: DataDelegate, @unchecked Sendable {
    let received = Locked(Data())
    let outcome = Locked<PorterError??>(nil)
    let done = DispatchSemaphore(value: 0)
    func dataTask(_ task: DataTask, didReceive data: Data) {
        received.withLock { $0.append(data) }
        task.cancel()
    }
    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        outcome.withLock { $0 = .some(error) }
        done.signal()
    }
}

final class LateFailureTests: XCTestCase {
    /// A cancel made in the first data callback of a load that had already ended: the
    /// task may succeed only with all of its data, else it is cancelled (it reported
    /// success with the second chunk held back).
    func testCancelAfterTheEndNeverReportsAShortSuccess() throws {
        for _ in 0..<20 {
            let d = CancelOnFirstChunk()
            let session = Session(configuration: testConfiguration { $0.prependHandler(InstantHandler.self) }, delegate: d)
            session.dataTask(with: URL(string: "instant://2/")!).resume()
            XCTAssertEqual(d.done.wait(timeout: .now() + 120), .success)
            let error = try XCTUnwrap(d.outcome.current)
            if let error {
                XCTAssertEqual(error.code, .cancelled)
            } else {
                XCTAssertEqual(d.received.current, Data("ab".utf8), "a success must carry the whole body")
            }
        }
    }

    /// A download whose temporary file cannot be made fails, even when the handler's
    /// data and finish are already waiting behind the response (it completed as a
    /// success with no file).
    func testADownloadThatCannotWriteFailsAheadOfAWaitingFinish() {
        let config = testConfiguration {
            $0.prependHandler(InstantHandler.self)
            $0.downloadDirectory = "/nonexistent-porter-folder"
        }
        let result = Completion<PorterError?>()
        Session(configuration: config).downloadTask(with: Request(url: URL(string: "instant://2/")!)) { location, _, error in
            XCTAssertNil(location)
            result.fulfil(error)
        }.resume()
        XCTAssertEqual(result.wait()??.code, .cannotCreateFile)
    }
}
