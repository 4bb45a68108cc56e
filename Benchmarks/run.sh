#!/usr/bin/env bash
# `make bench`: Porter as `make install` puts it in place (CONFIG=release; porter and
# porterd with the Swift runtime linked statically, the worker and plugins dynamically),
# installed into a scratch PREFIX, against cat, cp, curl,
# the libcurl C client, AsyncHTTPClient and Foundation's URLSession on this machine in
# this run. BENCH_RUNS (2) runs of every timed table, side by side. Writes BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v curl >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl; }
command -v valgrind >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind; }

work=$(mktemp -d "${TMPDIR:-/tmp}/porter-bench.XXXXXX")
chmod 755 "$work"   # nginx workers run as nobody
. scripts/lib-nginx.sh
. Benchmarks/lib-installed.sh
trap 'stop_nginx "$work/nginx"; rm -rf "$work"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# What users get: `make install PREFIX=$work/prefix`. The scripts below measure the same
# files (PORTER_PREFIX).
echo "make install PREFIX=$work/prefix CONFIG=release..." >&2
PORTER_PREFIX=$(installed_prefix "$work/prefix")
export PORTER_PREFIX
P=$PORTER_PREFIX/bin/porter
# porter-bench is the harness (a clock, GNU time's wrapper, library-level measures).
swift build -c release --product porter-bench >/dev/null
B=$(swift build -c release --show-bin-path)/porter-bench

echo "building the peers (AsyncHTTPClient, Foundation, swift-websocket)..." >&2
swift build -c release --package-path Benchmarks/Peers >/dev/null
PEERS=$(swift build -c release --package-path Benchmarks/Peers --show-bin-path)

out=BENCHMARKS.md.tmp

echo "data: decoding..." >&2
data=$($B data 100)
echo "registry..." >&2
registry=$($B registry 100)
echo "cookies..." >&2
cookies=$($B cookies)

echo "file: 1 GiB..." >&2
head -c 64M /dev/urandom > "$work/part"
for i in $(seq 16); do cat "$work/part"; done > "$work/src"
rm "$work/part"
cat "$work/src" > /dev/null   # warm the page cache
src="$work/src"

# measure NAME CMD...: best elapsed of 5 runs (porter-bench's clock, ns) and the highest
# peak RSS of the 5 (GNU time's %M: it forks from a small process, so %M is the command's own)
measure() {
    local name=$1; shift
    local bestt="" maxm=0 status=0
    for run in 1 2 3 4 5; do
        rm -f "$work/dst"
        local outer inner t m x
        inner=$(mktemp)
        outer=$("$B" measure /usr/bin/time -o "$inner" -f "%M" "$@" 2>/dev/null | tail -n 1)
        read -r t _ x <<<"$outer"
        m=$(tail -n 1 "$inner"); rm -f "$inner"
        [ "$x" = 0 ] || status=$x
        if [ -z "$bestt" ] || awk "BEGIN{exit !($t < $bestt)}"; then bestt=$t; fi
        [ "$m" -gt "$maxm" ] && maxm=$m
    done
    echo "$name $bestt $maxm $status"
}
# shared_objects CMD...: how many shared objects the dynamic linker loads into CMD's own
# process (DT_NEEDED and dlopen alike; not its children's): LD_DEBUG=files writes one
# "generating link map" per object, into a file per process.
shared_objects() {
    rm -rf "$work/ld" && mkdir "$work/ld"
    LD_DEBUG=files LD_DEBUG_OUTPUT="$work/ld/out" sh -c 'echo $$ > "$0/pid"; exec "$@"' "$work/ld" "$@" >/dev/null 2>&1 || true
    grep -c 'generating link map' "$work/ld/out.$(cat "$work/ld/pid")" || true
}
echo "http: nginx on loopback..." >&2
cc -O2 -o "$work/curl-multi" Benchmarks/Peers/c/curl-multi.c -lcurl
mkdir -p "$work/nginx" "$work/site"
make_test_ca "$work/nginx"
ln "$src" "$work/site/1g.bin" 2>/dev/null || cp "$src" "$work/site/1g.bin"
head -c 1024 /dev/urandom > "$work/site/1k.bin"
mkdir -p "$work/site/cacheable" && cp "$work/site/1k.bin" "$work/site/cacheable/1k.bin"
hp=$(free_port); tp=$(free_port)
start_nginx "$work/nginx" "$work/site" "$hp" "$tp"
H="http://127.0.0.1:$hp"; S="https://127.0.0.1:$tp"; CA="$work/nginx/ca.pem"
for i in $(seq 5000); do echo "$H/1k.bin"; done > "$work/urls.txt"
for i in $(seq 5000); do echo "$H/cacheable/1k.bin"; done > "$work/cached-urls.txt"
for i in $(seq 5000); do printf 'url = "%s/1k.bin"\noutput = "/dev/null"\n' "$H"; done > "$work/curl-urls.conf"

# Foundation trusts only the system bundle: W3 gives it the test CA in a private mount namespace.
cat /etc/ssl/certs/ca-certificates.crt "$CA" > "$work/bundle.crt"


# One run of every timed measurement; `print_run` writes its tables. `make bench` makes
# BENCH_RUNS of them (2 by default): figures that do not reproduce show up side by side.
measure_run() {
    rows=()
    rows+=("$(measure "cat > file" sh -c 'cat "$0" > "$1"' "$src" "$work/dst")")
    rows+=("$(measure "porter -o file" "$P" -s -o "$work/dst" "file://$src")")
    rows+=("$(measure "curl -o file" curl -s -o "$work/dst" "file://$src")")
    rows+=("$(measure "Foundation URLSession download" "$B" foundation-file "file://$src" "$work/dst")")
    rows+=("$(measure "cat > /dev/null" sh -c 'cat "$0" > /dev/null' "$src")")
    rows+=("$(measure "porter > /dev/null" sh -c '"$0" -s "$1" > /dev/null' "$P" "file://$src")")
    rows+=("$(measure "curl > /dev/null" sh -c 'curl -s "$0" > /dev/null' "file://$src")")
    rows+=("$(measure "cp" cp "$src" "$work/dst")")
    baseline=$(measure "porter data:,x (start-up)" "$P" -s -o /dev/null "data:,x")
    baseline_curl=$(measure "curl file: (start-up)" curl -s -o /dev/null "file:///etc/hostname")
    objects=$(shared_objects "$P" -s -o /dev/null "data:,x")
    objects_curl=$(shared_objects curl -s -o /dev/null "file:///etc/hostname")

    w1=(); w2=(); w3=(); w4=()
    w1+=("$(measure "curl" curl -s -o /dev/null "$H/1g.bin")")
    w1+=("$(measure "libcurl C client (multi)" "$work/curl-multi" get "$H/1g.bin")")
    w1+=("$(measure "Porter" sh -c '"$0" -s "$1" > /dev/null' "$P" "$H/1g.bin")")
    w1+=("$(measure "AsyncHTTPClient" "$PEERS/ahc-client" get "$H/1g.bin")")
    w1+=("$(measure "Foundation URLSession" "$PEERS/foundation-client" get "$H/1g.bin")")
    w2+=("$(measure "curl" curl -s --parallel --parallel-max 32 -K "$work/curl-urls.conf")")
    w2+=("$(measure "libcurl C client (multi)" "$work/curl-multi" many "$H/1k.bin" 32 5000)")
    w2+=("$(measure "Porter" sh -c '"$0" -s --url-list "$1" --concurrency 32 > /dev/null' "$P" "$work/urls.txt")")
    w2+=("$(measure "AsyncHTTPClient" "$PEERS/ahc-client" many "$H/1k.bin" 32 5000)")
    w2+=("$(measure "Foundation URLSession" "$PEERS/foundation-client" many "$H/1k.bin" 32 5000)")
    # W4: the same 1 KiB file 5,000 times with Porter's cache on (one network load, then
    # cache hits), beside curl fetching it over the network as in W2.
    w4+=("$(measure "curl (network)" curl -s --parallel --parallel-max 32 -K "$work/curl-urls.conf")")
    rm -rf "$work/xdg-cache"
    w4+=("$(measure "Porter --cache (hits)" env XDG_CACHE_HOME="$work/xdg-cache" sh -c '"$0" -s --cache --url-list "$1" --concurrency 32 > /dev/null' "$P" "$work/cached-urls.txt")")
    w3+=("$(measure "curl" curl -s --cacert "$CA" -o /dev/null "$S/1g.bin")")
    w3+=("$(measure "libcurl C client (multi)" env PORTER_BENCH_CA="$CA" "$work/curl-multi" get "$S/1g.bin")")
    w3+=("$(measure "Porter" sh -c '"$0" -s --cacert "$1" "$2" > /dev/null' "$P" "$CA" "$S/1g.bin")")
    w3+=("$(measure "AsyncHTTPClient" env PORTER_BENCH_CA="$CA" "$PEERS/ahc-client" get "$S/1g.bin")")
    w3+=("$(measure "Foundation URLSession" unshare -m sh -c 'mount --bind "$0" /etc/ssl/certs/ca-certificates.crt && exec "$1" get "$2"' "$work/bundle.crt" "$PEERS/foundation-client" "$S/1g.bin")")

}

print_run() {
        echo "## file: — 1 GiB from the page cache"
        echo
        echo "Seconds: best of five. Peak RSS: the highest of the five, from GNU time (\`%M\`)."
        echo
        echo "Time ÷ reference: a command's seconds over \`cp\`'s when it writes a file, over \`cat > /dev/null\`'s when it writes to /dev/null (goals for porter: ≤ 1.05 and ≤ 1.10)."
        echo
        echo "| command | seconds | MB/s | time ÷ reference | peak RSS (MiB) | exit |"
        echo "|---|---:|---:|---:|---:|---:|"
        cp_file=$(awk '{print $(NF-2)}' <<<"${rows[7]}")
        cat_null=$(awk '{print $(NF-2)}' <<<"${rows[4]}")
        for r in "${rows[@]}"; do
            name=${r% * * *}; rest=${r##"$name "}
            read -r t m x <<<"$rest"
            ref=$cp_file; [[ "$name" == *"/dev/null"* ]] && ref=$cat_null
            if [ "$x" = 0 ]; then
                awk -v n="$name" -v t="$t" -v m="$m" -v x="$x" -v ref="$ref" -v b="$gib" \
                    'BEGIN{printf "| %s | %.3f | %.0f | %.2f | %.1f | %s |\n", n, t, b/t/1e6, t/ref, m/1024, x}'
            else
                echo "| $name | failed | – | – | – | $x |"
            fi
        done
        foundation_error=$("$B" foundation-file "file://$src" "$work/dst" 2>&1 >/dev/null | head -c 300 || true)
        echo
        echo "Foundation's URLSession on Linux cannot load file: URLs at all; it answered: \`${foundation_error}\`"
        read -r _ _ _ bt bm bx <<<"$baseline"
        read -r _ _ _ ct cm cx <<<"$baseline_curl"
        echo
        echo "Start-up: \`porter -s -o /dev/null data:,x\` took $(awk -v t="$bt" 'BEGIN{printf "%.1f", t*1000}') ms, peaked at $(awk -v m="$bm" 'BEGIN{printf "%.1f", m/1024}') MiB and loaded $objects shared objects; \`curl -s -o /dev/null file:///etc/hostname\` took $(awk -v t="$ct" 'BEGIN{printf "%.1f", t*1000}') ms, $(awk -v m="$cm" 'BEGIN{printf "%.1f", m/1024}') MiB and $objects_curl shared objects (time: best of five; RSS: GNU time's \`%M\`; shared objects: \`LD_DEBUG=files\`, the process's own, dlopen included; goals for porter: 5 ms, 12 MiB)."
        echo
        # http_table TITLE UNIT ROWS...: UNIT is "MB/s" (one 1 GiB body) or "req/s" (5,000 requests)
        http_table() {
            local unit=$1; shift
            local ref
            ref=$(awk '{print $(NF-2)}' <<<"$1")
            echo "| client | seconds | $unit | × curl | peak RSS (MiB) | exit |"
            echo "|---|---:|---:|---:|---:|---:|"
            for r in "$@"; do
                local name=${r% * * *} rest t m x
                rest=${r##"$name "}
                read -r t m x <<<"$rest"
                if [ "$x" = 0 ]; then
                    awk -v n="$name" -v t="$t" -v m="$m" -v x="$x" -v ref="$ref" -v b="$gib" -v unit="$unit" \
                        'BEGIN{v = unit == "req/s" ? 5000/t : b/t/1e6; printf "| %s | %.3f | %.0f | %.2f | %.1f | %s |\n", n, t, v, ref/t, m/1024, x}'
                else
                    echo "| $name | failed | – | – | – | $x |"
                fi
            done
        }
        echo "## http: — nginx on loopback, 1 worker, sharing the $(nproc) cores with the client"
        echo
        echo "Porter is the \`porter\` that \`make install\` put in a scratch PREFIX (release build; porter with the Swift runtime linked statically, its worker and plugins, installed beside it, dynamically). The libcurl C client is \`Benchmarks/Peers/c/curl-multi.c\` (libcurl's multi interface, no language runtime). AsyncHTTPClient and Foundation's URLSession run small clients in \`Benchmarks/Peers\` (release build). Seconds: best of five; peak RSS: the highest of the five."
        echo
        echo "### W1: one 1 GiB GET, body discarded"
        echo
        http_table "MB/s" "${w1[@]}"
        echo
        echo "### W2: 5,000 GETs of a 1 KiB file, 32 in flight, one session"
        echo
        http_table "req/s" "${w2[@]}"
        echo
        echo "### W3: W1 over HTTPS (HTTP/2 where the client offers it)"
        echo
        http_table "MB/s" "${w3[@]}"
        echo
        echo "### W4: 5,000 GETs of a cacheable 1 KiB file (max-age=600), 32 in flight: Porter's cache against curl over the network"
        echo
        echo "Porter runs with \`--cache\` (its persistent cache in a fresh folder): one network load, the rest served by the cache. Goal: at least 3× curl fetching the file from nginx."
        echo
        http_table "req/s" "${w4[@]}"
        echo
}

gib=$(( $(stat -c %s "$src") ))
runs=${BENCH_RUNS:-2}
: > "$work/runs.md"
for run in $(seq "$runs"); do
    echo "run $run of $runs: file: and http:..." >&2
    measure_run
    echo "run $run of $runs: plugin load time..." >&2
    plugins=$(bash Benchmarks/plugins.sh)
    echo "run $run of $runs: plugins out of process..." >&2
    isolation=$(bash Benchmarks/isolation.sh)
    echo "run $run of $runs: background sessions (porterd)..." >&2
    background=$(bash Benchmarks/background.sh)
    echo "run $run of $runs: WebSocket 16 MiB echo..." >&2
    websocket=$(B=$B PEERS=$PEERS bash Benchmarks/websocket.sh) \
        || websocket="(\`Benchmarks/websocket.sh\` failed: its error is above in make bench's output)"
    {
        echo "# Run $run of $runs"
        echo
        print_run
        echo "$plugins"
        echo
        echo "$isolation"
        echo
        echo "## Background sessions (porterd)"
        echo
        echo "\`Benchmarks/background.sh\`: the installed porter and porterd. Ten thousand downloads queued in one session to a port nobody listens on (so all stay in the journal, retrying), then one 1 GiB download in-process and in the background. A background download counts as done only once its file is synced to disk (it must survive a reboot), so its floor is the disk's: the \`dd conv=fdatasync\` row. Targets: listing 10,000 tasks under 100 ms, porterd at most 32 MiB (issue 23), a background download at least 0.9× in-process."
        echo
        echo "| measure | figure |"
        echo "|---|---|"
        echo "$background"
        echo
        echo "## WebSocket: one 16 MiB message echoed"
        echo
        echo "\`Benchmarks/websocket.sh\`: one 16 MiB binary message of random bytes sent to the test suite's echo server (\`wsserver.py\`, Python websockets, loopback) and taken back, by Porter's WebSocket task (\`porter-bench ws-echo\`, the library an app links), swift-websocket's client and Foundation's URLSessionWebSocketTask (\`Benchmarks/Peers\`). Baseline: the process's resident set with the message made, before it is sent; peak: the highest until the echo is back (reset first). Goal (issue 23): at most twice the message above the baseline."
        echo
        echo "$websocket"
        echo
    } >> "$work/runs.md"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Instruction counts do not depend on the machine's load: once.
echo "callgrind: 1,000 GETs of 1 KiB, 32 in flight (Benchmarks/profile-w2.sh)..." >&2
profile=$(PROFILE_DIR="$work/profile" bash Benchmarks/profile-w2.sh "$P" 1000)
pi() { awk -v n="$1" '$1 == n {print $2}' <<<"$profile" | tr -d ,; }
{
    echo "# Benchmarks"
    echo
    echo "Made by \`make bench\` (\`Benchmarks/run.sh\`) on $(date -u +%Y-%m-%d), $(nproc) cores, $(uname -m), Swift $(swift --version 2>/dev/null | sed -nE 's/.*Swift version ([0-9.]+).*/\1/p' | head -1), curl $(curl --version | head -1 | cut -d' ' -f2)."
    echo "Porter is measured as \`make install\` puts it in place: \`make install PREFIX=<scratch> CONFIG=release\` (release build; porter and porterd with the Swift runtime linked statically, the worker and plugins dynamically), then \`<scratch>/bin/porter\`, \`porterd\`, \`porter-plugin-worker\` and the installed plugins."
    echo "Load average (1, 5, 15 min) when the run began: $load_before; when the timed runs ended: $load_after. Timings taken while other programs run are noisy; compare ratios within one run, and the instruction counts below across runs."
    echo
    echo "## Instructions per request (callgrind)"
    echo
    echo "\`PROFILE_DIR=DIR bash Benchmarks/profile-w2.sh PREFIX/bin/porter 1000\`: 1,000 GETs of a 1 KiB file, 32 in flight, from nginx on loopback, under \`valgrind --tool=callgrind\` (every thread of the process). Goal (issue 23): Porter at most 1.5× the C client."
    echo
    echo "| client | instructions | per request | × C client |"
    echo "|---|---:|---:|---:|"
    for n in curl-multi curl porter; do
        label=$n; [ "$n" = curl-multi ] && label="libcurl C client (multi)"; [ "$n" = curl ] && label="curl CLI"; [ "$n" = porter ] && label="Porter"
        awk -v l="$label" -v i="$(pi "$n")" -v c="$(pi curl-multi)" 'BEGIN{printf "| %s | %.1f M | %.0f k | %.2f |\n", l, i/1e6, i/1e3/1000, i/c}'
    done
    echo
    echo "The timed tables: \`BENCH_RUNS\` (2) runs of each, one after the other, below."
    echo
    sed -e "s/^### /#### /" -e "s/^## /### /" -e "s/^# Run/## Run/" "$work/runs.md"
    echo "## data: — a 100 MB payload as a base64 data: URL"
    echo
    echo '```'
    echo "$data"
    echo '```'
    echo
    echo "- \`porter_decode\`: \`DataURL.decode\` on the URL text (percent-decoding, WHATWG forgiving base64, media type)."
    echo "- \`foundation_base64\`: \`Data(base64Encoded:)\` on the base64 part alone, for reference."
    echo "- \`porter_session\` / \`foundation_session\`: the same URL loaded end to end by a data task of each library."
    echo
    echo "## Handler registry lookup"
    echo
    echo '```'
    echo "$registry"
    echo '```'
    echo
    echo "Each lookup finds the newest of three handlers for the scheme that accepts the request; the other handlers are of other schemes and cost nothing (scheme index)."
    echo
    echo "## Cookie header"
    echo
    echo '```'
    echo "$cookies"
    echo '```'
    echo
    echo "Microseconds to build the \`Cookie\` header of one request from a \`MemoryCookieStore\` holding 10,000 cookies, 20 of which match (target: under 20 µs). The store is indexed by domain, so the cookies of other sites cost nothing."
    echo
} > "$out"
mv "$out" BENCHMARKS.md
cat BENCHMARKS.md
