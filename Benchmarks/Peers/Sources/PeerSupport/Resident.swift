import Foundation

/// The process's resident set now and its peak (VmRSS, VmHWM), KiB: the peers' memory
/// measures (porter-bench, in the main package, has its own).
public func residentKiB() -> (now: Int, peak: Int) {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    func field(_ name: String) -> Int {
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return -1 }
        return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? -1
    }
    return (field("VmRSS"), field("VmHWM"))
}

/// Sets the peak (VmHWM) to the resident set now (Linux: clear_refs 5).
public func resetPeakResident() throws {
    try "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
}
