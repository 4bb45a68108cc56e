import Foundation
import Porter

/// The URLs of one run: the arguments, then the lines of `--url-list FILE`, read one at
/// a time as transfers need them (blank lines and `#` comments skipped). Not thread-safe:
/// the runner calls `next()` under its lock.
final class URLSource: @unchecked Sendable {
    private var arguments: [String]
    private var index = 0
    private var file: UnsafeMutablePointer<FILE>?
    private var line: UnsafeMutablePointer<CChar>?
    private var capacity = 0

    init(arguments: [String], listPath: String?) throws {
        self.arguments = arguments
        if let listPath {
            guard let f = fopen(listPath, "re") else {
                throw PorterError(.fileDoesNotExist, "cannot read \(listPath)", cause: .errno(errno))
            }
            file = f
        }
    }

    deinit {
        if let file { fclose(file) }
        free(line)
    }

    func next() -> String? {
        if index < arguments.count {
            index += 1
            return arguments[index - 1]
        }
        guard let file else { return nil }
        while true {
            let n = getline(&line, &capacity, file)
            guard n >= 0, let line else {
                fclose(file)
                self.file = nil
                return nil
            }
            // ASCII white space and line ends trimmed on the bytes (Foundation's
            // trimmingCharacters(in:) costs more than the whole request it names).
            var bytes = UnsafeRawBufferPointer(start: line, count: n)[...]
            func isSpace(_ b: UInt8) -> Bool { b == 0x20 || (b >= 0x09 && b <= 0x0D) }
            while let first = bytes.first, isSpace(first) { bytes = bytes.dropFirst() }
            while let last = bytes.last, isSpace(last) { bytes = bytes.dropLast() }
            let text = String(decoding: bytes, as: UTF8.self)
            if text.isEmpty || text.hasPrefix("#") { continue }
            return text
        }
    }
}

/// One -H argument, as curl reads it: "Name: value" adds a field, "Name:" removes it,
/// "Name;" adds it with an empty value.
struct HeaderOption {
    enum Action: Equatable { case add(String), remove }
    let name: String
    let action: Action

    init?(_ text: String) {
        let colon = text.firstIndex(of: ":")
        let semicolon = text.firstIndex(of: ";")
        if let semicolon, colon == nil || semicolon < colon!,
           text[text.index(after: semicolon)...].allSatisfy({ $0 == " " || $0 == "\t" }) {
            name = String(text[..<semicolon]).trimmingCharacters(in: .whitespaces)
            action = .add("")
        } else if let colon {
            name = String(text[..<colon]).trimmingCharacters(in: .whitespaces)
            let value = String(text[text.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
            action = value.isEmpty ? .remove : .add(value)
        } else {
            return nil
        }
        if name.isEmpty { return nil }
    }
}
