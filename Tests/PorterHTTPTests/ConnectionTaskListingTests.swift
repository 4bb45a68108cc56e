import XCTest
import PorterTestSupport
@testable import Porter
@testable import PorterSession

/// Stream and WebSocket tasks are among a session's `allTasks` (and `getAllTasks`) from
/// their creation until they end, as URLSession's are.
final class ConnectionTaskListingTests: WSTestCase {
    private func listed(_ s: Session) -> Set<Int> { Set(s.allTasks.map(\.taskIdentifier)) }

    func testStreamAndWebSocketTasksAreListedWhileTheyRun() async throws {
        let s = session()
        let stream = s.streamTask(withHostName: "127.0.0.1", port: ports.echo)
        let socket = s.webSocketTask(with: URL(string: "ws://127.0.0.1:\(ports.ws)/echo")!)
        let data = s.dataTask(with: URL(string: "ws://127.0.0.1:1/never-resumed")!)
        XCTAssertEqual(listed(s), [stream.taskIdentifier, socket.taskIdentifier, data.taskIdentifier])

        stream.resume()
        socket.resume()
        try await stream.write(Data("ping\n".utf8), timeout: 10)
        let echoed = try await stream.read(minLength: 5, maxLength: 5, timeout: 10)
        XCTAssertEqual(echoed.data, Data("ping\n".utf8))
        try await socket.send(.string("hi"))
        _ = try await socket.receive()
        XCTAssertEqual(stream.state, .running)
        XCTAssertEqual(socket.state, .running)
        XCTAssertTrue(s.allTasks.contains { $0 === stream }, "a running stream task is listed")
        XCTAssertTrue(s.allTasks.contains { $0 === socket }, "a running WebSocket task is listed")
        let fromCallback = Locked<Set<Int>>([])
        let got = expectation(description: "getAllTasks")
        s.getAllTasks { tasks in
            fromCallback.withLock { $0 = Set(tasks.map(\.taskIdentifier)) }
            got.fulfill()
        }
        await fulfillment(of: [got], timeout: 10)
        XCTAssertEqual(fromCallback.withLock { $0 }, [stream.taskIdentifier, socket.taskIdentifier, data.taskIdentifier])

        // Their end takes them off the list: a cancel, and a clean close.
        stream.cancel()
        XCTAssertFalse(s.allTasks.contains { $0 === stream })
        socket.cancel(with: .normalClosure, reason: nil)
        XCTAssertTrue(eventually(10) { socket.state == .completed })
        XCTAssertEqual(listed(s), [data.taskIdentifier])
        // A WebSocket task that fails to connect leaves the list too.
        let refused = try NginxFixture.freePort()
        let failing = s.webSocketTask(with: URL(string: "ws://127.0.0.1:\(refused)/")!)
        failing.resume()
        XCTAssertTrue(eventually(10) { failing.state == .completed })
        XCTAssertEqual(listed(s), [data.taskIdentifier])
        data.cancel()
        s.invalidateAndCancel()
    }
}
