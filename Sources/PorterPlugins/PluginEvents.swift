import CPorterHost
import Foundation
import PorterCore

/// Event hooks: plugins subscribe plain C functions to named task events with a
/// declared signature; each call is built with libffi (`ffi_prep_cif` once per
/// subscription, `ffi_call` per event), so no closures and no executable memory.
///
/// Events are posted on the thread that saw them (the libcurl loop, a task's executor,
/// the thread that made the task). The host never runs plugin code there: each plugin
/// (the image its hook functions live in) has a serial queue of its own, and posting an
/// event only enqueues the calls. So a slow hook delays that plugin's own later hooks and
/// nothing else, each plugin still sees events in the order they happened, and a plugin
/// that falls `HookQueue.limit` events behind misses the next ones (counted and logged)
/// instead of growing the host's memory without end.
public final class PluginEvents: @unchecked Sendable {
    public static let shared = PluginEvents()

    /// Every event a plugin can subscribe to, with its signature (porter_plugin.h).
    public static let signatures: [String: String] = [
        "task.created": "v(pQs)",
        "task.response": "v(pQsiq)",
        "task.redirected": "v(pQss)",
        "task.challenged": "v(pQssi)",
        "task.completed": "v(pQsqqi)",
    ]

    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    private struct Subscription {
        let event: String
        /// The queue of the plugin the function belongs to.
        let queue: HookQueue
        let cif: UnsafeMutablePointer<ffi_cif>
        let function: @convention(c) () -> Void
        let userData: UnsafeMutableRawPointer?
        let argumentCodes: [UInt8]
    }

    private let lock = NSLock()
    private var subscriptions: [String: [Subscription]] = [:]
    private var observing = false
    /// One queue per plugin image (keyed by its load address), for the process.
    private var queues: [UInt: HookQueue] = [:]

    /// The queue for hooks whose code lives in the same image as `function`: a plugin's
    /// shared object, or the program for a plugin linked in.
    private func queue(for function: @escaping @convention(c) () -> Void) -> HookQueue {
        let address = unsafeBitCast(function, to: UnsafeRawPointer.self)
        var path: UnsafePointer<CChar>?
        let key = UInt(bitPattern: porter_image_base(address, &path) ?? address)
        let name = path.flatMap { String(validatingCString: $0) } ?? "plugin"
        return lock.withLock {
            if let q = queues[key] { return q }
            let q = HookQueue(image: name)
            queues[key] = q
            return q
        }
    }

    /// The events some function is subscribed to (a worker tells its host, which then
    /// forwards those events to it).
    var subscribedEvents: [String] { lock.withLock { subscriptions.keys.sorted() } }

    /// Checks and records a subscription. The signature must be exactly the event's.
    func subscribe(name: String?, signature: String?, function: (@convention(c) () -> Void)?,
                   userData: UnsafeMutableRawPointer?) -> Result<Void, Refusal> {
        guard let name, !name.isEmpty else { return .failure(Refusal(message: "no event name")) }
        guard let expected = Self.signatures[name] else {
            return .failure(Refusal(message: "unknown event '\(name)' (known: \(Self.signatures.keys.sorted().joined(separator: ", ")))"))
        }
        guard let signature else { return .failure(Refusal(message: "no signature for event '\(name)'")) }
        guard signature == expected else {
            return .failure(Refusal(message: "signature '\(signature)' does not match event '\(name)', which is '\(expected)'"))
        }
        guard let function else { return .failure(Refusal(message: "NULL function for event '\(name)'")) }
        guard let (ret, args) = Self.parse(signature) else {
            return .failure(Refusal(message: "malformed signature '\(signature)'"))
        }
        // Types and the cif live for the process, as subscriptions do.
        let types = UnsafeMutablePointer<UnsafeMutablePointer<ffi_type>?>.allocate(capacity: max(1, args.count))
        for (i, code) in args.enumerated() { types[i] = porter_ffi_type(CChar(bitPattern: code)) }
        let cif = UnsafeMutablePointer<ffi_cif>.allocate(capacity: 1)
        let status = ffi_prep_cif(cif, FFI_DEFAULT_ABI, UInt32(args.count), porter_ffi_type(CChar(bitPattern: ret)), types)
        guard status == FFI_OK else {
            cif.deallocate(); types.deallocate()
            return .failure(Refusal(message: "libffi could not prepare '\(signature)' (status \(status.rawValue))"))
        }
        let sub = Subscription(event: name, queue: queue(for: function), cif: cif, function: function, userData: userData,
                               argumentCodes: args)
        let startObserving = lock.withLock { () -> Bool in
            subscriptions[name, default: []].append(sub)
            defer { observing = true }
            return !observing
        }
        if startObserving {
            TaskEventCenter.shared.addObserver { [self] event in dispatch(event) }
        }
        return .success(())
    }

    /// "v(pQs)" -> ('v', [p, Q, s]); nil when malformed or a code is unknown.
    static func parse(_ signature: String) -> (UInt8, [UInt8])? {
        let bytes = Array(signature.utf8)
        guard bytes.count >= 3, bytes[1] == UInt8(ascii: "("), bytes.last == UInt8(ascii: ")") else { return nil }
        let ret = bytes[0]
        let args = Array(bytes[2..<(bytes.count - 1)])
        let known = Set("iqQdsp".utf8)
        guard ret == UInt8(ascii: "v") || known.contains(ret), args.allSatisfy(known.contains) else { return nil }
        return (ret, args)
    }

    /// One argument of an event call.
    enum Argument: Sendable {
        case int32(Int32), int64(Int64), uint64(UInt64), string(String)
    }

    private func dispatch(_ event: TaskEvent) {
        let name: String
        let args: [Argument]
        switch event {
        case .created(let id, let url):
            name = "task.created"; args = [.uint64(id), .string(url.absoluteString)]
        case .response(let id, let url, let status, let length):
            name = "task.response"
            args = [.uint64(id), .string(url.absoluteString), .int32(Int32(clamping: status ?? -1)), .int64(length)]
        case .redirected(let id, let from, let to):
            name = "task.redirected"; args = [.uint64(id), .string(from.absoluteString), .string(to.absoluteString)]
        case .challenged(let id, let host, let method, let failures):
            name = "task.challenged"; args = [.uint64(id), .string(host), .string(method), .int32(Int32(clamping: failures))]
        case .completed(let id, let url, let received, let sent, let error):
            name = "task.completed"
            args = [.uint64(id), .string(url.absoluteString), .int64(received), .int64(sent),
                    .int32(Int32(error?.code.rawValue ?? 0))]
        }
        let subs = lock.withLock { subscriptions[name] ?? [] }
        for sub in subs {
            let call = UncheckedCall(subscription: sub, arguments: args)
            sub.queue.enqueue { PluginEvents.call(call.subscription, call.arguments) }
        }
    }

    /// A subscription's pointers cross to its plugin's queue; they live for the process.
    private struct UncheckedCall: @unchecked Sendable {
        let subscription: Subscription
        let arguments: [Argument]
    }

    /// Events delivered to no hook because its plugin was too far behind, per image.
    var droppedEvents: [String: Int] {
        lock.withLock { Dictionary(queues.values.map { ($0.image, $0.dropped) }, uniquingKeysWith: +) }
    }

    private static func call(_ sub: Subscription, _ args: [Argument]) {
        // Every argument is at most 8 bytes: one slot each, user_data first.
        let count = args.count + 1
        guard sub.argumentCodes.count == count else { return }
        let slots = UnsafeMutableRawPointer.allocate(byteCount: 8 * count, alignment: 8)
        let pointers = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: count)
        var strings: [UnsafeMutablePointer<CChar>] = []
        defer {
            strings.forEach { free($0) }
            slots.deallocate()
            pointers.deallocate()
        }
        slots.storeBytes(of: sub.userData, as: UnsafeMutableRawPointer?.self)
        pointers[0] = slots
        for (i, arg) in args.enumerated() {
            let slot = slots + 8 * (i + 1)
            switch arg {
            case .int32(let v): slot.storeBytes(of: v, as: Int32.self)
            case .int64(let v): slot.storeBytes(of: v, as: Int64.self)
            case .uint64(let v): slot.storeBytes(of: v, as: UInt64.self)
            case .string(let s):
                let p = strdup(s)
                if let p { strings.append(p) }
                slot.storeBytes(of: UnsafePointer(p), as: UnsafePointer<CChar>?.self)
            }
            pointers[i + 1] = slot
        }
        var result: UInt64 = 0
        ffi_call(sub.cif, sub.function, &result, pointers)
    }
}

/// The serial queue one plugin's hooks run on, bounded: once `limit` calls wait, later
/// ones are dropped (and counted) until the plugin catches up.
final class HookQueue: @unchecked Sendable {
    static let limit = 4096
    let image: String
    private let queue: DispatchQueue
    private let lock = NSLock()
    private var waiting = 0
    private var droppedCount = 0
    private var warned = false

    init(image: String) {
        self.image = image
        queue = DispatchQueue(label: "porter.plugin-events.\((image as NSString).lastPathComponent)")
    }

    var dropped: Int { lock.withLock { droppedCount } }

    func enqueue(_ work: @escaping @Sendable () -> Void) {
        let (accepted, warn) = lock.withLock { () -> (Bool, Bool) in
            guard waiting < Self.limit else {
                droppedCount += 1
                defer { warned = true }
                return (false, !warned)
            }
            waiting += 1
            return (true, false)
        }
        if warn {
            IsolatedPlugin.logger.warning("plugin \(image): its event hooks are \(Self.limit) events behind; later events are dropped until it catches up")
        }
        guard accepted else { return }
        queue.async { [self] in
            work()
            lock.withLock { waiting -= 1; if waiting == 0 { warned = false } }
        }
    }
}
