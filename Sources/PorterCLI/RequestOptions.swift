import Foundation
import Porter
import PorterStorage

/// How the command line becomes a `Request`: curl's URL guessing, bodies (-d, --data-binary,
/// --data-urlencode, --json, -F, -G) and header options (-A, -e, -r, -u).
extension FetchOptions {
    /// curl's rule for a URL without "scheme://": http, or ftp for a host that starts
    /// with "ftp." ("localhost:8080/x" is a host and port, not the scheme "localhost").
    /// A "scheme:" this program has a handler for (data:, file:, a plugin's) stays as it is.
    static func guessURL(_ text: String, knownSchemes: Set<String>) -> URL? {
        // A byte search: Foundation's String.contains(String) costs ~5k instructions per URL.
        let u = Array(text.utf8)
        if u.count >= 3, (0...(u.count - 3)).contains(where: { u[$0] == 0x3A && u[$0 + 1] == 0x2F && u[$0 + 2] == 0x2F }) {
            return URL(string: text)
        }
        if let colon = text.firstIndex(of: ":"), knownSchemes.contains(text[..<colon].lowercased()) {
            return URL(string: text)
        }
        guard !text.isEmpty, !text.hasPrefix("/") else { return nil }
        let host = text.prefix { $0 != "/" && $0 != ":" && $0 != "?" }.lowercased()
        return URL(string: (host.hasPrefix("ftp.") ? "ftp://" : "http://") + text)
    }

    /// application/x-www-form-urlencoded as curl's --data-urlencode writes it.
    static func formEncode(_ text: String) -> String { formEncode(Data(text.utf8)) }

    /// curl's --data-urlencode on the bytes: every byte but ALPHA, DIGIT and "-._~"
    /// becomes %XX, a space "+" (a file's bytes as they are, valid UTF-8 or not).
    static func formEncode(_ bytes: Data) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 3)
        for b in bytes {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(b)
            case UInt8(ascii: " "):
                out.append(UInt8(ascii: "+"))
            default:
                out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of "@FILE" ("@-": stdin) or the text itself.
    static func contents(_ spec: String) throws -> Data {
        guard spec.hasPrefix("@") else { return Data(spec.utf8) }
        return try fileContents(String(spec.dropFirst()))
    }

    static func fileContents(_ path: String) throws -> Data {
        if path == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        guard let d = FileManager.default.contents(atPath: path) else {
            throw PorterError(.fileDoesNotExist, "cannot read \(path)")
        }
        return d
    }

    /// --data-urlencode's forms: "content", "=content", "name=content", "@file", "name@file".
    static func urlencodedPart(_ spec: String) throws -> String {
        if let eq = spec.firstIndex(of: "="), !spec[..<eq].contains("@") {
            let name = String(spec[..<eq])
            let value = formEncode(String(spec[spec.index(after: eq)...]))
            return name.isEmpty ? value : name + "=" + value
        }
        if let at = spec.firstIndex(of: "@") {
            let name = String(spec[..<at])
            let data = try fileContents(String(spec[spec.index(after: at)...]))
            let value = formEncode(data)
            return name.isEmpty ? value : name + "=" + value
        }
        return formEncode(spec)
    }

    /// The -d / --data-binary / --data-urlencode pieces, joined with "&" as curl does.
    func formData() throws -> Data? {
        var pieces: [Data] = []
        if let raw = dataBinary { pieces.append(try FetchOptions.contents(raw)) }
        for d in data {
            var chunk = try FetchOptions.contents(d)
            if d.hasPrefix("@") { chunk.removeAll { $0 == 0x0A || $0 == 0x0D } }
            pieces.append(chunk)
        }
        for r in curl.dataRaw { pieces.append(Data(r.utf8)) }
        for u in dataUrlencode { pieces.append(Data(try FetchOptions.urlencodedPart(u).utf8)) }
        guard !pieces.isEmpty else { return nil }
        var out = Data()
        for (i, p) in pieces.enumerated() {
            if i > 0 { out.append(UInt8(ascii: "&")) }
            out.append(p)
        }
        return out
    }

    /// -F: a multipart/form-data body (RFC 7578) and its Content-Type.
    func multipartBody() throws -> (Data, String)? {
        guard !form.isEmpty else { return nil }
        let boundary = "------------------------porter" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        var body = Data()
        func line(_ s: String) { body.append(Data((s + "\r\n").utf8)) }
        for field in form {
            guard let eq = field.firstIndex(of: "=") else { continue }
            let name = String(field[..<eq])
            var rest = String(field[field.index(after: eq)...])
            var type: String?
            var filename: String?
            if rest.hasPrefix("@") || rest.hasPrefix("<") {
                // ";type=" and ";filename=" may follow a file name.
                var parts = rest.split(separator: ";", omittingEmptySubsequences: false).map(String.init)
                rest = parts.removeFirst()
                for p in parts {
                    if p.hasPrefix("type=") { type = String(p.dropFirst(5)) }
                    if p.hasPrefix("filename=") { filename = String(p.dropFirst(9)) }
                }
            }
            line("--" + boundary)
            let quotedName = name.replacingOccurrences(of: "\"", with: "%22")
            if rest.hasPrefix("@") {
                let path = String(rest.dropFirst())
                let data = try FetchOptions.fileContents(path)
                let shown = (filename ?? PathText.lastComponent(of: path)).replacingOccurrences(of: "\"", with: "%22")
                line("Content-Disposition: form-data; name=\"\(quotedName)\"; filename=\"\(shown)\"")
                line("Content-Type: " + (type ?? MediaTypes.mimeType(forPath: path)))
                line("")
                body.append(data)
                line("")
            } else {
                let value = rest.hasPrefix("<") ? try FetchOptions.fileContents(String(rest.dropFirst())) : Data(rest.utf8)
                line("Content-Disposition: form-data; name=\"\(quotedName)\"")
                if let type { line("Content-Type: " + type) }
                line("")
                body.append(value)
                line("")
            }
        }
        line("--" + boundary + "--")
        return (body, "multipart/form-data; boundary=" + boundary)
    }

    /// Applies the body options to `request` (method, body, Content-Type), or, with -G,
    /// puts the data in the URL's query.
    func applyBody(to request: inout Request) throws {
        if let (body, type) = try multipartBody() {
            request.method = "POST"
            request.body = .data(body)
            request.setValue(type, forHeader: "Content-Type")
            return
        }
        if !json.isEmpty {
            var body = Data()
            for j in json { body.append(try FetchOptions.contents(j)) }
            request.method = "POST"
            request.body = .data(body)
            if request.value(forHeader: "Content-Type") == nil { request.setValue("application/json", forHeader: "Content-Type") }
            if request.value(forHeader: "Accept") == nil { request.setValue("application/json", forHeader: "Accept") }
            return
        }
        guard let body = try formData() else { return }
        if get {
            guard var parts = URLComponents(url: request.url, resolvingAgainstBaseURL: false) else { return }
            let query = String(decoding: body, as: UTF8.self)
            parts.percentEncodedQuery = parts.percentEncodedQuery.map { $0 + "&" + query } ?? query
            if let url = parts.url { request.url = url }
            return
        }
        request.method = "POST"
        request.body = .data(body)
        if request.value(forHeader: "Content-Type") == nil, dataBinary == nil || !data.isEmpty || !dataUrlencode.isEmpty || !curl.dataRaw.isEmpty {
            request.setValue("application/x-www-form-urlencoded", forHeader: "Content-Type")
        }
    }

    /// -A, -e, -r and -u's Basic header (sent with the first request, curl's default;
    /// --digest, --ntlm, --negotiate and --anyauth wait for the challenge). For other schemes, -u goes into
    /// the URL's user information, so an ftp login uses it at once.
    func applyHeaders(to request: inout Request, credential: Credential?) {
        if let a = userAgent { request.setValue(a, forHeader: "User-Agent") }
        if let e = referer { request.setValue(e, forHeader: "Referer") }
        if let r = range { request.setValue("bytes=" + r, forHeader: "Range") }
        let scheme = request.url.scheme?.lowercased() ?? ""
        if scheme == "http" || scheme == "https" {
            if let token = curl.oauth2Bearer, request.value(forHeader: "Authorization") == nil {
                request.setValue("Bearer " + token, forHeader: "Authorization")
            }
            // --etag-compare FILE: If-None-Match with the saved ETag (a missing or empty
            // file sends none, as curl).
            if let path = curl.etagCompare, let text = try? String(contentsOfFile: path, encoding: .utf8) {
                let tag = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
                if !tag.isEmpty { request.setValue(tag, forHeader: "If-None-Match") }
            }
            if let cond = curl.timeCond, let (date, modifiedSince) = CurlFlags.timeCondition(cond) {
                request.setValue(CurlFlags.httpDate(date), forHeader: modifiedSince ? "If-Modified-Since" : "If-Unmodified-Since")
            }
        }
        guard let credential, let user = credential.user, let password = credential.password else { return }
        if scheme == "http" || scheme == "https" {
            if curl.oauth2Bearer != nil { return }
            if serverAuthMethods == [.httpBasic], request.value(forHeader: "Authorization") == nil {
                request.setBasicAuthorization(user: user, password: password)
            }
        } else if request.url.user == nil, var parts = URLComponents(url: request.url, resolvingAgainstBaseURL: false) {
            parts.user = user
            parts.password = password
            if let url = parts.url { request.url = url }
        }
    }
}


/// HTTP state and content codings as curl has them: no HSTS and no alt-svc cache unless
/// `--hsts FILE` / `--alt-svc FILE`; a request that sets its own Accept-Encoding (-H)
/// gets the body as the server sent it, unless `--compressed` asks for decoding.
extension FetchOptions {
    /// The run's HSTS store: `--hsts FILE` (curl's format, read now, written through as
    /// it changes), `--hsts ''` (memory), or none.
    func openHSTSStore() throws -> HSTSStore? {
        guard let hsts else { return nil }
        return hsts.isEmpty ? HSTSStore() : try HSTSStore(path: hsts, requirePrivate: false)
    }

    func applyHTTPState(to config: inout SessionConfiguration, hsts store: HSTSStore?) throws {
        config.hstsStore = store
        config.altSvcCache = try altSvc.flatMap { $0.isEmpty ? nil : try AltSvcCache(path: $0, requirePrivate: false) }
        let ownAcceptEncoding = header.contains { h in
            guard let o = HeaderOption(h), o.name.lowercased() == "accept-encoding", case .add = o.action else { return false }
            return true
        }
        if ownAcceptEncoding && !compressed { config.decodesContentEncoding = false }
    }
}
