#!/usr/bin/env bash
# The contract-only package (Tests/ContractOnly): a handler package that depends on
# PorterCore alone. Checks that it builds, that only PorterCore and its two Swift
# dependencies were compiled for it (no GRDB, no libcurl or libpsl shims), that the
# program links none of SQLite, libpsl or libcurl, that resolving Porter printed no
# pkg-config warning, and that it runs its handler.
set -uo pipefail
cd "$(dirname "$0")/.."
scratch=$PWD/.build/contract-only
if ! swift build --package-path Tests/ContractOnly --scratch-path "$scratch" --disable-build-manifest-caching >"$scratch.log" 2>&1; then
    tail -n 30 "$scratch.log"
    echo "contract-only: the package did not build"
    exit 1
fi
bin=$(swift build --package-path Tests/ContractOnly --scratch-path "$scratch" --show-bin-path)
status=0
# Depending on Porter adds no warning to the dependent's build (libsecret's pkg-config
# flags once printed "prohibited flag(s): -pthread" in every dependent package).
if grep -i "warning: prohibited flag" "$scratch.log"; then
    echo "contract-only: depending on Porter prints pkg-config warnings"
    status=1
fi
compiled=$(cd "$bin" && for d in *.build; do
    if [ -n "$(find "$d" -name '*.o' -print -quit)" ]; then echo "${d%.build}"; fi
done | sort | tr '\n' ' ')
expected="ContractOnly HTTPTypes Logging PorterCore "
if [ "$compiled" != "$expected" ]; then
    echo "contract-only: compiled [$compiled], expected [$expected]"
    status=1
fi
linked=$(ldd "$bin/ContractOnly" | grep -Ei 'libcurl|libpsl|libsqlite|libssh2|libffi' || true)
if [ -n "$linked" ]; then
    echo "contract-only: links what the contract must not need:"
    echo "$linked"
    status=1
fi
"$bin/ContractOnly" || status=1
exit $status
