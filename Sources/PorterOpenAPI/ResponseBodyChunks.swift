import Foundation
import OpenAPIRuntime
import PorterCore
import PorterSession

/// A response body as the byte chunks `HTTPBody` reads: the chunks of a `bytes(for:)`
/// load, so a reader that stops reading holds the transfer back, and one that drops the
/// body cancels the load. A reader whose task is cancelled gets `CancellationError`.
struct ResponseBodyChunks: AsyncSequence, Sendable {
    typealias Element = HTTPBody.ByteChunk
    let chunks: AsyncBytes.Chunks

    struct Iterator: AsyncIteratorProtocol {
        var inner: AsyncBytes.Chunks.Iterator

        mutating func next() async throws -> HTTPBody.ByteChunk? {
            do {
                while let data = try await inner.next() {
                    if !data.isEmpty { return HTTPBody.ByteChunk(data) }
                }
                return nil
            } catch let error as PorterError where error.code == .cancelled && Task.isCancelled {
                throw CancellationError()
            }
        }
    }

    func makeAsyncIterator() -> Iterator { Iterator(inner: chunks.makeAsyncIterator()) }
}
