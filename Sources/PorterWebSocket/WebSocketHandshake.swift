import Foundation
import PorterCore
import PorterSession

/// The opening handshake (RFC 6455 §4.1): the request a client sends, and the checks of
/// the server's answer.
enum WebSocketHandshake {
    static let acceptSuffix = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// Sec-WebSocket-Accept for a key.
    static func accept(forKey key: String) -> String {
        Data(SHA1.hash(Array((key + acceptSuffix).utf8))).base64EncodedString()
    }

    /// The server's answer head, parsed: the status, the fields in order.
    struct Head: Sendable {
        var status: Int
        var reason: String
        var fields: [(name: String, value: String)]
        func values(_ name: String) -> [String] {
            fields.filter { $0.name.caseInsensitiveCompare(name) == .orderedSame }.map(\.value)
        }
    }

    /// Parses a response head (without its final empty line). Throws on anything that
    /// is not HTTP/1.1 with a three-digit status and name: value fields.
    static func parseHead(_ bytes: [UInt8]) throws(WebSocketProtocolError) -> Head {
        guard let text = String(validating: bytes, as: UTF8.self) ?? String(bytes: bytes, encoding: .isoLatin1) else {
            throw WebSocketProtocolError(code: .protocolError, message: "the handshake answer is not text")
        }
        var lines = text.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst()
        let parts = statusLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1].count == 3, let status = Int(parts[1]) else {
            throw WebSocketProtocolError(code: .protocolError, message: "the handshake answer has no HTTP status line")
        }
        var fields: [(String, String)] = []
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex,
                  !line[..<colon].contains(where: { $0 == " " || $0 == "\t" }) else {
                throw WebSocketProtocolError(code: .protocolError, message: "the handshake answer has a malformed field")
            }
            fields.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        return Head(status: status, reason: parts.count > 2 ? String(parts[2]) : "", fields: fields)
    }

    /// Checks a 101 answer against the request: the upgrade, the accept value, a
    /// subprotocol among those offered, and an extension only as offered. Returns the
    /// agreed subprotocol and compression.
    static func validate(_ head: Head, key: String, offered: [String],
                         deflate: PerMessageDeflate?) throws(WebSocketProtocolError) -> (String?, PerMessageDeflate?) {
        guard head.values("Upgrade").contains(where: { $0.caseInsensitiveCompare("websocket") == .orderedSame }) else {
            throw WebSocketProtocolError(code: .protocolError, message: "the server's answer has no 'Upgrade: websocket'")
        }
        let connection = head.values("Connection").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard connection.contains("upgrade") else {
            throw WebSocketProtocolError(code: .protocolError, message: "the server's answer has no 'Connection: Upgrade'")
        }
        guard head.values("Sec-WebSocket-Accept") == [accept(forKey: key)] else {
            throw WebSocketProtocolError(code: .protocolError, message: "the server's Sec-WebSocket-Accept does not answer our key")
        }
        let compression = try PerMessageDeflate.agreed(head.values("Sec-WebSocket-Extensions"), offered: deflate)
        let chosen = head.values("Sec-WebSocket-Protocol")
        guard let first = chosen.first else { return (nil, compression) }
        guard chosen.count == 1, offered.contains(first) else {
            throw WebSocketProtocolError(code: .protocolError, message: "the server chose the subprotocol '\(first)', which was not offered")
        }
        return (first, compression)
    }

    /// The items of a header list split at `separator`, trimmed (no quoted separators
    /// occur in the extension grammar RFC 7692 uses).
    static func splitList(_ value: String, by separator: Character) -> [String] {
        value.split(separator: separator, omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
    }
}

