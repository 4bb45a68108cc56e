import Foundation
import XCTest

/// file: URLs to -o's file or to stdout: the file handler copies in the kernel
/// (BodyDestination, FileCopy), so the bytes never pass through porter's memory.
extension CLITests {
    /// Several copy chunks (FileHandler.directChunkSize is 4 MiB) to a file and to a pipe:
    /// byte-exact, the size reported by -w, no temporary file left beside the output, and
    /// the system calls are copy_file_range (file to file) and sendfile (file to pipe).
    func testFileURLIsCopiedInTheKernelToAFileAndToAPipe() throws {
        var x: UInt64 = 88_172_645_463_325_252
        let body = Data((0..<((9 << 20) + 12_345)).map { _ -> UInt8 in
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            return UInt8(truncatingIfNeeded: x)
        })
        let source = file("big.bin", body)
        let out = dir + "/copy.bin"
        let toFile = dir + "/trace-file"
        let strace = ["/usr/bin/strace", "-f", "-qq", "-e", "trace=copy_file_range,sendfile", "-o"]
        let r = try run(["-s", "-w", "%{size_download}", "-o", out, "file://" + source], prefix: strace + [toFile])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(String(decoding: r.stdout, as: UTF8.self), String(body.count))
        XCTAssertEqual(FileManager.default.contents(atPath: out), body)
        XCTAssertEqual(entries, ["big.bin", "copy.bin", "trace-file"], "a temporary file was left behind")
        let fileCalls = try String(contentsOfFile: toFile, encoding: .utf8)
        XCTAssertTrue(fileCalls.contains("copy_file_range("), "no copy_file_range:\n\(fileCalls)")

        let toPipe = dir + "/trace-pipe"
        let p = try run(["-s", "file://" + source], prefix: strace + [toPipe])
        XCTAssertEqual(p.status, 0, p.stderr)
        XCTAssertEqual(p.stdout, body, "stdout (a pipe) differs")
        let pipeCalls = try String(contentsOfFile: toPipe, encoding: .utf8)
        XCTAssertTrue(pipeCalls.contains("sendfile(1,"), "no sendfile to stdout:\n\(pipeCalls)")
    }
}
