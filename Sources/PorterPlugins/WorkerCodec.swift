import Foundation
import HTTPTypes
import PorterCore
import PorterIPC

/// How worker messages are put in frames, one policy for both sides. The messages sent
/// per body chunk, per flow-control step or per load have a binary layout in a
/// `.compact` frame: one byte naming the message, the load (8 bytes), then its fields —
/// numbers 8 bytes each, big-endian; a load's request and response head as `WireWriter`
/// lays them out; the rest — rare and varied — are JSON in a `.message` frame. A frame
/// the receiver cannot place (an unknown name byte, a length that is not the message's,
/// a field out of its range, bytes left over) is malformed.
enum WorkerCodec {
    /// The compact messages from the host.
    enum ToWorkerName: UInt8 {
        case stop = 1, pause = 2, resume = 3
        /// A body that ended without failure (a failure carries text: JSON).
        case bodyEnd = 4
        /// Field: the request (`WireRequest.write`).
        case start = 5
    }

    /// The compact messages from a worker.
    enum FromWorkerName: UInt8 {
        case finish = 1, destroyed = 2
        /// Field: the capacity.
        case readBody = 3
        /// Fields: bytes, total, expected.
        case sent = 4
        /// Field: revalidated, 0 or 1.
        case cachedValid = 5
        /// Field: the head (`WireResponse.write`).
        case response = 6
    }

    /// The whole frame (header included) for `m`; nil when it cannot be encoded.
    static func encoded(_ m: ToWorker) -> [UInt8]? {
        switch m {
        case .stop(let load): return compact(ToWorkerName.stop.rawValue, load)
        case .pause(let load): return compact(ToWorkerName.pause.rawValue, load)
        case .resume(let load): return compact(ToWorkerName.resume.rawValue, load)
        case .bodyEnd(let load, nil): return compact(ToWorkerName.bodyEnd.rawValue, load)
        case .start(let load, let request): return compact(ToWorkerName.start.rawValue, load) { request.write(to: &$0) }
        default: return json(m)
        }
    }

    /// The whole frame (header included) for `m`; nil when it cannot be encoded.
    static func encoded(_ m: FromWorker) -> [UInt8]? {
        switch m {
        case .finish(let load): return compact(FromWorkerName.finish.rawValue, load)
        case .destroyed(let load): return compact(FromWorkerName.destroyed.rawValue, load)
        case .readBody(let load, let capacity):
            return compact(FromWorkerName.readBody.rawValue, load, fields: 1, Int64(capacity))
        case .sent(let load, let bytes, let total, let expected):
            return compact(FromWorkerName.sent.rawValue, load, fields: 3, bytes, total, expected)
        case .cachedValid(let load, let revalidated):
            return compact(FromWorkerName.cachedValid.rawValue, load, fields: 1, revalidated ? 1 : 0)
        case .response(let load, let head): return compact(FromWorkerName.response.rawValue, load) { head.write(to: &$0) }
        default: return json(m)
        }
    }

    static func decode(_: ToWorker.Type, from frame: Frame) throws(IPCError) -> ToWorker {
        switch frame.kind {
        case .message: return try Channel.decode(ToWorker.self, from: frame.payload)
        case .compact:
            let c = try Compact(frame.payload)
            switch ToWorkerName(rawValue: c.name) {
            case .stop: try c.expect(0); return .stop(load: c.load)
            case .pause: try c.expect(0); return .pause(load: c.load)
            case .resume: try c.expect(0); return .resume(load: c.load)
            case .bodyEnd: try c.expect(0); return .bodyEnd(load: c.load, failure: nil)
            case .start:
                var r = c.rest
                let request = try WireRequest(reading: &r)
                try r.end()
                return .start(load: c.load, request: request)
            case nil: throw IPCError(.malformed, "an unknown compact message \(c.name)")
            }
        default: throw IPCError(.malformed, "expected a message, got a frame of kind \(frame.kind)")
        }
    }

    static func decode(_: FromWorker.Type, from frame: Frame) throws(IPCError) -> FromWorker {
        switch frame.kind {
        case .message: return try Channel.decode(FromWorker.self, from: frame.payload)
        case .compact:
            let c = try Compact(frame.payload)
            switch FromWorkerName(rawValue: c.name) {
            case .finish: try c.expect(0); return .finish(load: c.load)
            case .destroyed: try c.expect(0); return .destroyed(load: c.load)
            case .readBody:
                try c.expect(1)
                return .readBody(load: c.load, capacity: Int(clamping: c.field(0)))
            case .sent:
                try c.expect(3)
                return .sent(load: c.load, bytes: c.field(0), total: c.field(1), expected: c.field(2))
            case .cachedValid:
                try c.expect(1)
                guard c.field(0) == 0 || c.field(0) == 1 else { throw IPCError(.malformed, "cachedValid with \(c.field(0))") }
                return .cachedValid(load: c.load, revalidated: c.field(0) == 1)
            case .response:
                var r = c.rest
                let head = try WireResponse(reading: &r)
                try r.end()
                return .response(load: c.load, head: head)
            case nil: throw IPCError(.malformed, "an unknown compact message \(c.name)")
            }
        default: throw IPCError(.malformed, "expected a message, got a frame of kind \(frame.kind)")
        }
    }

    /// A compact payload: name, load, then the message's fields.
    private struct Compact {
        let bytes: [UInt8]
        let name: UInt8
        let load: UInt64

        init(_ payload: [UInt8]) throws(IPCError) {
            guard payload.count >= 9 else { throw IPCError(.malformed, "a compact message of \(payload.count) bytes") }
            bytes = payload
            name = payload[0]
            load = payload.withUnsafeBytes { UInt64(bigEndian: $0.loadUnaligned(fromByteOffset: 1, as: UInt64.self)) }
        }

        /// Checks that exactly `n` numbers follow the load.
        func expect(_ n: Int) throws(IPCError) {
            guard bytes.count == 9 + 8 * n else {
                throw IPCError(.malformed, "compact message \(name) of \(bytes.count) bytes, not \(9 + 8 * n)")
            }
        }

        /// What follows the load, to read a structured field from.
        var rest: WireReader { WireReader(bytes, from: 9) }

        /// Field `i` (< the count `expect` checked).
        func field(_ i: Int) -> Int64 {
            bytes.withUnsafeBytes { Int64(bigEndian: $0.loadUnaligned(fromByteOffset: 9 + 8 * i, as: Int64.self)) }
        }
    }

    /// A compact frame with a structured field written by `body`.
    private static func compact(_ name: UInt8, _ load: UInt64, _ body: (inout WireWriter) -> Void) -> [UInt8] {
        var w = WireWriter()
        w.bytes.append(contentsOf: [0, 0, 0, 0, 0, name])
        w.u64(load)
        body(&w)
        let payload = w.bytes.count - Frame.headerLength
        w.bytes.withUnsafeMutableBytes { Frame.writeHeader(kind: .compact, payloadLength: payload, to: $0.baseAddress!) }
        return w.bytes
    }

    /// A compact frame, header included, in one allocation.
    private static func compact(_ name: UInt8, _ load: UInt64, fields: Int = 0,
                                _ a: Int64 = 0, _ b: Int64 = 0, _ c: Int64 = 0) -> [UInt8] {
        let payload = 9 + 8 * fields
        return [UInt8](unsafeUninitializedCapacity: Frame.headerLength + payload) { buffer, initialized in
            let p = UnsafeMutableRawPointer(buffer.baseAddress!)
            Frame.writeHeader(kind: .compact, payloadLength: payload, to: p)
            p.storeBytes(of: name, toByteOffset: 5, as: UInt8.self)
            p.storeBytes(of: load.bigEndian, toByteOffset: 6, as: UInt64.self)
            if fields > 0 { p.storeBytes(of: a.bigEndian, toByteOffset: 14, as: Int64.self) }
            if fields > 1 { p.storeBytes(of: b.bigEndian, toByteOffset: 22, as: Int64.self) }
            if fields > 2 { p.storeBytes(of: c.bigEndian, toByteOffset: 30, as: Int64.self) }
            initialized = Frame.headerLength + payload
        }
    }

    private static func json<M: Encodable>(_ m: M) -> [UInt8]? {
        guard let data = try? JSONEncoder().encode(m) else { return nil }
        return Frame(kind: .message, payload: Array(data)).encoded()
    }
}
