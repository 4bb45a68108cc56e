import Foundation
import PorterCore
import PorterSession
import CPorterDeflate

/// permessage-deflate (RFC 7692): what a client offers, what the server agreed, and the
/// two raw DEFLATE streams of a connection.
public struct PerMessageDeflate: Sendable, Equatable {
    /// The largest window (2^N bytes, 8...15) the client's compressor may use; nil offers
    /// `client_max_window_bits` without a value (the server may choose).
    public var clientMaxWindowBits: Int?
    /// The largest window the server's compressor may use (`server_max_window_bits`); nil:
    /// not asked (15).
    public var serverMaxWindowBits: Int?
    /// The client starts each message with an empty window (`client_no_context_takeover`).
    public var clientNoContextTakeover: Bool
    /// The server starts each message with an empty window (`server_no_context_takeover`).
    public var serverNoContextTakeover: Bool

    public init(clientMaxWindowBits: Int? = nil, serverMaxWindowBits: Int? = nil,
                clientNoContextTakeover: Bool = false, serverNoContextTakeover: Bool = false) {
        self.clientMaxWindowBits = clientMaxWindowBits
        self.serverMaxWindowBits = serverMaxWindowBits
        self.clientNoContextTakeover = clientNoContextTakeover
        self.serverNoContextTakeover = serverNoContextTakeover
    }

    /// The Sec-WebSocket-Extensions value of the offer (window bits clamped to 8...15).
    var offer: String {
        var parts = ["permessage-deflate"]
        if clientNoContextTakeover { parts.append("client_no_context_takeover") }
        if serverNoContextTakeover { parts.append("server_no_context_takeover") }
        if let bits = serverMaxWindowBits { parts.append("server_max_window_bits=\(min(15, max(8, bits)))") }
        if let bits = clientMaxWindowBits {
            parts.append("client_max_window_bits=\(min(15, max(8, bits)))")
        } else {
            parts.append("client_max_window_bits")
        }
        return parts.joined(separator: "; ")
    }

    /// What the server's Sec-WebSocket-Extensions answer agrees to (RFC 7692 §7.1), or nil
    /// when it chose no extension. Throws when it chose something not offered, a parameter
    /// twice, a value out of range, or dropped a no-context-takeover the client asked of it.
    static func agreed(_ values: [String], offered: PerMessageDeflate?) throws(WebSocketProtocolError) -> PerMessageDeflate? {
        let extensions = values.flatMap { WebSocketHandshake.splitList($0, by: ",") }.filter { !$0.isEmpty }
        guard let first = extensions.first else { return nil }
        func refuse(_ why: String) -> WebSocketProtocolError {
            WebSocketProtocolError(code: .mandatoryExtensionMissing, message: why)
        }
        guard let offered else { throw refuse("the server chose an extension that was not offered") }
        guard extensions.count == 1 else { throw refuse("the server chose more than one extension") }
        var params = WebSocketHandshake.splitList(first, by: ";")
        guard params.removeFirst().lowercased() == "permessage-deflate" else {
            throw refuse("the server chose an extension that was not offered")
        }
        var agreed = PerMessageDeflate()
        var seen = Set<String>()
        for param in params {
            let pair = param.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            let name = pair[0].lowercased()
            var value = pair.count > 1 ? pair[1] : nil
            if let v = value, v.count >= 2, v.hasPrefix("\""), v.hasSuffix("\"") { value = String(v.dropFirst().dropLast()) }
            guard seen.insert(name).inserted else { throw refuse("the server's permessage-deflate repeats \(name)") }
            func bits() throws(WebSocketProtocolError) -> Int {
                guard let value, value.count <= 2, value.allSatisfy(\.isASCII), let n = Int(value), (8...15).contains(n) else {
                    throw refuse("the server's \(name) is not a number of bits from 8 to 15")
                }
                return n
            }
            switch name {
            case "server_no_context_takeover":
                guard value == nil else { throw refuse("server_no_context_takeover takes no value") }
                agreed.serverNoContextTakeover = true
            case "client_no_context_takeover":
                guard value == nil else { throw refuse("client_no_context_takeover takes no value") }
                agreed.clientNoContextTakeover = true
            case "server_max_window_bits":
                let n = try bits()
                if let asked = offered.serverMaxWindowBits, n > asked { throw refuse("the server's window is larger than asked") }
                agreed.serverMaxWindowBits = n
            case "client_max_window_bits":
                let n = try bits()
                if let asked = offered.clientMaxWindowBits, n > asked { throw refuse("the client's window is larger than offered") }
                agreed.clientMaxWindowBits = n
            default:
                throw refuse("the server's permessage-deflate has the unknown parameter \(name)")
            }
        }
        if offered.serverNoContextTakeover && !agreed.serverNoContextTakeover {
            throw refuse("the server dropped server_no_context_takeover")
        }
        if offered.serverMaxWindowBits != nil && agreed.serverMaxWindowBits == nil {
            throw refuse("the server dropped server_max_window_bits")
        }
        // What the client offered to do binds it even when the answer leaves it out.
        if offered.clientNoContextTakeover { agreed.clientNoContextTakeover = true }
        if agreed.clientMaxWindowBits == nil { agreed.clientMaxWindowBits = offered.clientMaxWindowBits }
        return agreed
    }
}

/// One raw DEFLATE stream of a connection, inflating the server's messages or deflating
/// the client's. Confined to the task's queue.
final class WebSocketDeflateStream {
    private let z: OpaquePointer
    private static let tail: [UInt8] = [0, 0, 0xFF, 0xFF]
    private var scratch = [UInt8](repeating: 0, count: 64 * 1024)

    private init(_ z: OpaquePointer) { self.z = z }
    deinit { porter_deflate_stream_free(z) }

    /// An inflater for the server's messages (a 32 KiB window decodes any the server uses).
    static func inflater() -> WebSocketDeflateStream? {
        porter_inflater_raw_new(15).map(WebSocketDeflateStream.init)
    }

    /// A deflater for the client's messages; nil when the window agreed is 8 bits, which
    /// zlib cannot keep for raw streams (the client then sends its messages uncompressed,
    /// which RFC 7692 §6 allows).
    static func deflater(windowBits: Int) -> WebSocketDeflateStream? {
        guard windowBits >= 9 else { return nil }
        return porter_deflater_raw_new(Int32(min(15, windowBits))).map(WebSocketDeflateStream.init)
    }

    func reset() { porter_deflate_stream_reset(z) }

    /// Inflates `input` (and the message's end, when `end`) onto `output`, which may not
    /// pass `limit` bytes: the output grows in 64 KiB steps, so a bomb is stopped within
    /// one step of the limit. `check` sees each step's bytes (up to the limit) first, so
    /// what fails is what comes first in the message, however the input was cut: bytes
    /// `check` refuses (1007), then the limit (1009), then corrupt data (1007).
    func inflate<C: Collection>(_ input: C, end: Bool, onto output: inout Data, limit: Int,
                                check: (UnsafeRawBufferPointer) -> WebSocketProtocolError?) throws(WebSocketProtocolError)
    where C.Element == UInt8 {
        try run(input, onto: &output, limit: limit, check: check)
        if end { try run(WebSocketDeflateStream.tail, onto: &output, limit: limit, check: check) }
    }

    private func run<C: Collection>(_ input: C, onto output: inout Data, limit: Int,
                                    check: (UnsafeRawBufferPointer) -> WebSocketProtocolError?) throws(WebSocketProtocolError)
    where C.Element == UInt8 {
        let result: Result<Void, WebSocketProtocolError>? = input.withContiguousStorageIfAvailable { buffer in
            drive(UnsafeRawBufferPointer(buffer), onto: &output, limit: limit, check: check)
        }
        if let result { return try result.get() }
        let copy = Array(input)
        try copy.withUnsafeBytes { drive($0, onto: &output, limit: limit, check: check) }.get()
    }

    private func drive(_ input: UnsafeRawBufferPointer, onto output: inout Data, limit: Int,
                       check: (UnsafeRawBufferPointer) -> WebSocketProtocolError?) -> Result<Void, WebSocketProtocolError> {
        var offset = 0
        while true {
            var used = 0, made = 0
            let remaining = input.count - offset
            let rc = scratch.withUnsafeMutableBytes { out in
                porter_deflate_stream_run(z, input.baseAddress.map { $0 + offset }, remaining, &used, out.baseAddress, out.count, &made, 0)
            }
            offset += used
            if made > 0 {
                let allowed = min(made, max(0, limit - output.count))
                if let refused = scratch.withUnsafeBytes({ check(UnsafeRawBufferPointer(rebasing: $0[0..<allowed])) }) {
                    return .failure(refused)
                }
                if allowed < made {
                    return .failure(WebSocketProtocolError(code: .messageTooBig,
                                                           message: "a compressed message inflates past maximumMessageSize (\(limit))"))
                }
                output.append(contentsOf: scratch[0..<made])
            }
            if rc < 0 {
                return .failure(WebSocketProtocolError(code: .invalidFramePayloadData, message: "a compressed message is not valid DEFLATE data"))
            }
            // Done when the input is taken and the output did not fill the scratch.
            if offset >= input.count && made < scratch.count { return .success(()) }
        }
    }

    /// Appends the compressed form of a whole message to `output` (RFC 7692 §7.2.1: a sync
    /// flush, its last four bytes 00 00 FF FF removed). False, with `output` cut back, when
    /// it would pass `limit` bytes of output (compressing does not pay) or zlib failed —
    /// or, once `probe` bytes of input were taken, when the output so far is no smaller
    /// than that input (a large incompressible message is not compressed whole first).
    func deflate(_ input: UnsafeRawBufferPointer, appendingTo output: inout Data, limit: Int, probe: Int = .max) -> Bool {
        let start = output.count
        var offset = 0
        while true {
            var used = 0, made = 0
            let rc = scratch.withUnsafeMutableBytes { out in
                porter_deflate_stream_run(z, input.baseAddress.map { $0 + offset }, input.count - offset, &used, out.baseAddress, out.count, &made, 1)
            }
            offset += used
            let produced = output.count - start + made
            // Past the limit less the tail that is cut: give up before the buffer grows.
            guard rc >= 0, produced <= limit + 4, offset < probe || produced < offset else {
                output.removeSubrange(start...)
                return false
            }
            output.append(contentsOf: scratch[0..<made])
            if rc == 1 { break }
        }
        guard output.count - start >= 4, output.suffix(4).elementsEqual(WebSocketDeflateStream.tail) else {
            output.removeSubrange(start...)
            return false
        }
        output.removeLast(4)
        return true
    }

    /// The compressed form of a whole message, or nil on a zlib error.
    func deflate(_ input: UnsafeRawBufferPointer) -> Data? {
        var output = Data()
        return deflate(input, appendingTo: &output, limit: .max - 4) ? output : nil
    }
}
