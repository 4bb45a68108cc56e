#!/usr/bin/env bash
# porterd's memory with a long queue (issue 23: ≤ 32 MiB with 10,000 queued tasks; the
# queue is in the journal, not in memory). N downloads are queued in one background session
# with one `porter --background -O --url-list`, to a port nobody listens on: porterd runs
# 6 at a time for that host (each fails at once and waits to retry with back-off), and the
# rest wait in the host's queue. Prints porterd's RSS (VmRSS) and peak (VmHWM) once all
# are queued, and again after `porter jobs` has listed all of them.
#
#   bash Benchmarks/porterd-memory.sh            # release build, 10,000 tasks
#   BG_TASKS=5000 BIN=.build/debug bash Benchmarks/porterd-memory.sh   # given binaries
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BIN:-}" ]; then
    swift build -c release --product porter >/dev/null
    swift build -c release --product porterd >/dev/null
    BIN=$(swift build -c release --show-bin-path)
fi
BIN=$(cd "$BIN" && pwd)
N=${BG_TASKS:-10000}
work=$(mktemp -d "${TMPDIR:-/tmp}/porterd-memory.XXXXXX")
chmod 755 "$work"
export XDG_RUNTIME_DIR=$work/run XDG_STATE_HOME=$work/state XDG_CACHE_HOME=$work/cache PORTERD_PATH=$BIN/porterd PORTERD_IDLE_EXIT=30
mkdir -m 700 "$work/run"
trap 'kill -9 $(cat "$work/run/porter/porterd.pid" 2>/dev/null) 2>/dev/null; rm -rf "$work"' EXIT
dead=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for i in $(seq "$N"); do echo "http://127.0.0.1:$dead/file-$i.bin"; done > "$work/urls.txt"
mkdir -p "$work/out"
(cd "$work/out" && "$BIN/porter" --background queue -O --url-list "$work/urls.txt" >/dev/null)
for _ in $(seq 600); do
    [ "$("$BIN/porter" jobs queue | wc -l)" -ge "$N" ] && break
    sleep 0.5
done
pid=$(cat "$work/run/porter/porterd.pid")
kib() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$pid/status"; }
rss=$(kib VmRSS); hwm=$(kib VmHWM)
"$BIN/porter" jobs queue > "$work/list.txt"
listed=$(wc -l < "$work/list.txt")
rss2=$(kib VmRSS); hwm2=$(kib VmHWM)
mib() { python3 -c "print(f'{$1/1024:.1f}')"; }
echo "| porterd with $N tasks queued (\`$BIN/porter --background -O --url-list\`) | RSS $(mib "$rss") MiB | peak $(mib "$hwm") MiB |"
echo "| after \`porter jobs\` listed all $listed | RSS $(mib "$rss2") MiB | peak $(mib "$hwm2") MiB |"
