/// MD4 (RFC 1320), only for NTLM's NT hash: OpenSSL 3 keeps it in the legacy provider,
/// which is not loaded by default.
enum MD4 {
    static func hash(_ message: [UInt8]) -> [UInt8] {
        var bytes = message
        let bitLength = UInt64(message.count) &* 8
        bytes.append(0x80)
        while bytes.count % 64 != 56 { bytes.append(0) }
        for shift in stride(from: 0, through: 56, by: 8) { bytes.append(UInt8((bitLength >> UInt64(shift)) & 0xFF)) }
        var a0: UInt32 = 0x67452301, b0: UInt32 = 0xEFCDAB89, c0: UInt32 = 0x98BADCFE, d0: UInt32 = 0x10325476
        func rotl(_ x: UInt32, _ n: UInt32) -> UInt32 { x << n | x >> (32 - n) }
        var x = [UInt32](repeating: 0, count: 16)
        for chunk in stride(from: 0, to: bytes.count, by: 64) {
            for i in 0..<16 {
                let j = chunk + i * 4
                x[i] = UInt32(bytes[j]) | UInt32(bytes[j + 1]) << 8 | UInt32(bytes[j + 2]) << 16 | UInt32(bytes[j + 3]) << 24
            }
            var (a, b, c, d) = (a0, b0, c0, d0)
            // Round 1: F, shifts 3 7 11 19, words in order.
            for i in 0..<16 {
                let s: [UInt32] = [3, 7, 11, 19]
                let t = a &+ ((b & c) | (~b & d)) &+ x[i]
                (a, b, c, d) = (d, rotl(t, s[i % 4]), b, c)
            }
            // Round 2: G, shifts 3 5 9 13, words by column.
            for i in 0..<16 {
                let s: [UInt32] = [3, 5, 9, 13]
                let k = (i % 4) * 4 + i / 4
                let t = a &+ ((b & c) | (b & d) | (c & d)) &+ x[k] &+ 0x5A827999
                (a, b, c, d) = (d, rotl(t, s[i % 4]), b, c)
            }
            // Round 3: H, shifts 3 9 11 15, words in bit-reversed order.
            let order = [0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15]
            for i in 0..<16 {
                let s: [UInt32] = [3, 9, 11, 15]
                let t = a &+ (b ^ c ^ d) &+ x[order[i]] &+ 0x6ED9EBA1
                (a, b, c, d) = (d, rotl(t, s[i % 4]), b, c)
            }
            a0 = a0 &+ a
            b0 = b0 &+ b
            c0 = c0 &+ c
            d0 = d0 &+ d
        }
        var digest: [UInt8] = []
        for v in [a0, b0, c0, d0] {
            for shift in stride(from: UInt32(0), to: 32, by: 8) { digest.append(UInt8((v >> shift) & 0xFF)) }
        }
        return digest
    }
}
