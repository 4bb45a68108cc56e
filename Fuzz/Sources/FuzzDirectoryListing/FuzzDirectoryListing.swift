// Directory listings: Porter's own format (Sources/PorterCore/DirectoryListing.swift):
// parse, and for what parses, serialize and parse again: the names must come back
// unchanged; and an FTP server's MLSD lines, which the ftp: handler turns into that
// format (FTPHandler.listing(fromMLSD:) in Sources/PorterFTP/FTPHandler.swift).
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials
@testable import PorterFTP

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = Data(UnsafeBufferPointer(start: data, count: size))
    let mlsd = FTPHandler.listing(fromMLSD: input)
    guard let fromMLSD = try? DirectoryListing.parse(mlsd.serialized()),
          fromMLSD.entries.map(\.name) == mlsd.entries.map(\.name) else {
        fatalError("the listing made from MLSD lines does not parse back to the same names")
    }
    guard let listing = try? DirectoryListing.parse(input) else { return 0 }
    let again: DirectoryListing
    do {
        again = try DirectoryListing.parse(listing.serialized())
    } catch {
        fatalError("a serialized listing does not parse: \(error)")
    }
    guard again.entries.map(\.name) == listing.entries.map(\.name),
          again.entries.map(\.kind) == listing.entries.map(\.kind),
          again.entries.map(\.size) == listing.entries.map(\.size) else {
        fatalError("a listing changed through serialize and parse")
    }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzDirectoryListing_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
