// The Swift plugin of the README, verbatim: built as libEchoPlugin.so and loaded by a test.
import PorterPluginKit

final class EchoLoad: PluginLoadHandler, @unchecked Sendable {
    let request: PluginRequest, client: PluginClient
    init(request: PluginRequest, client: PluginClient) { self.request = request; self.client = client }
    func start() {   // return promptly: real plugins do their I/O on a thread of their own
        let body = Array(request.url.utf8)
        client.receive(PluginResponse(mimeType: "text/plain", expectedLength: Int64(body.count)))
        client.load(body)
        client.finish()
    }
    func stop() {}
    func waitUntilDone() {}
}

let echo = PluginDefinition(name: "echo", version: "1.0",
                            schemes: [PluginSchemeDefinition("echo", flags: 0)]) { request, client in
    EchoLoad(request: request, client: client)
}

@_cdecl("porter_plugin_entry")
public func porter_plugin_entry(_ host: UnsafePointer<porter_host>?,
                                _ out: UnsafeMutablePointer<UnsafePointer<porter_plugin_descriptor>?>?,
                                _ error: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int32 {
    PluginKit.export(echo, host: host, descriptor: out, error: error, capacity: capacity)
}
