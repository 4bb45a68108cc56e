import Foundation

/// `-K FILE` / `--config FILE`: curl's config file syntax, expanded into arguments where
/// the option stood. Each line is `option = value`, `option: value`, `option value` or a
/// lone `option` (a flag); the option may be written with or without its dashes (long
/// names), values may be "quoted" with \" \\ \n \t \r escapes, `#` starts a comment line,
/// and `url = X` names a URL.
enum ConfigFile {
    struct Failure: Error, CustomStringConvertible {
        /// curl's exit: 26 for a file it cannot read, 2 for a bad line.
        var isReadError: Bool { description.hasPrefix("cannot read") }
        let description: String
    }

    static func expand(_ arguments: [String], depth: Int = 0) throws -> [String] {
        var out: [String] = []
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            var path: String?
            if a == "-K" || a == "--config" {
                guard i + 1 < arguments.count else { throw Failure(description: "\(a) needs a FILE") }
                path = arguments[i + 1]
                i += 2
            } else if a.hasPrefix("--config=") {
                path = String(a.dropFirst(9))
                i += 1
            } else if a.hasPrefix("-K"), a.count > 2 {
                path = String(a.dropFirst(2))
                i += 1
            } else {
                out.append(a)
                i += 1
                continue
            }
            guard depth < 4 else { throw Failure(description: "config files nest too deep") }
            guard let path, let data = path == "-" ? FileHandle.standardInput.readDataToEndOfFile()
                                                    : FileManager.default.contents(atPath: path) else {
                throw Failure(description: "cannot read the config file \(path ?? "")")
            }
            out += try expand(parse(String(decoding: data, as: UTF8.self)), depth: depth + 1)
        }
        return out
    }

    static func parse(_ text: String) throws -> [String] {
        var args: [String] = []
        for (number, raw) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            var nameEnd = line.startIndex
            while nameEnd < line.endIndex, !" \t=:".contains(line[nameEnd]) { nameEnd = line.index(after: nameEnd) }
            var name = String(line[..<nameEnd])
            var rest = line[nameEnd...].drop { $0 == " " || $0 == "\t" }
            if let first = rest.first, first == "=" || first == ":" { rest = rest.dropFirst().drop { $0 == " " || $0 == "\t" } }
            var value: String?
            if !rest.isEmpty {
                if rest.first == "\"" {
                    var v = ""
                    var escaped = false
                    var closed = false
                    for c in rest.dropFirst() {
                        if escaped {
                            switch c {
                            case "n": v += "\n"
                            case "t": v += "\t"
                            case "r": v += "\r"
                            case "v": v += "\u{0B}"
                            default: v.append(c)
                            }
                            escaped = false
                        } else if c == "\\" {
                            escaped = true
                        } else if c == "\"" {
                            closed = true
                            break
                        } else {
                            v.append(c)
                        }
                    }
                    guard closed else { throw Failure(description: "config line \(number + 1): unterminated quote") }
                    value = v
                } else {
                    value = String(rest.prefix { $0 != " " && $0 != "\t" })
                }
            }
            if name == "url" {
                guard let value else { throw Failure(description: "config line \(number + 1): url needs a value") }
                args.append(value)
                continue
            }
            if !name.hasPrefix("-") { name = "--" + name }
            args.append(name)
            if let value { args.append(value) }
        }
        return args
    }
}
