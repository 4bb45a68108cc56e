import Foundation
import PorterCore

/// rot13:TEXT answers TEXT with its letters rotated: a handler written against the
/// contract only, driven here by a client of its own (what a handler author's unit
/// tests do).
final class Rot13Handler: ProtocolHandler, @unchecked Sendable {
    static let schemes: Set<String> = ["rot13"]
    let request: Request
    let client: any ProtocolClient

    init(request: Request, cachedResponse: CachedResponse?, client: any ProtocolClient) {
        self.request = request
        self.client = client
    }

    func startLoading() {
        let text = request.url.absoluteString.dropFirst("rot13:".count)
        let rotated = String(text.unicodeScalars.map { scalar -> Character in
            switch scalar.value {
            case 65...90: return Character(Unicode.Scalar((scalar.value - 65 + 13) % 26 + 65)!)
            case 97...122: return Character(Unicode.Scalar((scalar.value - 97 + 13) % 26 + 97)!)
            default: return Character(scalar)
            }
        })
        let body = Data(rotated.utf8)
        client.didReceive(Response(url: request.url, mimeType: "text/plain", expectedContentLength: Int64(body.count)),
                          cacheStoragePolicy: .notAllowed)
        client.didLoad(body)
        client.didFinishLoading()
    }

    func stopLoading() {}
}

final class RecordingClient: ProtocolClient, @unchecked Sendable {
    let context = SessionContext(configuration: .ephemeral, sessionIdentifier: 1)
    var events: [String] = []
    var body = Data()
    func didReceive(_ response: Response, cacheStoragePolicy: CacheStoragePolicy) { events.append("response") }
    func didLoad(_ data: Data) { body.append(data); events.append("data") }
    func wasRedirected(to request: Request, redirectResponse: Response) { events.append("redirect") }
    func didFinishLoading() { events.append("finish") }
    func didFail(with error: PorterError) { events.append("fail \(error.code)") }
    func didReceive(_ challenge: AuthenticationChallenge) { events.append("challenge") }
    func didCancel(_ challenge: AuthenticationChallenge) {}
    func cachedResponseIsValid() { events.append("cached") }
    func didSendBodyData(bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {}
    func didCollect(_ metrics: TransactionMetrics) {}
    func needNewBodyStream(_ completion: @escaping @Sendable ((any BodyStream)?) -> Void) { completion(nil) }
}

var failures = 0
@MainActor func check(_ condition: Bool, _ what: String) {
    if !condition {
        failures += 1
        print("contract-only: FAILED: \(what)")
    }
}

let registry = HandlerRegistry()
registry.register(Rot13Handler.self)
let request = Request(url: URL(string: "rot13:Uryyb")!)
check(registry.factory(for: request)?.schemes == ["rot13"], "the registry finds the handler")
let client = RecordingClient()
let handler = registry.factory(for: request)!.makeHandler(request: request, cachedResponse: nil, client: client)
handler.startLoading()
check(client.events == ["response", "data", "finish"], "events \(client.events)")
check(String(decoding: client.body, as: UTF8.self) == "Hello", "body \(String(decoding: client.body, as: UTF8.self))")
// The contract names no store: nothing is installed in a program without the Porter module.
let configuration = SessionConfiguration.ephemeral
check(configuration.cookieStore == nil && configuration.credentialStore == nil && configuration.responseCache == nil,
      "a PorterCore-only configuration has no stores")
print(failures == 0 ? "contract-only: ok" : "contract-only: \(failures) failed")
exit(failures == 0 ? 0 : 1)
