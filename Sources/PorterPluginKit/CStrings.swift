import CPorterPlugin
import Foundation

/// C copies of Swift strings for a call across the plugin boundary, all freed when this
/// object goes: keep it alive as long as the C side may read them.
public final class CStrings {
    private var owned: [UnsafeMutablePointer<CChar>] = []
    public init() {}
    deinit { owned.forEach { free($0) } }

    /// A NUL-terminated copy of `s` (nil for nil, or when there is no memory).
    public func dup(_ s: String?) -> UnsafePointer<CChar>? {
        guard let s, let p = strdup(s) else { return nil }
        owned.append(p)
        return UnsafePointer(p)
    }
}

/// The `char *error, size_t error_capacity` buffers of porter_plugin.h.
public enum CErrorBuffer {
    /// Writes `message`, truncated to fit, NUL terminated.
    public static func write(_ message: String, to buffer: UnsafeMutablePointer<CChar>?, capacity: Int) {
        guard let buffer, capacity > 0 else { return }
        let bytes = Array(message.utf8.prefix(capacity - 1))
        for (i, b) in bytes.enumerated() { buffer[i] = CChar(bitPattern: b) }
        buffer[bytes.count] = 0
    }

    /// The text up to the first NUL (invalid UTF-8 repaired).
    public static func read(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
