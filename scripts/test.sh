#!/usr/bin/env bash
# `make test`: build everything (the CLI and the example are run by the tests), run
# every XCTest, and end with one summary line. Later issues start their real servers
# (nginx, vsftpd, sshd, proxies) here, on loopback, and stop them on exit.
set -uo pipefail
cd "$(dirname "$0")/.."

swift build --build-tests || exit 1

export PORTER_BIN="$PWD/.build/debug/porter"
export CUSTOM_SCHEME_BIN="$PWD/.build/debug/CustomScheme"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

swift test --skip-build --disable-swift-testing 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# "Executed N tests, with M failures" or "..., with K tests skipped and M failures".
summary=$(grep -E "^[[:space:]]*Executed [0-9]+ tests?, with ([0-9]+ tests? skipped and )?[0-9]+ failures?" "$log" | tail -n 1)
total=$(sed -E 's/.*Executed ([0-9]+) tests?.*/\1/' <<<"$summary")
failed=$(sed -E 's/.* ([0-9]+) failures?.*/\1/' <<<"$summary")
skipped=$(sed -nE 's/.*with ([0-9]+) tests? skipped.*/\1/p' <<<"$summary")
# A skipped test is not a pass: it counts as a failure.
if [ -n "$skipped" ]; then failed=$((failed + skipped)); fi
if [ -z "$summary" ]; then
    echo "test: no XCTest summary found (the test run crashed?)"
    exit 1
fi
# A handler package that depends on PorterCore alone builds, links no SQLite, libpsl or
# libcurl, and runs (one test in the count).
contract_status=0
bash scripts/contract-only.sh || contract_status=$?
if [ "$contract_status" -eq 0 ]; then total=$((total + 1)); else total=$((total + 1)); failed=$((failed + 1)); fi
# `make install DESTDIR=... CONFIG=debug`, then the installed porter with its installed
# sftp plugin against a real sshd, pkg-config, completions, man page, uninstall (one test).
install_status=0
bash scripts/install-check.sh || install_status=$?
total=$((total + 1)); [ "$install_status" -eq 0 ] || failed=$((failed + 1))
# `make deb` from the debug build, `apt-get install ./porter_*.deb`, the installed porter
# (plugins, man page, pkg-config, no toolchain needed), `apt-get remove` (one test).
deb_status=0
bash scripts/deb-check.sh || deb_status=$?
total=$((total + 1)); [ "$deb_status" -eq 0 ] || failed=$((failed + 1))
# Every ```swift block of README.md and of the DocC articles compiles against the
# package, every ```c block against the plugin header (one test).
snippets_status=0
bash scripts/readme-snippets.sh || snippets_status=$?
total=$((total + 1)); [ "$snippets_status" -eq 0 ] || failed=$((failed + 1))
# Every libFuzzer harness builds and runs a few seconds from its seed corpus (FUZZING.md),
# so the harnesses keep building and the seeds keep passing; `make fuzz` runs them long.
fuzz_status=0
FUZZ_SECONDS=${FUZZ_SMOKE_SECONDS:-3} bash scripts/fuzz.sh || fuzz_status=$?
[ "$fuzz_status" -eq 0 ] || echo "test: a fuzz harness failed (see above)"

echo "tests: $((total - failed)) passed, $failed failed"
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$fuzz_status" -ne 0 ] || [ "$contract_status" -ne 0 ] || [ "$install_status" -ne 0 ] || [ "$deb_status" -ne 0 ] || [ "$snippets_status" -ne 0 ]; then exit 1; fi
