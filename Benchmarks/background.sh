#!/usr/bin/env bash
# Background sessions (porterd) at scale and speed, on the installed porter and porterd
# (`make install`: release, with the Swift runtime linked statically; Benchmarks/lib-installed.sh):
#   - 10,000 downloads queued in one session (8 at a time run, to a port nobody listens
#     on, so every task stays in the journal): the time to queue them, `porter jobs` over
#     all of them, and porterd's peak RSS;
#   - one 1 GiB download from nginx on loopback: `porter -o` in-process against
#     `porter --background -o` + `porter jobs speed wait` (best of three each).
# Prints a Markdown table; `make bench` appends it to BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# porter-bench (a library client of background sessions, not installed) is a release build.
swift build -c release --product porter-bench >/dev/null
bench=$(swift build -c release --show-bin-path)/porter-bench
work=$(mktemp -d "${TMPDIR:-/tmp}/porter-bg.XXXXXX")
chmod 755 "$work"
. scripts/lib-nginx.sh
. Benchmarks/lib-installed.sh
# porterd may have left already (PORTERD_IDLE_EXIT): a failed kill must neither end the
# trap before nginx is stopped (nginx would keep `make bench`'s pipe open) nor fail the script.
trap 'stop_nginx "$work/nginx"; kill -9 $(cat "$work/run/porter/porterd.pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
prefix=$(installed_prefix "$work/prefix")
P=$prefix/bin/porter
export XDG_RUNTIME_DIR=$work/run XDG_STATE_HOME=$work/state PORTERD_PATH=$prefix/bin/porterd PORTERD_IDLE_EXIT=5
mkdir -m 700 "$work/run"
# Milliseconds from bash's own clock: a clock in another program (python3 -c, as before)
# put that program's start-up, 20 to 300 ms on a busy machine, inside every interval.
ms() { local t=${EPOCHREALTIME/./}; echo $((10#$t / 1000)); }

N=${BG_TASKS:-10000}
dead=$(free_port)
mkdir -p "$work/out"
for i in $(seq "$N"); do echo "http://127.0.0.1:$dead/f$i"; done > "$work/urls.txt"
t0=$(ms)
(cd "$work/out" && "$P" --background scale -O --url-list "$work/urls.txt" >/dev/null)
t1=$(ms)
sleep 2
# Listing: the best of five (each a whole `porter jobs` run, the process's start included).
list_ms=""
for _ in 1 2 3 4 5; do
    t2=$(ms)
    "$P" jobs scale > "$work/list.txt"
    t3=$(ms)
    [ -z "$list_ms" ] || [ $((t3 - t2)) -lt "$list_ms" ] && list_ms=$((t3 - t2))
done
count=$(wc -l < "$work/list.txt")
pid=$(cat "$work/run/porter/porterd.pid")
rss=$(awk '/VmHWM/ {print int($2/1024)}' "/proc/$pid/status")
read -r listed attach_ms all_ms <<<"$("$bench" background-list scale)"
rss_after=$(awk '/VmHWM/ {print int($2/1024)}' "/proc/$pid/status")
echo "| $N tasks queued in one session (one \`porter --background -O --url-list\`) | $((t1 - t0)) ms |"
echo "| porter jobs listing all $count of them (process start included; best of 5) | $list_ms ms |"
echo "| an app's background session attaching to them (porterd sends all $listed) | $attach_ms ms |"
echo "| then \`session.allTasks\` | $all_ms ms |"
echo "| porterd peak RSS with them | $rss MiB ($rss_after MiB once it has sent them all to an app) |"
kill -9 "$pid" 2>/dev/null || true; rm -rf "$work/state" "$work/run/porter"

mkdir -p "$work/nginx" "$work/site"
head -c 1073741824 /dev/zero > "$work/site/1g.bin"
make_test_ca "$work/nginx"
hp=$(free_port); tp=$(free_port)
start_nginx "$work/nginx" "$work/site" "$hp" "$tp"
best_in=999999; best_bg=999999
for round in 1 2 3; do
    rm -f "$work/in.bin" "$work/bg.bin"
    a=$(ms); "$P" -s -o "$work/in.bin" "http://127.0.0.1:$hp/1g.bin"; b=$(ms)
    [ $((b - a)) -lt $best_in ] && best_in=$((b - a))
    a=$(ms)
    id=$("$P" --background speed -o "$work/bg.bin" "http://127.0.0.1:$hp/1g.bin" | cut -f1)
    "$P" jobs speed wait "$id" >/dev/null
    b=$(ms)
    [ $((b - a)) -lt $best_bg ] && best_bg=$((b - a))
    cmp -s "$work/in.bin" "$work/bg.bin" || { echo "background download differs" >&2; exit 1; }
done
sync_ms() { local a b; a=$(ms); dd if=/dev/zero of="$work/dd.bin" bs=1M count=1024 conv=fdatasync status=none; b=$(ms); rm -f "$work/dd.bin"; echo $((b - a)); }
echo "| 1 GiB written and synced by \`dd conv=fdatasync\` (the disk's floor for a durable 1 GiB) | $(sync_ms) ms |"
echo "| 1 GiB over http, in-process \`porter -o\` (not synced) | $best_in ms |"
echo "| 1 GiB over http, \`porter --background -o\` + \`porter jobs wait\` (synced before it counts as done) | $best_bg ms ($(python3 -c "print(round($best_in/$best_bg, 2))")× in-process) |"
