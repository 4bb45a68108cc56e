#!/usr/bin/env python3
"""Turns every ```swift block of README.md and the DocC articles into a Swift file of the
ReadmeSnippets target.

    readme-snippets.py OUTPUT_FOLDER MANIFEST_FOLDER FILE...

Each block becomes one file; a block with no import at all gets `import Foundation` and
`import Porter` (it continues the page's setup), one with imports is taken as written.
Its declarations (types, functions, extensions, and
globals those use) stay at file scope, made `fileprivate` unless they say otherwise, so
two blocks may both declare a `Watcher`; its other top-level statements go, in order,
into a private `async throws` function, as if the block were a program's main file.
`#sourceLocation` lines point every diagnostic at the page's own file and line
(`Sources/Porter/Porter.docc/UserGuide.md:42: error: ...`).

A block whose first line is `// swift-tools-version:...` is an application's manifest:
it goes to MANIFEST_FOLDER/<n>/Package.swift for `swift package dump-package` (the shell
script runs it), and every `.product(name: X, package: "porter")` it names must be a
product of this package's own Package.swift (checked here, reported at file:line).

A ```c block goes to MANIFEST_FOLDER/c/, with a `#line` directive, for the shell script to
compile with cc against the plugin header (Sources/CPorterPlugin/include).

A block that is deliberately not compilable says so on the line right before its fence:

    <!-- readme-snippets: skip (why) -->

Prints one line per skipped block and per wrong product name to stderr, and
`COMPILED SKIPPED MANIFESTS C_BLOCKS` counts to stdout; exits 1 when a product name is wrong.
"""
import os
import re
import sys

SKIP_MARK = re.compile(r"<!--\s*readme-snippets:\s*skip\b.*-->")
ATTRIBUTE = re.compile(r"@[A-Za-z_]\w*(?:\([^()]*(?:\([^()]*\)[^()]*)*\))?\s*")
MODIFIERS = {"public", "private", "fileprivate", "internal", "open", "package", "final", "nonisolated",
             "indirect", "static", "override", "convenience", "required", "dynamic", "lazy", "weak", "unowned"}
ACCESS = {"public", "private", "fileprivate", "internal", "open", "package"}
DECLARATIONS = {"struct", "class", "enum", "protocol", "extension", "func", "actor", "typealias", "macro"}
# A line starting with one of these continues the statement above it.
CONTINUES = re.compile(r"^\s*(\.(?!\.\.)|else\b|catch\b|where\b|\?\?|\?|:|&&|\|\||->|\+|-(?!\d)|\*|/(?!/)|==|!=|=)")
# A line ending with one of these continues on the next one.
OPEN_END = re.compile(r"(,|=|\+|-|\*|&&|\|\||\?\?|->|\bin|\()\s*$")


def blocks(lines, language="swift"):
    """(first line number, source lines, skipped) for each ```swift (or other language) fence."""
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```\s*%s\s*$" % re.escape(language), lines[i])
        if not m:
            i += 1
            continue
        indent = m.group(1)
        skipped = i > 0 and bool(SKIP_MARK.search(lines[i - 1]))
        start = i + 1
        j = start
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[start:j]]
        yield start + 1, body, skipped
        i = j + 1


class Scanner:
    """Bracket depth across lines, ignoring strings and comments."""

    def __init__(self):
        self.depth = 0
        self.in_block_comment = False
        self.in_multiline_string = False

    def feed(self, line):
        i, n = 0, len(line)
        while i < n:
            if self.in_block_comment:
                end = line.find("*/", i)
                if end < 0:
                    return
                self.in_block_comment = False
                i = end + 2
                continue
            if self.in_multiline_string:
                end = line.find('"""', i)
                if end < 0:
                    return
                self.in_multiline_string = False
                i = end + 3
                continue
            c = line[i]
            if line.startswith("//", i):
                return
            if line.startswith("/*", i):
                self.in_block_comment = True
                i += 2
            elif line.startswith('"""', i):
                self.in_multiline_string = True
                i += 3
            elif c == '"':
                i = self.skip_string(line, i + 1)
            else:
                if c in "({[":
                    self.depth += 1
                elif c in ")}]":
                    self.depth -= 1
                i += 1

    @staticmethod
    def skip_string(line, i):
        """The index after the string literal that starts at i (after its quote)."""
        n = len(line)
        while i < n:
            if line[i] == "\\":
                if line.startswith("\\(", i):
                    depth, i = 1, i + 2
                    while i < n and depth:
                        if line[i] == "(":
                            depth += 1
                        elif line[i] == ")":
                            depth -= 1
                        elif line[i] == '"':
                            i = Scanner.skip_string(line, i + 1) - 1
                        i += 1
                    continue
                i += 2
                continue
            if line[i] == '"':
                return i + 1
            i += 1
        return n

    @property
    def balanced(self):
        return self.depth <= 0 and not self.in_block_comment and not self.in_multiline_string


def code_part(line):
    """The line without a trailing // comment (roughly: outside strings)."""
    out, i, n = [], 0, len(line)
    while i < n:
        if line[i] == '"':
            j = Scanner.skip_string(line, i + 1)
            out.append(line[i:j])
            i = j
        elif line.startswith("//", i):
            break
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def items(body, first_line):
    """Top-level items: (line number, lines). Comments and blank lines join the next item."""
    result, current, start, pending, pending_start = [], [], None, [], None
    scanner = Scanner()
    for offset, line in enumerate(body):
        number = first_line + offset
        stripped = line.strip()
        if not current:
            if not stripped or stripped.startswith("//"):
                pending_start = pending_start or number
                pending.append(line)
                continue
            if result and not pending and CONTINUES.match(line):
                # `.resume()` or `else {` under a finished item: it goes on.
                start, current = result.pop()
                current = current + [line]
            else:
                start = pending_start or number
                current = pending + [line]
                pending, pending_start = [], None
        else:
            current.append(line)
        scanner.feed(line)
        code = code_part(line).rstrip()
        attribute_only = re.fullmatch(r"(?:@[A-Za-z_]\w*(?:\(.*\))?\s*)+", code.strip() or "x") is not None
        if scanner.balanced and not OPEN_END.search(code) and not attribute_only:
            result.append((start, current))
            current, start = [], None
    if current:
        result.append((start, current))
    if pending:
        result.append((pending_start, pending))
    return result


def first_code_line(lines):
    for line in lines:
        s = line.strip()
        if s and not s.startswith("//"):
            return s
    return ""


def classify(lines):
    """('import' | 'declaration' | 'variable' | 'statement' | 'comment', keyword, modifiers)."""
    text = " ".join(line.strip() for line in lines if line.strip() and not line.strip().startswith("//"))
    if not text:
        return "comment", None, set()
    rest = text
    while True:
        m = ATTRIBUTE.match(rest)
        if not m:
            break
        rest = rest[m.end():]
    words = rest.split()
    modifiers = set()
    while words and (words[0] in MODIFIERS or re.fullmatch(r"\w+\(set\)", words[0])):
        modifiers.add(words.pop(0))
    keyword = words[0] if words else ""
    keyword = re.match(r"\w*", keyword).group(0)
    if keyword == "import":
        return "import", keyword, modifiers
    if keyword in DECLARATIONS:
        return "declaration", keyword, modifiers
    if keyword in ("let", "var"):
        return "variable", keyword, modifiers
    return "statement", keyword, modifiers


def make_fileprivate(lines):
    """Inserts `fileprivate` before the declaration's modifiers (after its attributes)."""
    for index, line in enumerate(lines):
        s = line.strip()
        if not s or s.startswith("//"):
            continue
        indent = line[: len(line) - len(line.lstrip())]
        rest, prefix = s, ""
        while True:
            m = ATTRIBUTE.match(rest)
            if not m:
                break
            prefix += m.group(0)
            rest = rest[m.end():]
        if not rest:  # an attribute alone on its line: the declaration follows
            continue
        lines = list(lines)
        lines[index] = indent + prefix + "fileprivate " + rest
        return lines
    return lines


def generate(first_line, body, page):
    parts = items(body, first_line)
    classified = [(number, lines) + classify(lines) for number, lines in parts]
    file_scope_text = "\n".join("\n".join(lines) for _, lines, kind, _, _ in classified if kind == "declaration")
    imports, file_scope, statements = [], [], []
    for number, lines, kind, keyword, modifiers in classified:
        text = "\n".join(lines)
        if kind == "import":
            imports.append((number, lines))
        elif kind == "declaration" or (kind == "variable" and is_global(lines, file_scope_text)):
            if keyword != "extension" and not (modifiers & ACCESS):
                lines = make_fileprivate(lines)
            file_scope.append((number, lines))
        elif kind == "comment":
            continue
        else:
            statements.append((number, lines))
    out = ["// Generated by scripts/readme-snippets.py from %s, line %d: do not edit." % (page, first_line)]
    if not imports:
        # A block with no import continues the page's setup (as a reader's file would).
        out += ["import Foundation", "import Porter"]
    for number, lines in imports:
        out += ['#sourceLocation(file: "%s", line: %d)' % (page, number)] + lines
    for number, lines in file_scope:
        out += ['#sourceLocation(file: "%s", line: %d)' % (page, number)] + lines
    if imports or file_scope:
        out += ["#sourceLocation()"]
    if statements:
        out += ["private func readmeSnippet() async throws {"]
        for number, lines in statements:
            out += ['#sourceLocation(file: "%s", line: %d)' % (page, number)] + lines
        out += ["#sourceLocation()", "}"]
    return "\n".join(out) + "\n"


def is_global(lines, declarations):
    """A top-level let/var that a file-scope declaration uses, and that needs no await."""
    text = "\n".join(lines)
    if re.search(r"\b(try|await)\b", text):
        return False
    m = re.search(r"\b(?:let|var)\s+([A-Za-z_]\w*)", text)
    return bool(m) and re.search(r"\b%s\b" % re.escape(m.group(1)), declarations) is not None


def products(package_swift):
    """The product names of this package's manifest."""
    with open(package_swift, encoding="utf-8") as f:
        text = f.read()
    return set(re.findall(r"\.(?:library|executable)\(\s*name:\s*\"([^\"]+)\"", text))


def check_manifest(body, first_line, page, known):
    """Wrong product names of Porter's package named in an application's manifest block."""
    errors = []
    for offset, line in enumerate(body):
        for name in re.findall(r"\.product\(\s*name:\s*\"([^\"]+)\",\s*package:\s*\"porter\"", line, re.I):
            if name not in known:
                errors.append("%s:%d: error: no product named %s in Package.swift (it has %s)"
                              % (page, first_line + offset, name, ", ".join(sorted(known))))
    return errors


def file_stem(page):
    """A name for a page's generated files: README, or the article's name."""
    return re.sub(r"\W", "_", os.path.splitext(os.path.basename(page))[0])


def main():
    folder, manifests, pages = sys.argv[1], sys.argv[2], sys.argv[3:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    known = products(os.path.join(root, "Package.swift"))
    os.makedirs(folder, exist_ok=True)
    os.makedirs(manifests, exist_ok=True)
    compiled = skipped = manifest_count = c_count = 0
    errors = []
    for page in pages:
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        stem = file_stem(page)
        for number, body, skip in blocks(lines):
            if skip:
                skipped += 1
                print("readme-snippets: %s:%d skipped (marked)" % (page, number), file=sys.stderr)
                continue
            if body and body[0].startswith("// swift-tools-version"):
                manifest_count += 1
                errors += check_manifest(body, number, page, known)
                path = os.path.join(manifests, "%s_L%04d" % (stem, number))
                os.makedirs(path, exist_ok=True)
                with open(os.path.join(path, "Package.swift"), "w", encoding="utf-8") as f:
                    f.write("\n".join(body) + "\n")
                with open(os.path.join(path, "origin"), "w", encoding="utf-8") as f:
                    f.write("%s:%d\n" % (page, number))
                continue
            compiled += 1
            path = os.path.join(folder, "Snippet_%s_L%04d.swift" % (stem, number))
            with open(path, "w", encoding="utf-8") as f:
                f.write(generate(number, body, page))
        for number, body, skip in blocks(lines, "c"):
            if skip:
                skipped += 1
                print("readme-snippets: %s:%d skipped (marked)" % (page, number), file=sys.stderr)
                continue
            c_count += 1
            path = os.path.join(manifests, "c", "%s_L%04d.c" % (stem, number))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write('#line %d "%s"\n' % (number, page) + "\n".join(body) + "\n")
    for error in errors:
        print(error, file=sys.stderr)
    print(compiled, skipped, manifest_count, c_count)
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
