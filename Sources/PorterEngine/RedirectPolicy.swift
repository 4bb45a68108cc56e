import Foundation
import PorterCore
import HTTPTypes

/// Which redirects a task follows, as pure functions.
package struct RedirectPolicy: Sendable {
    package var maximumRedirects: Int
    /// Schemes a redirect may lead to when it changes scheme.
    package var allowedSchemes: Set<String>
    /// Whether the handler for a request agrees to be a redirect target (a plugin
    /// without the flag does not); asked only for a scheme change the session allows.
    package var targetAccepts: @Sendable (Request) -> Bool

    package init(maximumRedirects: Int, allowedSchemes: Set<String>,
         targetAccepts: @escaping @Sendable (Request) -> Bool = { _ in true }) {
        self.maximumRedirects = maximumRedirects
        self.allowedSchemes = allowedSchemes
        self.targetAccepts = targetAccepts
    }

    /// Same scheme: yes. Another scheme: only one the session allows and whose handler
    /// accepts redirects.
    package func allows(from old: Request, to new: Request) -> Bool {
        let scheme = new.scheme
        if scheme == old.scheme { return true }
        return allowedSchemes.contains(scheme) && targetAccepts(new)
    }

    package static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        a.scheme?.lowercased() == b.scheme?.lowercased() && a.host?.lowercased() == b.host?.lowercased() && a.port == b.port
    }

    /// Drops `Authorization`, `Cookie` and `Proxy-Authorization` when the redirect
    /// leaves the origin, so credentials never travel to another host; keeps the main
    /// document URL.
    package static func prepare(_ proposed: Request, from current: Request) -> Request {
        var next = proposed
        if !sameOrigin(current.url, next.url) {
            next.headerFields[.authorization] = nil
            next.headerFields[.cookie] = nil
            next.headerFields[.proxyAuthorization] = nil
        }
        if next.mainDocumentURL == nil { next.mainDocumentURL = current.mainDocumentURL }
        return next
    }
}
