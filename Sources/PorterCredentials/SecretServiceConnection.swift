import CPorterSecret
import Foundation
import PorterCore

/// One connection to the Secret Service (org.freedesktop.secrets) on a D-Bus bus named
/// by its address, through libsecret (the C side is CPorterSecret, which opens
/// libsecret-1.so.0 with dlopen on the first `open`). Every call is
/// bounded by `timeout` and never prompts. Calls are serialised here: the C side is not
/// for concurrent use.
final class SecretServiceConnection: @unchecked Sendable {
    /// Why a connection could not be made, or a call failed.
    struct Failure: Error, CustomStringConvertible {
        enum Kind: Sendable { case noBus, noService, timedOut, locked, failed, noLibrary }
        var kind: Kind
        var message: String
        var description: String { message }

        init(kind: Kind, message: String) {
            self.kind = kind
            self.message = message
        }

        init(_ status: porter_secret_status, _ text: UnsafeMutablePointer<CChar>?) {
            switch status {
            case PORTER_SECRET_NO_BUS: kind = .noBus
            case PORTER_SECRET_NO_SERVICE: kind = .noService
            case PORTER_SECRET_TIMED_OUT: kind = .timedOut
            case PORTER_SECRET_LOCKED: kind = .locked
            case PORTER_SECRET_NO_LIBRARY: kind = .noLibrary
            default: kind = .failed
            }
            message = text.map { String(cString: $0) } ?? "the secret service failed (status \(status.rawValue))"
            porter_secret_free_message(text)
        }

        /// As a Porter error: a store that cannot be used (or a timeout).
        var porterError: PorterError {
            PorterError(kind == .timedOut ? .timedOut : .storeUnusable, message,
                        cause: PorterError.Cause(domain: "secret-service", code: Int(kindCode), message: message))
        }
        private var kindCode: Int {
            switch kind {
            case .noBus: return 1
            case .noService: return 2
            case .timedOut: return 3
            case .locked: return 4
            case .failed: return 5
            case .noLibrary: return 6
            }
        }
    }

    /// An item of Porter's schema: its attributes and (unless locked) its secret bytes.
    struct Item {
        var attributes: [String: String]
        var secret: [UInt8]?
        var isLocked: Bool
    }

    enum CollectionState { case unlocked, locked, missing }

    /// The `xdg:schema` of Porter's items.
    static var schemaName: String { String(cString: porter_secret_schema_name()) }

    let busAddress: String
    let timeout: Duration
    private let handle: OpaquePointer
    private let lock = NSLock()

    private init(handle: OpaquePointer, busAddress: String, timeout: Duration) {
        self.handle = handle
        self.busAddress = busAddress
        self.timeout = timeout
    }

    deinit { porter_secret_close(handle) }

    private func serialized<R>(_ body: () throws(Failure) -> R) throws(Failure) -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// Connects to the bus at `busAddress` and opens a session with its secret service.
    static func open(busAddress: String, timeout: Duration) -> Result<SecretServiceConnection, Failure> {
        guard !busAddress.contains("\0") else { return .failure(Failure(kind: .noBus, message: "a bus address with a NUL byte")) }
        var handle: OpaquePointer?
        var message: UnsafeMutablePointer<CChar>?
        let status = porter_secret_open(busAddress, milliseconds(timeout), &handle, &message)
        guard status == PORTER_SECRET_OK, let handle else { return .failure(Failure(status, message)) }
        porter_secret_free_message(message)
        return .success(SecretServiceConnection(handle: handle, busAddress: busAddress, timeout: timeout))
    }

    static func milliseconds(_ d: Duration) -> UInt32 {
        let (seconds, attoseconds) = d.components
        let ms = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        return UInt32(clamping: max(1, ms))
    }

    func defaultCollection() throws(Failure) -> CollectionState {
        try serialized { () throws(Failure) -> CollectionState in
            var state = PORTER_SECRET_COLLECTION_MISSING
            var message: UnsafeMutablePointer<CChar>?
            let status = porter_secret_default_collection(handle, &state, &message)
            guard status == PORTER_SECRET_OK else { throw Failure(status, message) }
            switch state {
            case PORTER_SECRET_COLLECTION_UNLOCKED: return .unlocked
            case PORTER_SECRET_COLLECTION_LOCKED: return .locked
            default: return .missing
            }
        }
    }

    func search(_ attributes: [String: String], loadSecrets: Bool) throws(Failure) -> [Item] {
        try serialized { () throws(Failure) -> [Item] in
            var items: UnsafeMutablePointer<porter_secret_item>?
            var count = 0
            var message: UnsafeMutablePointer<CChar>?
            let status = withCStrings(attributes) { names, values, n in
                porter_secret_search(handle, names, values, n, loadSecrets ? 1 : 0, &items, &count, &message)
            }
            guard status == PORTER_SECRET_OK else { throw Failure(status, message) }
            defer { porter_secret_items_free(items, count) }
            guard let items else { return [] }
            return (0..<count).map { i in
                let raw = items[i]
                var attributes: [String: String] = [:]
                for j in 0..<raw.attribute_count {
                    guard let name = raw.names?[j], let value = raw.values?[j] else { continue }
                    attributes[String(cString: name)] = String(cString: value)
                }
                let secret = raw.secret.map { pointer in
                    Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self),
                                              count: raw.secret_length))
                }
                return Item(attributes: attributes, secret: secret, isLocked: raw.locked != 0)
            }
        }
    }

    func store(_ attributes: [String: String], label: String, secret: String) throws(Failure) {
        try serialized { () throws(Failure) in
            var message: UnsafeMutablePointer<CChar>?
            // NUL-terminated, so an empty password still has an address; wiped after.
            var bytes = Array(secret.utf8).map { CChar(bitPattern: $0) } + [0]
            defer { for i in bytes.indices { bytes[i] = 0 } }
            let length = bytes.count - 1
            let status = withCStrings(attributes) { names, values, n in
                bytes.withUnsafeBufferPointer { b in
                    porter_secret_store(handle, names, values, n, label, b.baseAddress, length, &message)
                }
            }
            guard status == PORTER_SECRET_OK else { throw Failure(status, message) }
        }
    }

    /// Deletes the items matching `attributes` that carry none of `absent`.
    @discardableResult
    func delete(_ attributes: [String: String], absent: [String] = []) throws(Failure) -> Int {
        try serialized { () throws(Failure) -> Int in
            var message: UnsafeMutablePointer<CChar>?
            var deleted = 0
            let status = withCStrings(attributes) { names, values, n in
                withCStrings(absent) { absentNames, m in
                    porter_secret_delete(handle, names, values, n, absentNames, m, &deleted, &message)
                }
            }
            guard status == PORTER_SECRET_OK else { throw Failure(status, message) }
            return deleted
        }
    }

    /// Sets attribute `name` to `value` on the items matching as for `delete`.
    func update(_ attributes: [String: String], absent: [String] = [], set name: String, to value: String) throws(Failure) {
        try serialized { () throws(Failure) in
            var message: UnsafeMutablePointer<CChar>?
            let status = withCStrings(attributes) { names, values, n in
                withCStrings(absent) { absentNames, m in
                    porter_secret_update(handle, names, values, n, absentNames, m, name, value, &message)
                }
            }
            guard status == PORTER_SECRET_OK else { throw Failure(status, message) }
        }
    }
}

/// `strings` as a C array of C strings for the length of `body`.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>?, Int) -> R) -> R {
    let copies = strings.map { UnsafePointer(strdup($0)) }
    defer { copies.forEach { free(UnsafeMutablePointer(mutating: $0)) } }
    return copies.withUnsafeBufferPointer { body($0.baseAddress, strings.count) }
}

/// The names and values of `attributes` as two parallel C arrays.
private func withCStrings<R>(_ attributes: [String: String],
                             _ body: (UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<UnsafePointer<CChar>?>?, Int) -> R) -> R {
    let pairs = attributes.sorted { $0.key < $1.key }
    return withCStrings(pairs.map(\.key)) { names, n in
        withCStrings(pairs.map(\.value)) { values, _ in body(names, values, n) }
    }
}
