import Foundation
import PorterCore
import HTTPTypes

/// The cache step of a load, as a pure function of the request's cache policy and what
/// the cache had (URLRequest.CachePolicy's meanings).
package enum CacheStep {
    package struct Lookup: Sendable {
        /// The request's policy with `.useProtocolCachePolicy` resolved to the session's.
        package var policy: CachePolicy
        /// A stored response the handler calls cache-equivalent; nil without a cache.
        package var hit: CachedResponse?
        /// The head the handler would serve `hit` with as it is, asked before making one
        /// (`ProtocolHandlerFactory.freshAnswer`): a fresh hit then needs no handler.
        package var served: Response?
        package init(policy: CachePolicy, hit: CachedResponse?, served: Response? = nil) {
            self.policy = policy
            self.hit = hit
            self.served = served
        }
    }

    package enum Decision {
        /// Answer from the cache without a handler (with `served` as its head, when the
        /// handler named one).
        case serve(CachedResponse, served: Response?)
        /// Start a handler, handing it `candidate` to revalidate or serve.
        case load(candidate: CachedResponse?)
        case fail(PorterError.Code, String)
    }

    package static func decide(_ lookup: Lookup) -> Decision {
        switch lookup.policy {
        case .reloadIgnoringLocalCacheData:
            return .load(candidate: nil)
        case .returnCacheDataElseLoad:
            if let hit = lookup.hit { return .serve(hit, served: nil) }
            return .load(candidate: nil)
        case .returnCacheDataDontLoad:
            if let hit = lookup.hit { return .serve(hit, served: nil) }
            return .fail(.resourceUnavailable, "no cached response and the cache policy forbids loading")
        case .useProtocolCachePolicy, .reloadRevalidatingCacheData:
            if let hit = lookup.hit, let served = lookup.served { return .serve(hit, served: served) }
            return .load(candidate: lookup.hit)
        }
    }
}

/// An optional value kept out of line, in an immutable box: the machine is copied (the
/// exhaustive test branches it, and reads through the driver's stored property may copy
/// it), and payloads set only now and then need not make every copy hundreds of bytes
/// longer. Value semantics hold: a box is never changed, only replaced.
@propertyWrapper
package struct OutOfLine<Value: Sendable>: Sendable {
    private final class Box: Sendable {
        let value: Value
        package init(_ value: Value) { self.value = value }
    }
    private var box: Box?

    package init(wrappedValue: Value?) { box = wrappedValue.map(Box.init) }

    package var wrappedValue: Value? {
        get { box?.value }
        set { box = newValue.map(Box.init) }
    }
}
