#!/usr/bin/env bash
# Every ```swift block of README.md compiles, as rustdoc tests do (one test in `make
# test`): scripts/readme-snippets.py writes each block into Tests/ReadmeSnippets/Generated
# (declarations at file scope, statements in a function, diagnostics on README lines),
# then `swift build --target ReadmeSnippets` compiles them against the package's modules
# in the same build folder (nothing of Porter is built twice), and the generated files
# are removed again. A block marked `<!-- readme-snippets: skip (why) -->` on the line
# before its fence is not compiled; the count of such blocks is printed.
set -uo pipefail
cd "$(dirname "$0")/.."
readme=${1:-README.md}
out=Tests/ReadmeSnippets/Generated
log=$(mktemp)
cleanup() { rm -rf "$out" "$log"; }
trap cleanup EXIT
rm -rf "$out"

if ! counts=$(python3 scripts/readme-snippets.py "$readme" "$out"); then
    echo "readme-snippets: could not extract the blocks of $readme"
    exit 1
fi
read -r compiled skipped <<<"$counts"
if [ "$compiled" = 0 ]; then
    echo "readme-snippets: no swift block found in $readme"
    exit 1
fi

if ! swift build --target ReadmeSnippets >"$log" 2>&1; then
    grep -E "^[^ |].*error: " "$log" | grep -v "command failed" | awk '!seen[$0]++' | head -n 40
    if grep -q "no such module" "$log"; then
        echo "readme-snippets: a block imports a module the ReadmeSnippets target does not depend on (Package.swift)"
    fi
    echo "readme-snippets: the swift blocks of $readme do not compile ($compiled blocks, $skipped skipped)"
    exit 1
fi
echo "readme-snippets: $compiled swift blocks of $readme compile; $skipped marked as not compiled"
