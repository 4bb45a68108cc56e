import CCurl
import Foundation
import PorterCore

/// Decodes a gzip, deflate, br or zstd body as it arrives (RFC 9110 §8.4.1, RFC 7932,
/// RFC 9659). Porter decodes, not libcurl: while a transfer is paused, libcurl keeps the
/// whole decoded output of the socket read in progress (a 256 KiB read of a gzip bomb is
/// 256 MiB decoded, and past 64 MiB the transfer fails with "Out of memory"). Decoding
/// here, a pause holds back compressed bytes only.
///
/// One write callback's output is bounded by `budget`, not by the input: brotli and zstd
/// have no worst ratio (a few hundred bytes of br decode to gigabytes). When the budget
/// is spent, `decode` says so, remembers how much of the chunk it took, and the handler
/// pauses the transfer; libcurl delivers the same chunk again from its start after the
/// pause, and the decoder goes on from where it stopped. Output goes in 64 KiB slices.
///
/// A list of several codings ("gzip, br") is delivered as it came, with its
/// Content-Encoding, as browsers and URLSession do with codings they do not know.
final class ContentDecoder {
    private let decoder: OpaquePointer
    private static let sliceSize = 64 * 1024
    /// What one write callback may produce before the transfer pauses (16 slices).
    static let budget = 1 << 20
    /// Allocated only once the init is sure to succeed: a failable init that returns nil
    /// runs no deinit (allocated as a property default, it leaked 64 KiB per response
    /// that had no coding to decode).
    private let slice: UnsafeMutableRawPointer
    /// Bytes in and out, for `maximumRatio`.
    private(set) var consumed: Int64 = 0
    private(set) var produced: Int64 = 0
    private let maximumRatio: Double?
    /// Bytes at the start of the next delivery already taken (a chunk decoded in part
    /// before a pause: libcurl delivers it again from its start).
    private var taken = 0
    /// The coding's name, for messages.
    let coding: String

    /// The codings Porter decodes and their C decoder; also what it offers in Accept-Encoding.
    static func codingNumber(_ name: String) -> Int32? {
        switch name {
        case "gzip", "x-gzip": return Int32(PORTER_CODING_GZIP)
        case "deflate": return Int32(PORTER_CODING_DEFLATE)
        case "br": return Int32(PORTER_CODING_BROTLI)
        case "zstd": return Int32(PORTER_CODING_ZSTD)
        default: return nil
        }
    }

    /// nil when `contentEncoding` is not one Porter decodes (the body then goes as it is).
    init?(contentEncoding: String?, maximumRatio: Double?) {
        guard let name = contentEncoding?.trimmingCharacters(in: .whitespaces).lowercased(),
              let number = ContentDecoder.codingNumber(name), let d = porter_decoder_new(number) else { return nil }
        decoder = d
        coding = name
        slice = UnsafeMutableRawPointer.allocate(byteCount: ContentDecoder.sliceSize, alignment: 16)
        self.maximumRatio = maximumRatio
    }

    deinit {
        porter_decoder_free(decoder)
        slice.deallocate()
    }

    /// The compressed stream ended properly (a body that stops before is truncated).
    var isFinished: Bool { porter_decoder_finished(decoder) != 0 }

    enum Failure: Error {
        case damaged
        case ratio(Double)
    }

    enum Outcome: Equatable {
        /// All of the chunk is decoded and its output emitted.
        case consumed
        /// `budget` bytes were emitted and more are due: pause, and hand the same chunk
        /// again (it goes on from where it stopped).
        case budgetSpent
    }

    /// Decodes `input`, handing each decoded slice to `emit`, until the input is used up
    /// or `budget` bytes were emitted.
    func decode(_ input: UnsafeRawBufferPointer, budget: Int = ContentDecoder.budget,
                _ emit: (UnsafeRawBufferPointer) -> Void) throws(Failure) -> Outcome {
        let base = input.baseAddress ?? UnsafeRawPointer(slice)
        let count = input.baseAddress == nil ? 0 : input.count
        var offset = min(taken, count)
        var emitted = 0
        while true {
            if emitted >= budget {
                taken = offset
                return .budgetSpent
            }
            var used = 0, made = 0
            let rc = porter_decoder_run(decoder, base + offset, count - offset, &used, slice, Self.sliceSize, &made)
            offset += used
            consumed += Int64(used)
            if made > 0 {
                produced += Int64(made)
                if let maximumRatio, produced > 1 << 20, Double(produced) > maximumRatio * Double(max(consumed, 1)) {
                    throw .ratio(maximumRatio)
                }
                emit(UnsafeRawBufferPointer(start: slice, count: made))
                emitted += made
            }
            if rc < 0 { throw .damaged }
            // The end of the stream; or the input is used up and the output slice was not
            // filled (nothing more is due until more input comes); or no progress at all.
            if rc == 1 || (offset >= count && made < Self.sliceSize) || (used == 0 && made == 0) {
                taken = 0
                return .consumed
            }
        }
    }
}
