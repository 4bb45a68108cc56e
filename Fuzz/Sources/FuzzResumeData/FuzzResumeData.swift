// Resume data (Sources/PorterCore/ResumeData.swift: ResumeData(data:), JSON an
// application stored and hands back) and the request a resumed download is made with
// (Session.request(resuming:)). What decodes must encode and decode to the same value.
import Foundation
import FuzzDriver
@testable import PorterCore
@testable import PorterSession
@testable import PorterCache
@testable import PorterCookies
@testable import PorterCredentials

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = Data(UnsafeBufferPointer(start: data, count: size))
    guard let resume = try? ResumeData(data: input) else { return 0 }
    let request = Session.request(resuming: resume)
    _ = request.description
    _ = request.headerFields.count
    let encoded = resume.encoded()
    guard !encoded.isEmpty else { fatalError("resume data that decodes does not encode") }
    guard let again = try? ResumeData(data: encoded) else { fatalError("encoded resume data does not decode") }
    guard again == resume else { fatalError("resume data changed through encode and decode") }
    return 0
}

/// libFuzzer's driver, under the entry point name SwiftPM links an executable with.
@_cdecl("FuzzResumeData_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzOneInput(data, size) }
}
