#!/usr/bin/env bash
# WebSocket memory for `make bench`: one 16 MiB binary message of random bytes sent to an
# echo server and taken back (Tests/PorterWebSocketTests/wsserver.py, the test suite's
# server, on loopback), plain and with permessage-deflate, through Porter (porter-bench
# ws-echo: the library an app links), swift-websocket's client and Foundation's
# URLSessionWebSocketTask (Benchmarks/Peers). Each prints the process's resident set before
# the message is sent (the message already made) and its peak until the echo is back.
# Goal (issue 23): the peak at most twice the message above that baseline.
# Needs B (porter-bench) and PEERS (the peers' bin folder) from Benchmarks/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${B:?porter-bench}" "${PEERS:?the bin folder of Benchmarks/Peers}"
python=.build/ftp-venv/bin/python
[ -x "$python" ] || { echo "websocket.sh: no $python: run scripts/install-deps.sh" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/porter-ws-bench.XXXXXX")
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -days 1 \
    -keyout "$work/leaf.key" -out "$work/leaf.pem" 2>/dev/null
ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(5)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r ws wss raw echo deflate <<<"$ports"
exec 3< <("$python" Tests/PorterWebSocketTests/wsserver.py $ws $wss $raw $echo $deflate \
    "$work/leaf.pem" "$work/leaf.key" "$work/closes.log" 2>"$work/server.log")
server=$!
ready=""
read -r -t 60 ready _ <&3 || true
[ "$ready" = READY ] || { echo "websocket.sh: wsserver.py did not start: $(cat "$work/server.log")" >&2; exit 1; }

size=$((16 << 20))
row() { # row LABEL COMMAND...: "| LABEL | baseline | peak | above | above ÷ message |"
    local label=$1; shift
    local out
    if out=$("$@" 2>"$work/err"); then
        read -r base peak <<<"$out"
        awk -v l="$label" -v b="$base" -v p="$peak" -v m="$size" \
            'BEGIN { printf "| %s | %.1f | %.1f | %.1f | %.2f |\n", l, b/1024, p/1024, (p-b)/1024, (p-b)*1024/m }'
    else
        local why
        why=$(head -c 160 "$work/err" | tr '\n|' '  ')
        echo "| $label | failed: $why | – | – | – |"
    fi
}
echo "| client | baseline (MiB) | peak (MiB) | above the baseline (MiB) | ÷ the message |"
echo "|---|---:|---:|---:|---:|"
row "Porter" "$B" ws-echo "ws://127.0.0.1:$ws/echo" $size
row "Porter, permessage-deflate" "$B" ws-echo "ws://127.0.0.1:$deflate/echo" $size
row "swift-websocket" "$PEERS/ws-client" ws-echo "ws://127.0.0.1:$ws/echo" $size
row "swift-websocket, permessage-deflate" "$PEERS/ws-client" ws-echo "ws://127.0.0.1:$deflate/echo" $size deflate
row "Foundation URLSessionWebSocketTask" "$PEERS/foundation-client" ws-echo "ws://127.0.0.1:$ws/echo" $size
