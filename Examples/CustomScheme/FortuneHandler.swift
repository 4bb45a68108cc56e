import Foundation
import Porter

/// A made-up scheme, `fortune:`, served by an in-process handler:
///
/// - `fortune://any/N`       a fortune (N picks one), text/plain
/// - `fortune://private/N`   the same, after a password challenge (porter / demo)
/// - `fortune://moved/N`     redirects to `fortune://any/N`
/// - `fortune://missing/`    answers status 404
/// - `fortune://slow/`       a first line, then one more every second for a minute
///
/// It uses only the public ProtocolHandler / ProtocolClient contract: exactly what a
/// built-in handler or a plugin gets.
final class FortuneHandler: ProtocolHandler, @unchecked Sendable {
    static var schemes: Set<String> { ["fortune"] }

    static let fortunes = [
        "A URL is a promise; a handler keeps it.",
        "Every task completes exactly once.",
        "Back-pressure is politeness between threads.",
        "The best redirect is the one your delegate approved.",
    ]

    private let request: Request
    private let client: any ProtocolClient

    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }

    func startLoading() {
        let url = request.url
        let number = Int(url.lastPathComponent) ?? 0
        switch url.host ?? "" {
        case "moved":
            var redirect = Response(url: url, mimeType: nil, expectedContentLength: 0)
            redirect.statusCode = 301
            var next = request
            next.url = URL(string: "fortune://any/\(number)")!
            client.wasRedirected(to: next, redirectResponse: redirect)
        case "private":
            let space = ProtectionSpace(host: "private", port: 0, protocol: "fortune", realm: "fortune-teller",
                                        authenticationMethod: .httpBasic)
            let challenge = AuthenticationChallenge(protectionSpace: space, proposedCredential: nil,
                                                    previousFailureCount: 0) { [self] disposition in
                if case .useCredential(let c) = disposition, c.user == "porter", c.password == "demo" {
                    answer(number, status: 200)
                } else if case .cancelAuthenticationChallenge = disposition {
                    return  // the session ends the task
                } else {
                    client.didFail(with: PorterError(.userAuthenticationRequired, "the fortune teller wants porter / demo",
                                                     url: url))
                }
            }
            client.didReceive(challenge)
        case "slow":
            var r = Response(url: url, mimeType: "text/plain", expectedContentLength: -1)
            r.statusCode = 200
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            drip(0)
        case "missing":
            let text = "no such fortune\n"
            var r = Response(url: url, mimeType: "text/plain", expectedContentLength: Int64(text.utf8.count))
            r.statusCode = 404
            client.didReceive(r, cacheStoragePolicy: .notAllowed)
            client.didLoad(Data(text.utf8))
            client.didFinishLoading()
        default:
            answer(number, status: 200)
        }
    }

    private func answer(_ n: Int, status: Int) {
        let text = FortuneHandler.fortunes[abs(n) % FortuneHandler.fortunes.count] + "\n"
        var response = Response(url: request.url, mimeType: "text/plain", expectedContentLength: Int64(text.utf8.count),
                                textEncodingName: "utf-8")
        response.statusCode = status
        client.didReceive(response, cacheStoragePolicy: .allowed)
        client.didLoad(Data(text.utf8))
        client.didFinishLoading()
    }

    private let stopped = FlowControl()

    /// One line a second until stopped, from a queue of the handler's own.
    private func drip(_ n: Int) {
        guard !stopped.isStopped else { return }
        guard n < 60 else { client.didFinishLoading(); return }
        client.didLoad(Data("line \(n)\n".utf8))
        DispatchQueue.global().asyncAfter(deadline: .now() + 1) { [self] in drip(n + 1) }
    }

    func stopLoading() { stopped.stop() }
}
