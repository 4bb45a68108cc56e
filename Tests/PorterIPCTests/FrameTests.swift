import Foundation
import PorterIPC
import XCTest

final class FrameTests: XCTestCase {
    func testFramesSurviveAnySplitOfTheStream() throws {
        let frames = [Frame(kind: .message, payload: Array("{\"a\":1}".utf8)), Frame(kind: .data, payload: []),
                      Frame(kind: .data, payload: (0..<70_000).map { UInt8(truncatingIfNeeded: $0) }),
                      Frame(kind: .goodbye, payload: Array("bye".utf8))]
        let wire = frames.flatMap { $0.encoded() }
        for step in [1, 2, 3, 7, 4096, wire.count] {
            var d = FrameDecoder()
            var got: [Frame] = []
            var i = 0
            while i < wire.count {
                d.append(wire[i..<min(wire.count, i + step)])
                i += step
                while let f = try d.next() { got.append(f) }
            }
            XCTAssertEqual(got, frames, "split every \(step) bytes")
            XCTAssertEqual(d.bufferedCount, 0)
        }
    }

    func testAnOversizedFrameIsRefusedBeforeItsBodyArrives() {
        var d = FrameDecoder(maximumPayload: 1024)
        d.append([0x00, 0x10, 0x00, 0x01])  // 1 MiB + 1 announced
        XCTAssertThrowsError(try d.next()) { XCTAssertEqual(($0 as? IPCError)?.code, .frameTooLarge) }
        XCTAssertThrowsError(try d.next(), "the decoder stays failed") { XCTAssertEqual(($0 as? IPCError)?.code, .frameTooLarge) }
    }

    func testMalformedFramesAreRefused() {
        for bad: [UInt8] in [[0, 0, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 99], [0, 0, 0, 2, 200, 1]] {
            var d = FrameDecoder()
            d.append(bad)
            XCTAssertThrowsError(try d.next(), "\(bad)") { XCTAssertEqual(($0 as? IPCError)?.code, .malformed) }
        }
    }

    func testHandshakeAgreesOnTheHighestCommonVersion() throws {
        let server = Hello(service: "porterd", minimumVersion: 1, maximumVersion: 3)
        XCTAssertEqual(try server.agree(with: Hello(service: "porterd", minimumVersion: 2, maximumVersion: 5)), 3)
        XCTAssertEqual(try server.agree(with: Hello(service: "porterd", minimumVersion: 1, maximumVersion: 1)), 1)
        XCTAssertThrowsError(try server.agree(with: Hello(service: "porterd", minimumVersion: 4, maximumVersion: 5))) {
            XCTAssertEqual(($0 as? IPCError)?.code, .versionMismatch)
        }
        XCTAssertThrowsError(try server.agree(with: Hello(service: "plugin-worker", minimumVersion: 1, maximumVersion: 3))) {
            XCTAssertEqual(($0 as? IPCError)?.code, .versionMismatch)
        }
        let round = try Hello(frame: server.frame)
        XCTAssertEqual(round, server)
        XCTAssertThrowsError(try Hello(frame: Frame(kind: .hello, payload: Array("PORTER-IPC".utf8) + [0, 2, 0, 1, 0])),
                             "a range upside down") { XCTAssertEqual(($0 as? IPCError)?.code, .malformed) }
        XCTAssertThrowsError(try Hello(frame: Frame(kind: .hello, payload: Array("HTTP/1.1 200".utf8)))) {
            XCTAssertEqual(($0 as? IPCError)?.code, .malformed)
        }
    }

    struct Ping: Codable, Equatable { var n: Int; var text: String }

    /// Over a real socketpair: the handshake, messages both ways, the peer's
    /// credentials, a refused version, and garbage ending only its connection.
    func testChannelsOverASocketpair() throws {
        let (a, b) = try Channel.pair()
        let hello = Hello(service: "test", minimumVersion: 1, maximumVersion: 2)
        let server = Thread {
            do {
                try b.answer(hello)
                let p = try b.receive(Ping.self)
                try b.send(message: Ping(n: p.n + 1, text: p.text.uppercased()))
            } catch {
                XCTFail("server: \(error)")
            }
        }
        server.start()
        XCTAssertEqual(try a.greet(Hello(service: "test", minimumVersion: 2, maximumVersion: 9)), 2)
        try a.send(message: Ping(n: 41, text: "ünïcode"))
        XCTAssertEqual(try a.receive(Ping.self), Ping(n: 42, text: "ÜNÏCODE"))
        XCTAssertEqual(a.peer?.uid, geteuid())
        XCTAssertEqual(a.peer?.pid, getpid())

        let (c, d) = try Channel.pair()
        let refuser = Thread { _ = try? d.answer(hello) }
        refuser.start()
        XCTAssertThrowsError(try c.greet(Hello(service: "test", minimumVersion: 5, maximumVersion: 6))) { e in
            XCTAssertEqual((e as? IPCError)?.code, .closed, "the acceptor says goodbye with the reason")
            XCTAssertTrue("\(e)".contains("speaks versions 1–2"), "\(e)")
        }

        let (e, f) = try Channel.pair()
        _ = Array("GET / HTTP/1.1\r\n\r\n".utf8).withUnsafeBytes { Glibc.send(e.fd, $0.baseAddress, $0.count, 0) }
        XCTAssertThrowsError(try f.answer(hello)) { XCTAssertEqual(($0 as? IPCError)?.code, .frameTooLarge) }
        XCTAssertThrowsError(try e.receive(), "the bad peer is told and closed") { XCTAssertEqual(($0 as? IPCError)?.code, .closed) }
    }

    /// Descriptors cross only to a side that asked for them (a plugin worker, for the
    /// host's local-service answers): the host's side of a worker keeps none a hostile
    /// worker passes (the kernel drops them), and a passed descriptor arrives with its
    /// own frame, in order.
    func testDescriptorsArriveOnlyWhereAskedAndInOrder() throws {
        func pipeWith(_ text: String) throws -> (read: Int32, write: Int32) {
            var fds: [Int32] = [-1, -1]
            XCTAssertEqual(pipe(&fds), 0)
            _ = Array(text.utf8).withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
            close(fds[1])
            return (fds[0], -1)
        }
        func readAll(_ fd: Int32) -> String {
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            close(fd)
            return String(decoding: buffer.prefix(max(0, n)), as: UTF8.self)
        }
        // Not asked for: dropped, and the frames still arrive.
        let (a, b) = try Channel.pair()
        let hostile = try pipeWith("secret")
        try a.send(Frame(kind: .message, payload: Array("{}".utf8)), passing: hostile.read)
        close(hostile.read)
        XCTAssertEqual(try b.receive().payload, Array("{}".utf8))
        XCTAssertNil(b.takeDescriptor(), "a side that did not ask keeps no descriptor")
        // Asked for: each with its frame, in order, between frames without one.
        let (c, d) = try Channel.pair()
        d.receivesDescriptors = true
        let one = try pipeWith("one"), two = try pipeWith("two")
        try c.send(Frame(kind: .message, payload: [1]), passing: one.read)
        try c.send(Frame(kind: .message, payload: [2]))
        try c.send(Frame(kind: .message, payload: [3]), passing: two.read)
        close(one.read)
        close(two.read)
        XCTAssertEqual(try d.receive().payload, [1])
        let first = try XCTUnwrap(d.takeDescriptor())
        XCTAssertEqual(try d.receive().payload, [2])
        XCTAssertEqual(try d.receive().payload, [3])
        let second = try XCTUnwrap(d.takeDescriptor())
        XCTAssertNil(d.takeDescriptor())
        XCTAssertEqual(readAll(first), "one")
        XCTAssertEqual(readAll(second), "two")
    }

    func testAMessageThatDoesNotDecodeIsMalformed() throws {
        let (a, b) = try Channel.pair()
        try a.send(Frame(kind: .message, payload: Array("{\"n\":\"x\"}".utf8)))
        XCTAssertThrowsError(try b.receive(Ping.self)) { XCTAssertEqual(($0 as? IPCError)?.code, .malformed) }
        try a.send(Frame(kind: .data, payload: [1, 2, 3]))
        XCTAssertThrowsError(try b.receive(Ping.self)) { XCTAssertEqual(($0 as? IPCError)?.code, .malformed) }
    }

    /// A listener replaces a dead socket file but not a live one, and refuses a path that
    /// is not a socket.
    func testListenerPaths() throws {
        let dir = NSTemporaryDirectory() + "porter-ipc-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/s.sock"
        let first = try Listener(path: path)
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600, "the socket file is private")
        XCTAssertThrowsError(try Listener(path: path), "someone listens there")
        first.close()
        let second = try Listener(path: path)
        let client = try Channel.connect(path: path)
        let accepted = try XCTUnwrap(second.accept())
        try client.send(Frame(kind: .data, payload: [7]))
        XCTAssertEqual(try accepted.receive(), Frame(kind: .data, payload: [7]))
        second.close()
        try "x".write(toFile: dir + "/file", atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try Listener(path: dir + "/file"))
    }

    /// A large frame (a body chunk) is read straight into its payload once its header has
    /// arrived; small frames around it come as before, in order and intact.
    func testLargeFramesAreReadStraightIntoTheirPayload() throws {
        let (a, b) = try Channel.pair(maximumPayload: 4 << 20)
        let body = (0..<(1 << 20) + 7).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
        let frames = [Frame(kind: .message, payload: Array("{}".utf8)), Frame(kind: .data, payload: body),
                      Frame(kind: .data, payload: Array(body.prefix(70_000))), Frame(kind: .message, payload: Array("[]".utf8))]
        let sender = Thread { for f in frames { try? a.send(f) } }
        sender.start()
        for f in frames { XCTAssertEqual(try b.receive(), f) }
    }

    /// The decoder hands out a large frame's header and what it has of the payload, and
    /// nothing for a frame that is whole, small, or not yet a header; a bad header fails.
    func testTheDecoderHandsOutALargeFramesHead() throws {
        var d = FrameDecoder(maximumPayload: 1 << 20)
        let big = Frame(kind: .data, payload: [UInt8](repeating: 7, count: 100_000)).encoded()
        d.append(big.prefix(4))
        XCTAssertNil(try d.takeLargeFrameHead(minimum: 64 << 10), "not yet a whole header")
        d.append(big[4..<5000])
        let head = try XCTUnwrap(try d.takeLargeFrameHead(minimum: 64 << 10))
        XCTAssertEqual(head.kind, .data)
        XCTAssertEqual(head.length, 100_000)
        XCTAssertEqual(head.head, Array(big[5..<5000]))
        XCTAssertEqual(d.bufferedCount, 0, "the head left the decoder")
        d.append(Frame(kind: .message, payload: [1, 2]).encoded())
        XCTAssertNil(try d.takeLargeFrameHead(minimum: 64 << 10), "a small frame")
        XCTAssertEqual(try d.next(), Frame(kind: .message, payload: [1, 2]))
        d.append(big)
        XCTAssertNil(try d.takeLargeFrameHead(minimum: 64 << 10), "a whole frame comes from next()")
        XCTAssertEqual(try d.next()?.payload.count, 100_000)
        var bad = FrameDecoder(maximumPayload: 1 << 16)
        bad.append([0, 0x10, 0, 1, 3])
        XCTAssertThrowsError(try bad.takeLargeFrameHead(minimum: 1)) { XCTAssertEqual(($0 as? IPCError)?.code, .frameTooLarge) }
    }

    /// A frame of an unknown kind fails as soon as its kind byte arrives, not only once its
    /// payload is complete: the decoder and the large-frame reader fail the same way
    /// (FuzzWorkerMessages found them apart: bad-kind-before-its-payload.bin).
    func testAnUnknownKindFailsBeforeItsPayloadArrives() {
        var d = FrameDecoder()
        d.append([0, 0, 0, 109, 0x24, 1, 2])
        XCTAssertThrowsError(try d.next()) { XCTAssertEqual(($0 as? IPCError)?.code, .malformed) }
        var large = FrameDecoder()
        large.append([0, 0, 0, 109, 0x24, 1, 2])
        XCTAssertThrowsError(try large.takeLargeFrameHead(minimum: 1)) { XCTAssertEqual(($0 as? IPCError)?.code, .malformed) }
    }

    /// A large frame whose sender ends before its payload is complete is an error that says
    /// so, not a short frame.
    func testALargeFrameCutShortIsAnError() throws {
        let (a, b) = try Channel.pair()
        let frame = Frame(kind: .data, payload: [UInt8](repeating: 1, count: 500_000)).encoded()
        try a.sendRaw(Array(frame.prefix(100_000)))
        a.close()
        XCTAssertThrowsError(try b.receive()) { error in
            XCTAssertEqual((error as? IPCError)?.code, .closed)
            XCTAssertEqual((error as? IPCError)?.message, "the peer closed the connection mid-frame")
        }
    }

    /// Tagged data frames over a real socketpair: each body arrives whole with its tag, in
    /// order with the frames around it, whatever its size (empty, smaller than the read
    /// ahead, larger than the socket buffers), on a channel that keeps descriptors too.
    func testTaggedDataArrivesSplitFromItsFrames() throws {
        for keepsDescriptors in [false, true] {
            let (a, b) = try Channel.pair(maximumPayload: 4 << 20)
            b.receivesDescriptors = keepsDescriptors
            let sizes = [0, 1, 7, 8, 9, 5_000, 16 << 10, 70_000, (1 << 20) + 7, 3]
            let bodies = sizes.enumerated().map { i, n in (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) } }
            let sender = Thread {
                for (i, body) in bodies.enumerated() {
                    try? a.send(Frame(kind: .compact, payload: [UInt8(i)]))
                    try? body.withUnsafeBytes { try a.sendData(tag: UInt64(i) << 40 | 0xAB, body: $0) }
                }
                try? a.send(Frame(kind: .message, payload: Array("{}".utf8)))
            }
            sender.start()
            for (i, body) in bodies.enumerated() {
                guard case .frame(let f) = try b.receiveIncoming() else { return XCTFail("expected the frame before body \(i)") }
                XCTAssertEqual(f, Frame(kind: .compact, payload: [UInt8(i)]))
                guard case .data(let tag, let got) = try b.receiveIncoming() else { return XCTFail("expected body \(i)") }
                XCTAssertEqual(tag, UInt64(i) << 40 | 0xAB)
                XCTAssertEqual(got, Data(body), "body \(i) of \(body.count) bytes (descriptors kept: \(keepsDescriptors))")
            }
            guard case .frame(let last) = try b.receiveIncoming() else { return XCTFail("expected the last frame") }
            XCTAssertEqual(last.kind, .message)
        }
    }

    /// A data frame too short to hold its tag is malformed, whether it arrives whole or
    /// not; one cut short by the peer's end says so.
    func testTaggedDataTooShortOrCutShortIsAnError() throws {
        for whole in [true, false] {
            let (a, b) = try Channel.pair()
            let short = Frame(kind: .data, payload: [1, 2, 3]).encoded()
            try a.sendRaw(whole ? short : Array(short.prefix(6)))
            XCTAssertThrowsError(try b.receiveIncoming()) { XCTAssertEqual(($0 as? IPCError)?.code, .malformed) }
        }
        let (a, b) = try Channel.pair()
        let body = [UInt8](repeating: 9, count: 300_000)
        let frame = Frame(kind: .data, payload: [0, 0, 0, 0, 0, 0, 0, 5] + body).encoded()
        try a.sendRaw(Array(frame.prefix(100_000)))
        a.close()
        XCTAssertThrowsError(try b.receiveIncoming()) { error in
            XCTAssertEqual((error as? IPCError)?.code, .closed)
            XCTAssertEqual((error as? IPCError)?.message, "the peer closed the connection mid-frame")
        }
    }
}
