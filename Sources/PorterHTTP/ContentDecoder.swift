import CCurl
import Foundation
import PorterCore

/// Decodes a gzip or deflate body as it arrives (RFC 9110 §8.4.1). Porter decodes, not
/// libcurl: while a transfer is paused, libcurl keeps the whole decoded output of the
/// socket read in progress (a 256 KiB read of a gzip bomb is 256 MiB decoded, and past
/// 64 MiB the transfer fails with "Out of memory"). Decoding here, a pause holds back
/// compressed bytes only, and one callback's output is bounded by its input (16 KiB at
/// most from libcurl) times zlib's worst ratio (about 1,032), decoded in 64 KiB slices.
///
/// Codings other than gzip, x-gzip and deflate (br, zstd, a list of several) are
/// delivered as they came, with their Content-Encoding, as browsers and URLSession do
/// with codings they do not know.
final class ContentDecoder {
    private let inflater: OpaquePointer
    private static let sliceSize = 64 * 1024
    /// Allocated only once the init is sure to succeed: a failable init that returns nil
    /// runs no deinit (allocated as a property default, it leaked 64 KiB per response
    /// that had no coding to decode).
    private let slice: UnsafeMutableRawPointer
    /// Bytes in and out, for `maximumRatio`.
    private(set) var consumed: Int64 = 0
    private(set) var produced: Int64 = 0
    private let maximumRatio: Double?
    /// The compressed stream ended properly (a body that stops before is truncated).
    private(set) var isFinished = false

    /// nil when `contentEncoding` is not one Porter decodes (the body then goes as it is).
    init?(contentEncoding: String?, maximumRatio: Double?) {
        guard let coding = contentEncoding?.trimmingCharacters(in: .whitespaces).lowercased() else { return nil }
        let gzip: Int32
        switch coding {
        case "gzip", "x-gzip": gzip = 1
        case "deflate": gzip = 0
        default: return nil
        }
        guard let z = porter_inflater_new(gzip) else { return nil }
        inflater = z
        slice = UnsafeMutableRawPointer.allocate(byteCount: ContentDecoder.sliceSize, alignment: 16)
        self.maximumRatio = maximumRatio
    }

    deinit {
        porter_inflater_free(inflater)
        slice.deallocate()
    }

    enum Failure: Error {
        case damaged
        case ratio(Double)
    }

    /// Decodes `input`, handing each decoded slice to `emit`.
    func decode(_ input: UnsafeRawBufferPointer, _ emit: (UnsafeRawBufferPointer) -> Void) throws(Failure) {
        guard let base = input.baseAddress else { return }
        var offset = 0
        while true {
            var used = 0, made = 0
            let rc = porter_inflater_run(inflater, base + offset, input.count - offset, &used, slice, Self.sliceSize, &made)
            offset += used
            consumed += Int64(used)
            if made > 0 {
                produced += Int64(made)
                if let maximumRatio, produced > 1 << 20, Double(produced) > maximumRatio * Double(max(consumed, 1)) {
                    throw .ratio(maximumRatio)
                }
                emit(UnsafeRawBufferPointer(start: slice, count: made))
            }
            if rc < 0 { throw .damaged }
            if rc == 1 {
                isFinished = true
                return
            }
            // No progress: the input is used up and the output slice was not filled.
            if offset >= input.count && made < Self.sliceSize { return }
            if used == 0 && made == 0 { return }
        }
    }
}
