import Foundation
import Porter
import PorterCLI

// Register the built-ins and our own scheme, at run time, in the shared registry.
Porter.bootstrap()
HandlerRegistry.shared.register(FortuneHandler.self, origin: .inProcess, version: "1.0")

let arguments = Array(CommandLine.arguments.dropFirst())

// `CustomScheme cli ARGS...` runs the porter CLI in this process, so the CLI sees
// `fortune:` like any built-in scheme.
if arguments.first == "cli" {
    PorterCommand.main(Array(arguments.dropFirst()))
    exit(0)  // main returns only on success; failures exit with their code
}

/// Answers the fortune teller's challenge, and narrates redirects.
final class Narrator: DataDelegate, @unchecked Sendable {
    let done = DispatchSemaphore(value: 0)
    var body = Data()
    func task(_ task: SessionTask, willPerformRedirection response: Response, newRequest: Request,
              completion: @escaping @Sendable (Request?) -> Void) {
        print("  delegate: redirect \(response.url.absoluteString) -> \(newRequest.url.absoluteString)")
        completion(newRequest)
    }
    func task(_ task: SessionTask, didReceive challenge: AuthenticationChallenge,
              completion: @escaping @Sendable (ChallengeDisposition) -> Void) {
        print("  delegate: challenge for realm \(challenge.protectionSpace.realm ?? "-")")
        completion(.useCredential(Credential(user: "porter", password: "demo")))
    }
    func dataTask(_ task: DataTask, didReceive data: Data) { body.append(data) }
    func task(_ task: SessionTask, didCompleteWithError error: PorterError?) {
        print("  delegate: completed \(error.map { "with \($0.code)" } ?? "ok"): \(String(decoding: body, as: UTF8.self))", terminator: "")
        done.signal()
    }
}

let session = Session(configuration: .ephemeral)

print("1. async/await: fortune://any/1")
let (data, response) = try await session.data(from: URL(string: "fortune://any/1")!)
print("  \(response.mimeType ?? "-") \(response.statusCode ?? 0): \(String(decoding: data, as: UTF8.self))", terminator: "")

print("2. completion handler: fortune://moved/2 (a redirect)")
let finished = DispatchSemaphore(value: 0)
session.dataTask(with: URL(string: "fortune://moved/2")!) { data, response, error in
    print("  landed on \(response?.url.absoluteString ?? "-"): \(data.map { String(decoding: $0, as: UTF8.self) } ?? "\(String(describing: error))")", terminator: "")
    finished.signal()
}.resume()
finished.wait()

print("3. delegate: fortune://private/3 (a password challenge)")
let narrator = Narrator()
let delegated = Session(configuration: .ephemeral, delegate: narrator)
delegated.dataTask(with: URL(string: "fortune://private/3")!).resume()
narrator.done.wait()
delegated.finishTasksAndInvalidate()
