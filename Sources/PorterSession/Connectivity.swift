import CPorterNetlink
import Foundation
import PorterCore

/// Whether a load could leave the machine now: the shell's half of
/// `waitsForConnectivity` (the machine decides when to ask and what the answer means).
enum Connectivity {
    /// True when the kernel has a route to the load's first hop (its proxy, else its
    /// host, or the addresses an override pins it to). A name that does not resolve
    /// counts as reachable when a name server is reachable (the name is unknown, not the
    /// network down). Blocking (DNS): call it off the task's executor.
    static func hasRoute(for url: URL, configuration: SessionConfiguration) -> Bool {
        var host = url.host ?? ""
        // Any port serves a route lookup; 80 stands in for a scheme with no default.
        var port = configuration.port(of: url) ?? 80
        if let proxy = configuration.proxies.proxy(for: url), let proxyHost = proxy.host {
            host = proxyHost
            port = proxy.port ?? 1080
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return true }
        if let pinned = configuration.hostOverrides.first(where: { $0.host.caseInsensitiveCompare(host) == .orderedSame && $0.port == port }) {
            return pinned.addresses.contains { routeExists(toNumericHost: $0, port: port) != false }
        }
        if let found = routeExists(toHost: host, port: port) { return found }
        // The name did not resolve: a network down, or a name that does not exist. The
        // network counts as up when a name server can be reached; a name server on this
        // machine (systemd-resolved's 127.0.0.53, dnsmasq, Docker's 127.0.0.11) is always
        // reachable, so for one of those the question is whether anything beyond this
        // machine is: a default route.
        return nameServers().contains { server in
            isLoopback(server) ? hasDefaultRoute() : routeExists(toNumericHost: server, port: 53) == true
        }
    }

    static func isLoopback(_ address: String) -> Bool {
        address.hasPrefix("127.") || address == "::1"
    }

    /// A route to a global address exists (the kernel's lookup for a datagram socket:
    /// nothing is sent). Documentation addresses (RFC 5737, RFC 3849) stand for "anywhere".
    static func hasDefaultRoute() -> Bool {
        routeExists(toNumericHost: "192.0.2.1", port: 53) == true || routeExists(toNumericHost: "2001:db8::1", port: 53) == true
    }

    /// nil when the name does not resolve; else whether one of its addresses has a route.
    private static func routeExists(toHost host: String, port: Int, numeric: Bool = false) -> Bool? {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        if numeric { hints.ai_flags = AI_NUMERICHOST }
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &list) == 0, let list else { return nil }
        defer { freeaddrinfo(list) }
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let ai = entry {
            // connect() on a datagram socket sends nothing: the kernel only looks up a route.
            let fd = socket(ai.pointee.ai_family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if fd >= 0 {
                let ok = connect(fd, ai.pointee.ai_addr, ai.pointee.ai_addrlen) == 0
                close(fd)
                if ok { return true }
            }
            entry = ai.pointee.ai_next
        }
        return false
    }

    private static func routeExists(toNumericHost address: String, port: Int) -> Bool? {
        routeExists(toHost: address, port: port, numeric: true)
    }

    /// The name servers of /etc/resolv.conf (glibc's default, the local host, when none).
    static func nameServers(_ text: String? = try? String(contentsOfFile: "/etc/resolv.conf", encoding: .utf8)) -> [String] {
        let servers = (text ?? "").split(whereSeparator: \.isNewline).compactMap { line -> String? in
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count >= 2, words[0] == "nameserver" else { return nil }
            return String(words[1].split(separator: "%").first ?? words[1])
        }
        return servers.isEmpty ? ["127.0.0.1"] : servers
    }
}

/// The kernel's announcements of links, addresses and routes coming and going
/// (rtnetlink, no D-Bus), for tasks waiting for connectivity. One thread for the
/// process, started with the first wait; each waiter is told once. Where netlink cannot
/// be opened, waiters are told every five seconds instead, so they look again.
final class NetworkWatch: @unchecked Sendable {
    static let shared = NetworkWatch()
    private let lock = NSLock()
    private var waiters: [@Sendable () -> Void] = []
    private var started = false

    /// Calls `body` once, at the next change of the network (from the watch's thread).
    /// `body` should hold what it wakes weakly: it is kept until the network changes.
    func notifyOnce(_ body: @escaping @Sendable () -> Void) {
        lock.lock()
        waiters.append(body)
        let start = !started
        started = true
        lock.unlock()
        if start {
            let thread = Thread { self.run() }
            thread.name = "porter.network-watch"
            thread.start()
        }
    }

    private func run() {
        let fd = porter_netlink_route_watch()
        while true {
            if fd >= 0 {
                let r = porter_netlink_route_wait(fd, -1)
                if r < 0 && errno != EINTR { usleep(1_000_000) }
                guard r > 0 else { continue }
            } else {
                usleep(5_000_000)
            }
            lock.lock()
            let due = waiters
            waiters = []
            lock.unlock()
            for w in due { w() }
        }
    }
}
