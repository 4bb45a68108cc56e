import CPorterPlugin
import PorterPluginKit
import Foundation
import HTTPTypes
import Logging
import PorterCore

/// The one `porter_host` table every plugin gets: C functions that forward to the
/// `PluginLoad` behind a `porter_client *`. It lives for the process.
enum PluginHost {
    nonisolated(unsafe) static let table: UnsafePointer<porter_host> = {
        let t = UnsafeMutablePointer<porter_host>.allocate(capacity: 1)
        var h = porter_host()
        h.struct_size = UInt32(MemoryLayout<porter_host>.size)
        h.abi_major = UInt16(PORTER_PLUGIN_ABI_MAJOR)
        h.abi_minor = UInt16(PORTER_PLUGIN_ABI_MINOR)
        h.host_version = UnsafePointer(strdup(porterVersion)!)
        h.did_receive_response = { client, response in
            guard let load = PluginLoad.from(client) else { return }
            guard let response else {
                load.didFail(PorterError(.protocolViolation, "plugin \(load.pluginName) reported a NULL response",
                                         url: load.request.url))
                return
            }
            load.didReceiveResponse(PluginHost.response(response, load: load))
        }
        h.did_load_data = { client, bytes, length in
            guard let load = PluginLoad.from(client), length > 0 else { return }
            guard let bytes else {
                load.didFail(PorterError(.protocolViolation, "plugin \(load.pluginName) reported NULL data",
                                         url: load.request.url))
                return
            }
            load.didLoad(bytes: UnsafeRawBufferPointer(start: bytes, count: length))
        }
        h.was_redirected = { client, newURL, response in
            guard let load = PluginLoad.from(client) else { return }
            guard let newURL, let text = String(validatingCString: newURL),
                  let url = URL(string: text, relativeTo: load.request.url)?.absoluteURL, url.scheme != nil else {
                load.didFail(PorterError(.badServerResponse, "plugin \(load.pluginName) redirected to an invalid URL",
                                         url: load.request.url))
                return
            }
            var next = load.request
            next.url = url
            let head = response.map { PluginHost.response($0, load: load) }
                ?? Response(url: load.request.url, mimeType: nil, expectedContentLength: -1)
            load.wasRedirected(to: next, response: head)
        }
        h.did_finish = { client in PluginLoad.from(client)?.didFinish() }
        h.did_fail = { client, code, message, domain, causeCode in
            guard let load = PluginLoad.from(client) else { return }
            let text = message.flatMap { String(validatingCString: $0) } ?? "plugin \(load.pluginName) failed"
            let errorCode = PorterError.Code(rawValue: Int(code)) ?? .unknown
            var error = PorterError(errorCode, text, url: load.request.url)
            if let domain, let d = String(validatingCString: domain) {
                error.cause = PorterError.Cause(domain: d, code: Int(causeCode), message: text)
            }
            load.didFail(error)
        }
        h.did_send_body_data = { client, sent, total, expected in
            PluginLoad.from(client)?.didSend(sent, total, expected)
        }
        h.challenge = { client, challenge, reply, context in
            guard let load = PluginLoad.from(client), let challenge, let reply else { return 0 }
            return PluginHost.raise(challenge.pointee, load: load, reply: reply, context: context)
        }
        h.cancel_challenge = { client, id in PluginLoad.from(client)?.cancelChallenge(id) }
        h.read_body = { client, buffer, capacity in
            guard let load = PluginLoad.from(client), let buffer, capacity > 0 else { return -1 }
            return load.readBody(into: UnsafeMutableRawBufferPointer(start: buffer, count: capacity))
        }
        h.log = { client, level, message in
            guard let message, let text = String(validatingCString: message) else { return }
            let logger = PluginLoad.from(client)?.logger ?? PluginHost.logger
            let lvl: Logger.Level
            switch level {
            case ..<1: lvl = .trace
            case 1: lvl = .debug
            case 2: lvl = .info
            case 3: lvl = .warning
            default: lvl = .error
            }
            let prefix = PluginLoad.from(client).map { "plugin \($0.pluginName): " } ?? "plugin: "
            logger.log(level: lvl, "\(prefix)\(text)")
        }
        h.subscribe = { name, signature, function, userData, error, capacity in
            let result = PluginEvents.shared.subscribe(
                name: name.flatMap { String(validatingCString: $0) },
                signature: signature.flatMap { String(validatingCString: $0) },
                function: function, userData: userData)
            if case .failure(let reason) = result {
                CErrorBuffer.write(reason.message, to: error, capacity: capacity)
                return -1
            }
            return 0
        }
        h.cached_response_is_valid = { client, revalidated in
            PluginLoad.from(client)?.cachedResponseIsValid(revalidated: revalidated != 0)
        }
        h.connect_service = { client, service, code, error, capacity in
            let result = PluginLoad.from(client).map { $0.service(service) }
                ?? .failure(PorterError(.cancelled, "connect_service: no live load behind this client"))
            switch result {
            case .success(let fd): return fd
            case .failure(let e):
                code?.pointee = Int32(e.code.rawValue)
                CErrorBuffer.write(e.message, to: error, capacity: capacity)
                return -1
            }
        }
        t.initialize(to: h)
        return UnsafePointer(t)
    }()

    static let logger = Logger(label: "porter.plugins")

    static func string(_ p: UnsafePointer<CChar>?) -> String? {
        p.flatMap { String(validatingCString: $0) }
    }

    /// A plugin's response head as a `Response`; bad header fields are skipped.
    static func response(_ r: UnsafePointer<porter_response>, load: PluginLoad) -> Response {
        let v = r.pointee
        let url = string(v.url).flatMap { URL(string: $0) } ?? load.request.url
        var fields = HTTPFields()
        if let headers = v.headers, v.header_count > 0, v.header_count < 10_000 {
            for i in 0..<v.header_count {
                guard let n = string(headers[i].name), let name = HTTPField.Name(n),
                      let value = string(headers[i].value) else { continue }
                fields.append(HTTPField(name: name, value: value))
            }
        }
        var response = Response(url: url, mimeType: string(v.mime_type) ?? "application/octet-stream",
                                expectedContentLength: v.expected_length >= 0 ? v.expected_length : -1,
                                textEncodingName: string(v.text_encoding),
                                statusCode: v.status_code >= 0 ? Int(v.status_code) : nil,
                                headerFields: fields)
        response.resumeOffset = v.resume_offset >= 0 ? v.resume_offset : nil
        response.validator = string(v.validator)
        return response
    }

    /// A plugin's `challenge` call: its space is built by `PluginChallengeRequest` from
    /// the load's URL; the plugin's host, port and scheme are not read.
    static func raise(_ c: porter_challenge, load: PluginLoad, reply: porter_challenge_reply_fn,
                      context: UnsafeMutableRawPointer?) -> UInt64 {
        let method = PluginChallengeRequest.method(code: c.method, name: string(c.method_name))
        var trust: ServerTrust?
        if method == .serverTrust {
            var chain: [Data] = []
            if let identity = c.identity, let lengths = c.identity_lengths, c.identity_count < 64 {
                for i in 0..<c.identity_count {
                    if let blob = identity[i] { chain.append(Data(bytes: blob, count: lengths[i])) }
                }
            }
            trust = ServerTrust(certificateChain: chain, evaluationFailure: string(c.failure_reason))
        }
        let asked = PluginChallengeRequest(realm: string(c.realm), method: method,
                                           previousFailureCount: Int(c.previous_failure_count), serverTrust: trust)
        let url = load.request.url
        let configuration = load.client.context.configuration
        let target = UnsafeSendable((reply, context))
        return load.challenge({ answer in
            asked.challenge(loading: url, configuration: configuration, reply: answer)
        }, reply: { disposition in
            PluginHost.send(disposition, to: target.value.0, context: target.value.1)
        })
    }

    static func send(_ disposition: ChallengeDisposition, to reply: porter_challenge_reply_fn,
                     context: UnsafeMutableRawPointer?) {
        var r = porter_challenge_reply()
        r.struct_size = UInt32(MemoryLayout<porter_challenge_reply>.size)
        let strings = CStrings()
        defer { withExtendedLifetime(strings) {} }
        let dup = strings.dup
        switch disposition {
        case .useCredential(let credential):
            r.disposition = Int32(PORTER_DISPOSITION_USE_CREDENTIAL)
            switch credential.kind {
            case .password(let user, let password):
                r.user = dup(user)
                r.password = dup(password)
            case .trust:
                r.trust = 1
            case .certificate(let cert, let key, let passphrase):
                r.certificate_path = dup(cert.isEmpty ? nil : cert)
                r.key_path = dup(key)
                r.passphrase = dup(passphrase)
            }
        case .performDefaultHandling: r.disposition = Int32(PORTER_DISPOSITION_DEFAULT)
        case .cancelAuthenticationChallenge: r.disposition = Int32(PORTER_DISPOSITION_CANCEL)
        case .rejectProtectionSpace: r.disposition = Int32(PORTER_DISPOSITION_REJECT_SPACE)
        }
        withUnsafePointer(to: &r) { reply(context, $0) }
    }
}
