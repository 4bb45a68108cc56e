#!/usr/bin/env bash
# `make fuzz`: build the libFuzzer harnesses of Fuzz/ (FUZZING.md) and run each one for
# FUZZ_SECONDS seconds, one after the other, from a copy of its seed corpus in a temp
# folder (Fuzz/Corpus stays as committed). Prints the executions and the verdict of each
# and exits non-zero when any harness crashed, leaked, timed out or ran out of memory.
#
#   FUZZ_SECONDS  seconds per harness (60)
#   FUZZ_CONFIG   debug or release; default release for runs of 30 s and more (about
#                 four times the executions per second), debug below (builds in a
#                 quarter of the time: what a 3-second smoke run wants)
#   FUZZ_TARGETS  harnesses to run, space separated (all of them)
#   FUZZ_TIMEOUT  seconds one input may take before it counts as a hang (10)
#   FUZZ_SCRATCH  SwiftPM scratch path for the sanitizer build (.build/fuzz)
#   FUZZ_ARGS     more libFuzzer flags, e.g. "-max_len=65536"
# Crashing inputs are kept under $FUZZ_SCRATCH/artifacts/<harness>/.
set -uo pipefail
# The Swift runtime's own crash backtracer trips AddressSanitizer; libFuzzer prints the stack.
export SWIFT_BACKTRACE=enable=no
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
case "$seconds" in ''|*[!0-9]*) echo "fuzz: FUZZ_SECONDS must be a whole number of seconds" >&2; exit 2 ;; esac
if [ "$seconds" -ge 30 ]; then config=${FUZZ_CONFIG:-release}; else config=${FUZZ_CONFIG:-debug}; fi
timeout=${FUZZ_TIMEOUT:-10}
scratch=${FUZZ_SCRATCH:-$PWD/.build/fuzz}
case "$scratch" in /*) ;; *) scratch=$PWD/$scratch ;; esac
extra=${FUZZ_ARGS:-}

all=$(cd Fuzz/Sources && ls -d Fuzz* | grep -v '^FuzzDriver$')
targets=${FUZZ_TARGETS:-$all}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "fuzz: building the harnesses ($config, -sanitize=fuzzer,address) in $scratch"
build_start=$SECONDS
if ! swift build --package-path Fuzz --scratch-path "$scratch" -c "$config" \
        -Xswiftc -sanitize=fuzzer,address -Xswiftc -enable-testing >"$work/build.log" 2>&1; then
    # ld.gold's "Cannot export local symbol __asan_..." warnings are harmless noise.
    grep -v "Cannot export local symbol" "$work/build.log" | tail -n 40
    echo "fuzz: the build failed"
    exit 1
fi
echo "fuzz: built in $((SECONDS - build_start)) s"
bin=$(swift build --package-path Fuzz --scratch-path "$scratch" -c "$config" \
        -Xswiftc -sanitize=fuzzer,address -Xswiftc -enable-testing --show-bin-path)

failed=0
count=0
for target in $targets; do
    if [ ! -x "$bin/$target" ]; then
        echo "fuzz: no harness named $target" >&2
        failed=$((failed + 1))
        continue
    fi
    count=$((count + 1))
    corpus="$work/$target"
    mkdir -p "$corpus"
    if [ -d "Fuzz/Corpus/$target" ]; then cp -R "Fuzz/Corpus/$target/." "$corpus/"; fi
    artifacts="$scratch/artifacts/$target"
    mkdir -p "$artifacts"
    log="$work/$target.log"
    start=$SECONDS
    # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
    "$bin/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout="$timeout" -print_final_stats=1 \
        -artifact_prefix="$artifacts/" $extra "$corpus" >"$log" 2>&1
    status=$?
    took=$((SECONDS - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [ "$status" -eq 0 ]; then
        printf 'fuzz: %-22s %10s executions in %3d s, no crash\n' "$target" "${execs:-?}" "$took"
    else
        failed=$((failed + 1))
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        printf 'fuzz: %-22s %10s executions in %3d s, CRASHED (exit %d)\n' "$target" "${execs:-?}" "$took" "$status"
        grep -E "Fatal error|ERROR: (AddressSanitizer|libFuzzer)|SUMMARY|deadly signal|timeout after" "$log" | head -n 8 | sed 's/^/    /'
        [ -n "$artifact" ] && echo "    input: $artifact (replay: $bin/$target $artifact)"
    fi
done

echo "fuzz: $count harnesses, $failed crashed"
[ "$failed" -eq 0 ]
