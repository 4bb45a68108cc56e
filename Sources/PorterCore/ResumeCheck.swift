import Foundation
import HTTPTypes

/// The one rule for whether a response continues a partial file: the in-process download
/// task and porterd both ask it (porterd once appended a 206 of another version).
public enum ResumeCheck {
    public enum Verdict: Equatable, Sendable {
        /// The body continues the partial file at the offset asked.
        case append
        /// The whole resource comes again (the server ignored the range, or nothing was
        /// asked): the partial file starts over from this body.
        case startOver
        /// The body is a part of something else: another range than the one asked, or a
        /// resource that changed since the partial file was written (its validator or its
        /// total length differs). Its bytes must not be appended; the shell starts over
        /// without a range or fails with `resumeFailed`, keeping the partial file.
        case mismatch(String)
    }

    /// `asked`: the range the request carried (nil when none). `knownTotal`: the resource's
    /// whole length as the partial file's first response gave it (-1 when unknown).
    public static func verdict(asked: ResumeRange?, knownTotal: Int64, response: Response) -> Verdict {
        guard let offset = response.resumeOffset else { return .startOver }
        guard let asked else {
            // A part nobody asked for: only one from byte 0 is the resource itself.
            return offset == 0 ? .startOver : .mismatch("the server sent a part from byte \(offset) that was not asked for")
        }
        guard offset == asked.offset else {
            return .mismatch("the server resumed at byte \(offset), not at byte \(asked.offset) as asked")
        }
        if let sent = asked.validator, let now = response.validator, sent != now {
            return .mismatch("the resource changed since the partial file was written (validator \(now), not \(sent))")
        }
        if knownTotal >= 0, let total = total(of: response), total != knownTotal {
            return .mismatch("the resource changed since the partial file was written (\(total) bytes long, not \(knownTotal))")
        }
        return .append
    }

    /// The whole length a part says the resource has: the `/N` of an HTTP Content-Range,
    /// else offset plus length for handlers that report only those; nil when unknown.
    public static func total(of response: Response) -> Int64? {
        guard let offset = response.resumeOffset else { return nil }
        if let range = response.headerFields[.contentRange] {
            guard let slash = range.lastIndex(of: "/") else { return nil }
            let text = range[range.index(after: slash)...].trimmingCharacters(in: .whitespaces)
            return text == "*" ? nil : Int64(text).flatMap { $0 >= 0 ? $0 : nil }
        }
        guard response.expectedContentLength >= 0 else { return nil }
        let sum = Response.total(response.expectedContentLength, plus: offset)
        return sum >= 0 ? sum : nil
    }
}
