#!/usr/bin/env bash
# Plugin load time: `porter -s data:,x` as `make install` puts it in place (release, the
# Swift runtime linked statically; Benchmarks/lib-installed.sh) with the plugins it
# installs (sftp, gopher), and with 10 small C plugins more on PORTER_PLUGIN_PATH.
# Prints a Markdown section; `make bench` includes it.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/porter-plugins.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
. Benchmarks/lib-installed.sh
prefix=$(installed_prefix "$work/prefix")
mkdir -m 755 "$work/none" "$work/ten" "$work/home"
for i in $(seq 1 10); do
    cc -shared -fPIC -O2 -I Sources/CPorterPlugin/include -DSCHEME="\"p$i\"" \
        -o "$work/ten/p$i.so" Tests/PorterPluginsTests/Fixtures/testplugin.c -lpthread
done
chmod 644 "$work"/ten/*.so
installed=$(find "$prefix/lib/porter/plugins" -name '*.so' | wc -l)
# Each configuration must really load its plugins: check before timing.
[ "$(HOME="$work/home" PORTER_PLUGIN_PATH="$work/none" "$prefix/bin/porter" plugins | grep -c '^loaded')" = "$installed" ]
[ "$(HOME="$work/home" PORTER_PLUGIN_PATH="$work/ten" "$prefix/bin/porter" plugins | grep -c '^loaded')" = $((installed + 10)) ]
python3 - "$prefix/bin/porter" "$work" <<'PY'
import os, statistics, subprocess, sys, time
porter, work = sys.argv[1], sys.argv[2]
def once(path):
    env = dict(os.environ, HOME=work + "/home", PORTER_PLUGIN_PATH=path)
    t = time.perf_counter()
    subprocess.run([porter, "-s", "data:,x"], env=env, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t) * 1000
rows = [("the installed plugins (sftp: Swift + libssh2; gopher)", work + "/none"),
        ("those and 10 C plugins (Fixtures/testplugin.c)", work + "/ten")]
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
print("`porter -s data:,x` start to exit, the porter `make install` puts in place (release, the Swift runtime linked statically) with the plugins it installs; median and best of 200 runs each, taken in turn after 5 warm-up rounds (`bash Benchmarks/plugins.sh`). Target: 10 plugins add < 20 ms.")
print()
print("| plugins on the search path | median ms | best ms | added (median) ms |")
print("|---|---:|---:|---:|")
for name, med, best in results:
    print(f"| {name} | {med:.1f} | {best:.1f} | {med - base:+.1f} |")
PY
