/// A file descriptor a caller asks a handler to write the response body into itself, set
/// as the request property `BodyDestination.property`. A handler that honours it (the
/// file handler, for a whole regular file) copies there in the kernel (`FileCopy`) and
/// hands the task no body data: the bytes it wrote are `written`. A handler that does
/// not honour it delivers data as usual, so the caller must handle both.
/// The caller keeps the descriptor open until the task completes, and must not write to
/// it itself meanwhile. The handler writes as the bytes come, on its own thread, and waits
/// for a descriptor that does not take them (as curl's write callback does): for the
/// libcurl handlers (http, https, ftp) that thread is their loop's, so a destination read
/// slowly also holds back the other transfers of that loop. Name one that is read as fast
/// as the body comes (a file, a terminal, a pipe to a program that keeps up).
/// The bytes go there as they come, before the delegate has answered the response: a
/// caller whose delegate may refuse the response (`.cancel`) or make the task a download
/// must not name a destination (the CLI names one only when it will take any response).
public final class BodyDestination: Sendable {
    public static let property = "porter.bodyDestination"
    public let fd: Int32
    private let count = Locked<Int64>(0)

    public init(fd: Int32) { self.fd = fd }

    /// The body bytes the handler has written to `fd`.
    public var written: Int64 { count.withLock { $0 } }
    public func add(_ bytes: Int64) { count.withLock { $0 += bytes } }
}
