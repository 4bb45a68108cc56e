import PorterPluginKit
import PorterSFTP

/// The one exported function of libPorterSFTPPlugin.so (porter_plugin.h). Applications
/// that link PorterSFTP in register `SFTPPlugin.entry` instead, so two linked
/// plugins never clash on this name.
@_cdecl("porter_plugin_entry")
public func porter_plugin_entry(_ host: UnsafePointer<porter_host>?,
                                _ descriptor: UnsafeMutablePointer<UnsafePointer<porter_plugin_descriptor>?>?,
                                _ error: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int32 {
    porter_sftp_plugin_entry(host, descriptor, error, capacity)
}
