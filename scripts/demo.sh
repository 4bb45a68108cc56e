#!/usr/bin/env bash
# `make demo`: Porter loading URLs of several schemes through the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
P=.build/debug/porter
CS=.build/debug/CustomScheme
work=$(mktemp -d)
chmod 755 "$work"   # nginx workers run as nobody
. scripts/lib-nginx.sh
trap 'stop_nginx "$work/nginx"; rm -rf "$work"' EXIT

show() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@" || echo "(exit code $?)"; }

echo "== data: URLs (RFC 2397) =="
show $P 'data:,Hello%20World'
echo
show $P -i 'data:text/html;charset=utf-8;base64,PGI+UG9ydGVyPC9iPgo='

echo
echo "== file: URLs =="
printf 'Porter reads local files in chunks.\n' > "$work/note.txt"
dd if=/dev/urandom of="$work/blob.bin" bs=1M count=32 status=none
mkdir "$work/sub"
show $P "file://$work/note.txt"
show $P -w json -o "$work/copy.bin" "file://$work/blob.bin"
cmp "$work/blob.bin" "$work/copy.bin" && echo "copy.bin is identical to blob.bin"
show $P "file://$work/"
show $P -T "$work/note.txt" "file://$work/sub/"
show $P "file://$work/sub/note.txt"

echo
echo "== http: and https: on libcurl, against an nginx this demo starts on loopback =="
mkdir -p "$work/nginx" "$work/site"
printf 'Hello over HTTP from a local nginx.\n' > "$work/site/hello.txt"
make_test_ca "$work/nginx"
hp=$(free_port); tp=$(free_port)
start_nginx "$work/nginx" "$work/site" "$hp" "$tp"
show $P -i "http://127.0.0.1:$hp/hello.txt"
show $P -v "http://127.0.0.1:$hp/moved"
show $P "https://127.0.0.1:$tp/hello.txt"
show $P --cacert "$work/nginx/ca.pem" -w json "https://127.0.0.1:$tp/hello.txt"

echo
echo "== a background download: queued, the CLI returns, porterd finishes it =="
export XDG_RUNTIME_DIR="$work/run" XDG_STATE_HOME="$work/state" PORTERD_IDLE_EXIT=2
mkdir -m 700 "$work/run"
head -c 3000000 /dev/urandom > "$work/site/big.bin"
show $P --background demo -o "$work/big.bin" "http://127.0.0.1:$hp/big.bin"
show $P jobs demo
show $P jobs wait 1
cmp "$work/site/big.bin" "$work/big.bin" && echo "big.bin arrived whole, written by porterd after the CLI had exited"
trap 'kill $(cat "$work/run/porter/porterd.pid" 2>/dev/null) 2>/dev/null; stop_nginx "$work/nginx"; rm -rf "$work"' EXIT

echo
echo "== a custom scheme, registered at run time by Examples/CustomScheme =="
show $CS cli fortune://any/2
show $CS cli -v -u porter:demo fortune://private/3
show $CS cli handlers

echo
echo "== a plugin: gopher:// in plain C (Examples/CPlugin), found in a plugin folder, run in a sandboxed worker process =="
mkdir -m 755 "$work/plugins" "$work/gopher"
install -m 644 .build/debug/libGopherPlugin.so "$work/plugins/"
printf 'Hello from a gopher server on loopback.\n' > "$work/gopher/welcome.txt"
mkdir "$work/gopher/docs"
coproc GOPHERD { exec python3 scripts/gopherd.py --root "$work/gopher"; }
read -r _ gp <&"${GOPHERD[0]}"
trap 'kill $GOPHERD_PID 2>/dev/null; kill $(cat "$work/run/porter/porterd.pid" 2>/dev/null) 2>/dev/null; stop_nginx "$work/nginx"; rm -rf "$work"' EXIT
# A deliberately broken plugin beside it: its constructor dereferences NULL. The probe
# (porter-plugin-worker) runs it first, away from porter, which refuses it and goes on.
cc -shared -fPIC -O1 -I Sources/CPorterPlugin/include -DCRASH_CONSTRUCTOR -DSCHEME='"crashy"' \
    -o "$work/plugins/crashy.so" Tests/PorterPluginsTests/Fixtures/testplugin.c -lpthread
chmod 644 "$work/plugins/crashy.so"
show env PORTER_PLUGIN_PATH="$work/plugins" $P plugins
show $P --plugin-path "$work/plugins" "gopher://127.0.0.1:$gp/"
show $P --plugin-path "$work/plugins" "gopher://127.0.0.1:$gp/0/welcome.txt"
show $P handlers --plugin-path "$work/plugins"
# A plugin that crashes while serving: each plugin file runs in a sandboxed worker
# process, so the crash fails that load (pluginCrashed, exit 14), and the same program
# goes on with the gopher plugin and with the crashing plugin's next load.
cc -shared -fPIC -O1 -I Sources/CPorterPlugin/include -DSCHEME='"flaky"' \
    -o "$work/plugins/flaky.so" Tests/PorterPluginsTests/Fixtures/testplugin.c -lpthread
chmod 644 "$work/plugins/flaky.so"
printf '%s\n' "flaky://h/crash-start" "gopher://127.0.0.1:$gp/0/welcome.txt" "flaky://h/hello" > "$work/mixed.txt"
show $P --plugin-path "$work/plugins" --url-list "$work/mixed.txt" -w '[%{url_effective}: exit %{exitcode} %{errormsg}]\n'

echo
echo "== errors are clear and have their own exit codes =="
show $P nope://x
show $P "file://$work/missing"
show $P handlers
