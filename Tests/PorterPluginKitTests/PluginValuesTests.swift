import CPorterPlugin
import Foundation
@testable import PorterPluginKit
import XCTest

/// The conversions between porter_plugin.h's structs and PluginKit's Swift values, in
/// both directions, including what an older struct (a smaller `struct_size`) must not
/// be read for.
final class PluginValuesTests: XCTestCase {
    func testARequestIsCopiedWithItsFieldsHeadersAndProperties() {
        let strings = CStrings()
        let headers = [porter_field(name: strings.dup("Accept"), value: strings.dup("*/*")),
                       porter_field(name: strings.dup("X-Empty"), value: nil)]
        let properties = [porter_field(name: strings.dup("key-file"), value: strings.dup("/k")),
                          porter_field(name: nil, value: strings.dup("dropped"))]
        var cached = porter_response()
        cached.struct_size = UInt32(MemoryLayout<porter_response>.size)
        cached.validator = strings.dup("\"v1\"")
        headers.withUnsafeBufferPointer { h in
            properties.withUnsafeBufferPointer { p in
                withUnsafePointer(to: &cached) { c in
                    var r = porter_request()
                    r.struct_size = UInt32(MemoryLayout<porter_request>.size)
                    r.url = strings.dup("sftp://h/a%20b")
                    r.method = strings.dup("PUT")
                    r.headers = h.baseAddress
                    r.header_count = h.count
                    r.properties = p.baseAddress
                    r.property_count = p.count
                    r.resume_offset = 100
                    r.resume_validator = strings.dup("etag")
                    r.has_body = 1
                    r.body_length = -1
                    r.timeout_interval = 7.5
                    r.insecure = 1
                    r.cached_response = c
                    let request = PluginRequest(r)
                    XCTAssertEqual(request.url, "sftp://h/a%20b")
                    XCTAssertEqual(request.method, "PUT")
                    XCTAssertEqual(request.headers.map { "\($0.name)=\($0.value)" }, ["Accept=*/*", "X-Empty="])
                    XCTAssertEqual(request.properties, ["key-file": "/k"], "a property without a name is dropped")
                    XCTAssertEqual(request.resumeOffset, 100)
                    XCTAssertEqual(request.resumeValidator, "etag")
                    XCTAssertTrue(request.hasBody)
                    XCTAssertNil(request.bodyLength, "-1 is an unknown length")
                    XCTAssertEqual(request.timeoutInterval, 7.5)
                    XCTAssertTrue(request.insecure)
                    XCTAssertTrue(request.hasCachedResponse)
                    XCTAssertEqual(request.cachedValidator, "\"v1\"")

                    // A 1.0 request ends before `cached_response`: whatever lies there is not read.
                    r.struct_size = UInt32(MemoryLayout<porter_request>.offset(of: \.cached_response)!)
                    let old = PluginRequest(r)
                    XCTAssertFalse(old.hasCachedResponse)
                    XCTAssertNil(old.cachedValidator)
                }
            }
        }
        withExtendedLifetime(strings) {}
    }

    func testARequestWithNullsGetsItsDefaults() {
        var r = porter_request()
        r.struct_size = UInt32(MemoryLayout<porter_request>.size)
        r.resume_offset = -1
        r.body_length = 12
        r.header_count = 3   // with a NULL array: nothing is read
        let request = PluginRequest(r)
        XCTAssertEqual(request.url, "")
        XCTAssertEqual(request.method, "GET")
        XCTAssertTrue(request.headers.isEmpty)
        XCTAssertNil(request.resumeOffset)
        XCTAssertEqual(request.bodyLength, 12)
        XCTAssertFalse(request.hasBody)
        XCTAssertFalse(request.hasCachedResponse)
    }

    func testEveryReplyDispositionMapsToItsCase() {
        let strings = CStrings()
        func reply(_ disposition: Int32, _ fill: (inout porter_challenge_reply) -> Void = { _ in }) -> PluginReply {
            var r = porter_challenge_reply()
            r.struct_size = UInt32(MemoryLayout<porter_challenge_reply>.size)
            r.disposition = disposition
            fill(&r)
            return PluginReply(r)
        }
        let use = Int32(PORTER_DISPOSITION_USE_CREDENTIAL)
        XCTAssertEqual(reply(use) { $0.user = strings.dup("ann"); $0.password = strings.dup("sesame") },
                       .password(user: "ann", password: "sesame"))
        XCTAssertEqual(reply(use) { $0.key_path = strings.dup("/id"); $0.passphrase = strings.dup("pp") },
                       .key(publicKeyPath: nil, privateKeyPath: "/id", passphrase: "pp"))
        XCTAssertEqual(reply(use) { $0.key_path = strings.dup("/id"); $0.certificate_path = strings.dup("/id.pub") },
                       .key(publicKeyPath: "/id.pub", privateKeyPath: "/id", passphrase: nil))
        XCTAssertEqual(reply(use) { $0.trust = 1 }, .trust)
        XCTAssertEqual(reply(use) { $0.user = strings.dup("ann") }, .unusable, "a user without a password is no credential")
        XCTAssertEqual(reply(use), .unusable)
        XCTAssertEqual(reply(Int32(PORTER_DISPOSITION_DEFAULT)), .performDefault)
        XCTAssertEqual(reply(Int32(PORTER_DISPOSITION_CANCEL)), .cancel)
        XCTAssertEqual(reply(Int32(PORTER_DISPOSITION_REJECT_SPACE)), .rejectSpace)
        XCTAssertEqual(reply(99), .performDefault, "an unknown disposition is the default")
        withExtendedLifetime(strings) {}
    }

    func testErrorBuffersAreTruncatedTerminatedAndRepaired() {
        var buffer = [CChar](repeating: 0x7f, count: 8)
        CErrorBuffer.write("hello", to: &buffer, capacity: 4)
        XCTAssertEqual(buffer.prefix(4).map { UInt8(bitPattern: $0) }, Array("hel".utf8) + [0])
        XCTAssertEqual(buffer[4], 0x7f, "nothing past the capacity is written")
        XCTAssertEqual(CErrorBuffer.read(buffer), "hel")

        var untouched = [CChar](repeating: 0x7f, count: 2)
        CErrorBuffer.write("x", to: &untouched, capacity: 0)
        XCTAssertEqual(untouched, [0x7f, 0x7f])
        CErrorBuffer.write("x", to: nil, capacity: 10)   // no buffer: nothing, no trap

        let bad: [CChar] = [0x6f, 0x6b, CChar(bitPattern: 0xff), 0, 0x6e, 0x6f]
        XCTAssertEqual(CErrorBuffer.read(bad), "ok\u{FFFD}", "invalid UTF-8 is repaired; the text ends at the NUL")
        XCTAssertEqual(CErrorBuffer.read([]), "")
    }

    func testCStringsKeepTheirCopiesAliveAndMapNil() {
        let strings = CStrings()
        XCTAssertNil(strings.dup(nil))
        let p = strings.dup("żółw")
        XCTAssertEqual(p.map { String(cString: $0) }, "żółw")
        withExtendedLifetime(strings) {}
    }

    func testAListingIsSortedEscapedAndDated() {
        var listing = PluginListing()
        listing.entries = [
            .init(name: "zeta", kind: .file, size: 10, modified: 0),
            .init(name: "100%\nnew", kind: .other, size: nil, modified: nil),
            .init(name: "alpha\r", kind: .directory, size: 0, modified: 1_700_000_000),
            .init(name: "link", kind: .symlink, size: 4, modified: -1),
        ]
        XCTAssertEqual(String(decoding: listing.serialized(), as: UTF8.self), """
            o - - 100%25%0Anew
            d 0 2023-11-14T22:13:20Z alpha%0D
            l 4 1969-12-31T23:59:59Z link
            f 10 1970-01-01T00:00:00Z zeta

            """)
        XCTAssertEqual(PluginListing.contentType, "text/x-porter-listing")
        XCTAssertTrue(PluginListing().serialized().isEmpty)
    }
}
