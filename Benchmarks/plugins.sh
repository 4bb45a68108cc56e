#!/usr/bin/env bash
# Plugin load time: `porter -s data:,x` (release, shared Swift runtime, as a program that
# loads Swift plugins must be built) with no plugins, with 10 small C plugins, and with
# the sftp plugin (Swift, libssh2). Prints a Markdown section; `make bench` includes it.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product porter >/dev/null
swift build -c release --product PorterSFTPPlugin >/dev/null
BIN=$(swift build -c release --show-bin-path)
work=$(mktemp -d "${TMPDIR:-/tmp}/porter-plugins.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -m 755 "$work/none" "$work/ten" "$work/sftp" "$work/home"
for i in $(seq 1 10); do
    cc -shared -fPIC -O2 -I Sources/CPorterPlugin/include -DSCHEME="\"p$i\"" \
        -o "$work/ten/p$i.so" Tests/PorterPluginsTests/Fixtures/testplugin.c -lpthread
done
chmod 644 "$work"/ten/*.so
install -m 644 "$BIN/libPorterSFTPPlugin.so" "$work/sftp/"
# Each configuration must really load its plugins: check before timing.
[ "$(HOME="$work/home" PORTER_PLUGIN_PATH="$work/ten" "$BIN/porter" plugins | grep -c '^loaded')" = 10 ]
[ "$(HOME="$work/home" PORTER_PLUGIN_PATH="$work/sftp" "$BIN/porter" plugins | grep -c '^loaded')" = 1 ]
python3 - "$BIN/porter" "$work" <<'PY'
import os, statistics, subprocess, sys, time
porter, work = sys.argv[1], sys.argv[2]
def once(path):
    env = dict(os.environ, HOME=work + "/home", PORTER_PLUGIN_PATH=path)
    t = time.perf_counter()
    subprocess.run([porter, "-s", "data:,x"], env=env, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t) * 1000
rows = [("no plugins", work + "/none"), ("10 C plugins (Fixtures/testplugin.c)", work + "/ten"),
        ("the sftp plugin (Swift + libssh2)", work + "/sftp")]
# Round robin, so that drift in the machine's speed hits every configuration alike.
times = {path: [] for _, path in rows}
for i in range(205):
    for _, path in rows:
        t = once(path)
        if i >= 5:   # warm-up rounds are dropped
            times[path].append(t)
results = [(name, statistics.median(times[path]), min(times[path])) for name, path in rows]
base = results[0][1]
print("## Plugin load time")
print()
print("`porter -s data:,x` start to exit, release build linked to the shared Swift runtime; median and best of 200 runs each, taken in turn after 5 warm-up rounds (`bash Benchmarks/plugins.sh`). Target: 10 plugins add < 20 ms.")
print()
print("| plugins on the search path | median ms | best ms | added (median) ms |")
print("|---|---:|---:|---:|")
for name, med, best in results:
    print(f"| {name} | {med:.1f} | {best:.1f} | {med - base:+.1f} |")
PY
