import Foundation

// The values of a session's network settings: TLS versions, proxies, pinned names.

/// TLS protocol versions for `SessionConfiguration.tlsMinimumVersion` / `tlsMaximumVersion`.
public enum TLSVersion: Int, Sendable, Comparable {
    case tls1_0 = 10, tls1_1 = 11, tls1_2 = 12, tls1_3 = 13
    public static func < (a: TLSVersion, b: TLSVersion) -> Bool { a.rawValue < b.rawValue }
}

/// Proxies for a session. By default read from the usual environment variables.
public struct ProxyConfiguration: Sendable, Equatable {
    public var httpProxy: URL?
    public var httpsProxy: URL?
    /// Used for any scheme without its own entry (curl's `all_proxy`).
    public var allProxy: URL?
    /// Host names (and `.domain` suffixes) that bypass proxies; "*" bypasses all.
    public var noProxy: [String]

    public init(httpProxy: URL? = nil, httpsProxy: URL? = nil, allProxy: URL? = nil, noProxy: [String] = []) {
        self.httpProxy = httpProxy
        self.httpsProxy = httpsProxy
        self.allProxy = allProxy
        self.noProxy = noProxy
    }

    public static let none = ProxyConfiguration()

    /// `http_proxy`, `https_proxy`, `all_proxy`, `no_proxy`, lower case first, then upper
    /// case (curl reads `http_proxy` in lower case only, as upper case is settable by a
    /// CGI client through the `Proxy:` header).
    public static func fromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment) -> ProxyConfiguration {
        func value(_ name: String, upperToo: Bool = true) -> URL? {
            let raw = env[name] ?? (upperToo ? env[name.uppercased()] : nil)
            guard let raw, !raw.trimmingCharacters(in: .whitespaces).isEmpty else { return nil }
            let text = raw.contains("://") ? raw : "http://" + raw
            return URL(string: text)
        }
        let no = (env["no_proxy"] ?? env["NO_PROXY"] ?? "")
            .split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
        return ProxyConfiguration(httpProxy: value("http_proxy", upperToo: false), httpsProxy: value("https_proxy"),
                                  allProxy: value("all_proxy"), noProxy: no)
    }

    /// The proxy to use for `url`, or nil to connect directly.
    public func proxy(for url: URL) -> URL? {
        // No proxy at all (the usual case, asked once per load): nothing to look up.
        if httpProxy == nil && httpsProxy == nil && allProxy == nil { return nil }
        guard let host = url.host?.lowercased() else { return nil }
        for entry in noProxy {
            if entry == "*" { return nil }
            let bare = entry.hasPrefix(".") ? String(entry.dropFirst()) : entry
            if host == bare || host.hasSuffix("." + bare) { return nil }
        }
        switch url.scheme?.lowercased() {
        case "http": return httpProxy ?? allProxy
        case "https": return httpsProxy ?? allProxy
        default: return allProxy
        }
    }
}

/// One pinned name: `host` on `port` connects to `addresses` (curl's `--resolve`).
public struct HostOverride: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var addresses: [String]
    public init(host: String, port: Int, addresses: [String]) {
        self.host = host
        self.port = port
        self.addresses = addresses
    }
    /// "HOST:PORT:ADDRESS[,ADDRESS]" as curl's --resolve takes it; nil when malformed.
    /// Printable ASCII only (host names go in their punycode form): a combining mark
    /// after ":" or "[" would fuse with it into one Character and change how the text
    /// splits (found by FuzzMIMEHostOverride).
    public init?(parsing text: String) {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        let parts = text.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, let port = Int(parts[1]), (1...65535).contains(port) else { return nil }
        var list = String(parts[2])
        if list.hasPrefix("[") && list.hasSuffix("]") { list = String(list.dropFirst().dropLast()) }
        let addresses = list.split(separator: ",").map { String($0).trimmingCharacters(in: CharacterSet(charactersIn: "[]")) }
        guard !addresses.isEmpty, addresses.allSatisfy({ !$0.isEmpty }) else { return nil }
        self.init(host: String(parts[0]).lowercased(), port: port, addresses: addresses)
    }
    public var description: String {
        "\(host):\(port):" + addresses.map { $0.contains(":") ? "[\($0)]" : $0 }.joined(separator: ",")
    }
}

/// A stand-in for the kernel's routing table, for tests: what `waitsForConnectivity`
/// asks before waiting, and the signal that ends the wait (PorterTesting's
/// `NetworkConditions` implements it).
package protocol RouteOverride: Sendable {
    /// Whether `url`'s host can be reached now; nil: ask the kernel.
    func hasRoute(to url: URL) -> Bool?
    /// Calls `body` once, the next time the answer may have changed.
    func notifyOnChange(_ body: @escaping @Sendable () -> Void)
}
