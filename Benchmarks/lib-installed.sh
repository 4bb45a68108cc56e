# Sourced by the benchmark scripts: every figure is taken on the files `make install`
# puts in place (CONFIG=release; porter and porterd with the Swift runtime linked
# statically, the worker and plugins dynamically: what users get).
#
# installed_prefix DIR: prints the PREFIX to measure. `make bench` (Benchmarks/run.sh)
# installs once and exports PORTER_PREFIX for the scripts it runs; a script run on its
# own installs into DIR (its scratch folder, removed with it).
installed_prefix() {
    if [ -n "${PORTER_PREFIX:-}" ]; then
        echo "$PORTER_PREFIX"
        return
    fi
    local log
    log=$(mktemp)
    if ! make --no-print-directory install PREFIX="$1" CONFIG=release >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
    echo "$1"
}
