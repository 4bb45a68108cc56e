#!/usr/bin/env bash
# Every ```swift block of README.md and of the DocC articles (Sources/Porter/Porter.docc)
# compiles, as rustdoc tests do (one test in `make test`): scripts/readme-snippets.py
# writes each block into Tests/ReadmeSnippets/Generated (declarations at file scope,
# statements in a function, diagnostics at the page's file:line), then `swift build
# --target ReadmeSnippets` compiles them against the package's modules in the same build
# folder (nothing of Porter is built twice), and the generated files are removed again.
# A block that is an application's Package.swift (first line `// swift-tools-version`)
# is loaded with `swift package dump-package` instead, and the Porter products it names
# must exist; a ```c block is compiled with cc against the plugin header (-Wall -Werror). A block marked `<!-- readme-snippets: skip (why) -->` on the line before
# its fence is not compiled; the count of such blocks is printed.
#
#     scripts/readme-snippets.sh [PAGE.md...]     (default: README.md and every article)
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
    pages=("$@")
else
    pages=(README.md Sources/Porter/Porter.docc/*.md)
fi
out=Tests/ReadmeSnippets/Generated
manifests=$(mktemp -d)
log=$(mktemp)
cleanup() { rm -rf "$out" "$log" "$manifests"; }
trap cleanup EXIT
rm -rf "$out"

if ! counts=$(python3 scripts/readme-snippets.py "$out" "$manifests" "${pages[@]}"); then
    echo "readme-snippets: could not extract the blocks of ${#pages[@]} pages, or a manifest names a product Package.swift does not have (above)"
    exit 1
fi
read -r compiled skipped manifest_count c_count <<<"$counts"
if [ "$compiled" = 0 ]; then
    echo "readme-snippets: no swift block found in ${#pages[@]} pages (${pages[*]})"
    exit 1
fi

status=0
for dir in "$manifests"/*/; do
    [ -f "$dir/Package.swift" ] || continue
    if ! swift package --package-path "$dir" dump-package >"$log" 2>&1; then
        # Package.swift:N:M of the copy is line FIRST+N-1 of the page.
        IFS=: read -r page first <"$dir/origin"
        awk -v prefix="${dir%/}/Package.swift:" -v page="$page" -v first="$first" \
            'index($0, prefix) == 1 && /: error: / && !seen[$0]++ {
                rest = substr($0, length(prefix) + 1); n = rest + 0
                print page ":" (first + n - 1) substr(rest, length(n "") + 1) }' "$log" | head -n 10
        echo "$page:$first: error: this Package.swift does not load"
        status=1
    fi
done

for file in "$manifests"/c/*.c; do
    [ -f "$file" ] || continue
    # The #line directive at the top makes cc report the page's own file:line.
    if ! cc -fsyntax-only -Wall -Wextra -Werror -std=c11 -I Sources/CPorterPlugin/include "$file" >"$log" 2>&1; then
        grep -E "error|warning" "$log" | head -n 20
        status=1
    fi
done

if ! swift build --target ReadmeSnippets >"$log" 2>&1; then
    grep -E "^[^ |].*error: " "$log" | grep -v "command failed" | awk '!seen[$0]++' | head -n 40
    if grep -q "no such module" "$log"; then
        echo "readme-snippets: a block imports a module the ReadmeSnippets target does not depend on (Package.swift)"
    fi
    status=1
fi
if [ "$status" -ne 0 ]; then
    echo "readme-snippets: the swift blocks of ${#pages[@]} pages do not compile ($compiled blocks, $manifest_count manifests, $c_count C blocks, $skipped skipped; errors above at page:line)"
    exit 1
fi
echo "readme-snippets: $compiled swift blocks, $manifest_count manifests and $c_count C blocks of ${#pages[@]} pages compile; $skipped marked as not compiled"
