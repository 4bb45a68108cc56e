#!/usr/bin/env bash
# The Debian package, installed and removed as a user would (one test in `make test`):
# `make deb` from the debug build, `apt-get install ./porter_*.deb` on this machine,
# then the installed porter (nothing of the build on its PATH): its version, a data:
# URL, the installed sftp plugin loaded in a worker, the same with the Swift toolchain
# hidden (the package's private runtime is enough), porter and porterd with the runtime
# linked statically and the sftp plugin in process there, `man -w porter`, a C plugin built
# with the installed pkg-config file, the docs; then `apt-get remove porter`, after which
# every file the package installed is gone.
# Built from the debug build (`make test` has made it) so the test costs no release
# build; `make deb` alone packages a release build the same way. Needs root (apt-get).
# Refuses to run over a porter installed by other means (it would overwrite and delete it).
set -uo pipefail
cd "$(dirname "$0")/.."
umask 022

tmp=$(mktemp -d /tmp/porter-deb-XXXXXX)
installed=
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "deb-check: FAIL: $*"; }
contains() { grep -qF -- "$2" <<<"$1"; }
apt() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }
finish_interrupted_dpkg() {
    if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
        echo "deb-check: dpkg was interrupted earlier on this machine; running dpkg --configure -a"
        DEBIAN_FRONTEND=noninteractive dpkg --configure -a --force-confold >/dev/null 2>&1 || true
    fi
}
cleanup() {
    if [ -n "$installed" ] && dpkg-query -W -f='${Status}' porter 2>/dev/null | grep -q 'ok installed'; then
        apt remove -y -qq porter >/dev/null 2>&1
    fi
    rm -rf "$tmp" .build/deb-debug
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then echo "deb-check: needs root (apt-get install)"; exit 1; fi

# Uncompressed: the debug build's porter and porterd carry the Swift runtime (about 110 MB
# each), and gzip took 2.5 minutes of the check on 2 busy cores; apt installs it the same.
if ! make -s deb CONFIG=debug DEB_DIR="$tmp" DEB_COMPRESSION=none >"$tmp/deb.log" 2>&1; then
    tail -n 30 "$tmp/deb.log"
    echo "deb-check: make deb failed"
    exit 1
fi
deb=$(ls "$tmp"/porter_*.deb)
version=$(dpkg-deb -f "$deb" Version)
# What the package holds: its files (and links) and its folders.
dpkg-deb -c "$deb" | awk '{ print substr($0, index($0, "./") + 1) }' | sed 's|/$||' | grep -v '^$' | LC_ALL=C sort >"$tmp/contents"
files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { print substr($0, index($0, "./") + 1) }' | LC_ALL=C sort)

# Not over a porter of someone else's: a package of that name is ours to replace (a
# run that died), but a file no package owns (make install PREFIX=/usr) is not.
if dpkg-query -W -f='${Status}' porter 2>/dev/null | grep -q 'ok installed'; then
    echo "deb-check: removing the porter package already installed ($(dpkg-query -W -f='${Version}' porter))"
    apt remove -y -qq porter >/dev/null || { echo "deb-check: cannot remove the installed porter package"; exit 1; }
fi
for f in $files; do
    if [ -e "$f" ] || [ -L "$f" ]; then echo "deb-check: $f exists and belongs to no porter package; not overwriting it"; exit 1; fi
done

# Install; on a machine whose package lists are empty or stale, refresh them first. A
# dpkg run that was killed earlier (apt then refuses everything with "dpkg was
# interrupted") is finished first, as apt's own message asks.
installed=yes
finish_interrupted_dpkg
if ! apt install -y -qq "$deb" >"$tmp/apt.log" 2>&1; then
    apt update -qq >>"$tmp/apt.log" 2>&1
    if ! apt install -y -qq "$deb" >>"$tmp/apt.log" 2>&1; then
        tail -n 30 "$tmp/apt.log"
        echo "deb-check: apt-get install $deb failed"
        exit 1
    fi
fi
dpkg-query -W -f='${Status} ${Version}' porter | grep -qx "install ok installed $version" && ok \
    || bad "dpkg does not list porter $version as installed"
# A program with packed relative relocations needs glibc 2.36: the package must say so.
if grep -q GLIBC_ABI_DT_RELR <<<"$(readelf -V /usr/bin/porter)"; then
    depends=$(dpkg-query -W -f='${Depends}' porter)
    grep -q 'libc6 (>= 2.36)' <<<"$depends" && ok || bad "porter needs glibc 2.36 (DT_RELR); Depends: $depends"
fi
[ "$(dpkg -L porter | grep -v '^/\.$' | LC_ALL=C sort)" = "$(cat "$tmp/contents")" ] && ok \
    || bad "dpkg -L porter differs from the package's contents"

# The installed porter, as a user runs it: from PATH, a home of its own.
mkdir -p "$tmp/home"
run() { env -i HOME="$tmp/home" PATH=/usr/bin:/bin "$@"; }
[ "$(run porter --version 2>&1)" = "$version" ] && ok || bad "porter --version: $(run porter --version 2>&1)"
[ "$(run porter data:,hello 2>&1)" = "hello" ] && ok || bad "porter data:,hello: $(run porter data:,hello 2>&1)"
listing=$(run porter plugins 2>&1)
contains "$listing" "loaded  /usr/lib/porter/plugins/libPorterSFTPPlugin.so" && contains "$listing" "mode: isolated" && ok \
    || bad "porter plugins did not load the installed sftp plugin in a worker: $listing"
page=$(run man -w porter 2>&1)
[ "$page" = /usr/share/man/man1/porter.1.gz ] && ok || bad "man -w porter: $page"
rendered=$(run env MANWIDTH=100 man porter 2>/dev/null)
contains "$rendered" "SYNOPSIS" && ok || bad "man porter does not render"
for doc in README.md UserGuide.md MigratingFromURLSession.md WritingPlugins.md copyright; do
    [ -s "/usr/share/doc/porter/$doc" ] && ok || bad "/usr/share/doc/porter/$doc is missing"
done
grep -qx 'ExecStart=/usr/bin/porterd' /usr/lib/systemd/user/porterd.service && ok || bad "porterd.service does not start /usr/bin/porterd"
bash -c '. /usr/share/bash-completion/completions/porter && complete -p porter' >/dev/null 2>&1 && ok \
    || bad "the bash completion does not register porter"

# No library from the Swift toolchain: with its runtime folder hidden (an empty tmpfs
# over it, in a mount namespace of this check only) porter and its sftp plugin still run.
runtime=$(swift -print-target-info | python3 -c 'import json, sys; print(json.load(sys.stdin)["paths"]["runtimeLibraryPaths"][0])')
toolchain=$(for f in /usr/bin/porter /usr/bin/porterd /usr/bin/porter-plugin-worker /usr/lib/porter/plugins/*.so; do ldd "$f"; done \
    | grep -F -e "$runtime" -e "not found")
[ -z "$toolchain" ] && ok || bad "installed files load from the toolchain: $toolchain"
hidden=$(run unshare -m sh -c 'mount -t tmpfs none "$0" && porter data:,alone && porter plugins' "$runtime" 2>&1)
contains "$hidden" "alone" && contains "$hidden" "loaded  /usr/lib/porter/plugins/libPorterSFTPPlugin.so" && ok \
    || bad "without the toolchain's runtime folder: $hidden"
# porter and porterd carry the runtime (no Swift library named, no RUNPATH); the worker and
# the sftp plugin use the package's private shared runtime, also when the plugin runs in
# process in the static porter (a second runtime there).
for program in porter porterd; do
    dyn=$(readelf -d "/usr/bin/$program" | grep -E '\((NEEDED|RUNPATH|RPATH)\)' | grep -E 'swift|Foundation|dispatch|BlocksRuntime|RUNPATH|RPATH')
    [ -z "$dyn" ] && ok || bad "/usr/bin/$program names the shared Swift runtime or a RUNPATH: $dyn"
done
# (ldd's output taken whole first: under pipefail, `ldd | grep -q` fails when grep stops
# reading at its match before ldd has written the rest.)
worker_libs=$(ldd /usr/bin/porter-plugin-worker)
grep -q 'lib/porter/swift/libswiftCore.so' <<<"$worker_libs" && ok \
    || bad "porter-plugin-worker does not load the package's shared runtime: $(grep swiftCore <<<"$worker_libs")"
inproc=$(run unshare -m sh -c 'mount -t tmpfs none "$0" && PORTER_PLUGINS_IN_PROCESS=1 porter plugins' "$runtime" 2>&1)
contains "$inproc" "loaded  /usr/lib/porter/plugins/libPorterSFTPPlugin.so" && contains "$inproc" "mode: in-process" && ok \
    || bad "the sftp plugin in process in the installed porter, toolchain hidden: $inproc"

# pkg-config and the installed header: a C plugin built with them loads.
cflags=$(run pkg-config --cflags porter-plugin 2>&1 | sed 's/ *$//')
[ "$cflags" = "-I/usr/include/porter" ] && ok || bad "pkg-config --cflags porter-plugin: $cflags"
cp scripts/tiny-plugin.c "$tmp/tiny.c"
mkdir -p "$tmp/plugins"
# shellcheck disable=SC2086 # the flags are words
if run cc -shared -fPIC -Wall -Wextra -Werror $cflags -o "$tmp/plugins/libtiny.so" "$tmp/tiny.c" >"$tmp/cc.log" 2>&1; then ok; else
    bad "a C plugin does not compile with pkg-config's flags: $(cat "$tmp/cc.log")"; fi
chmod 755 "$tmp" "$tmp/plugins"
tiny=$(run porter --plugin-path "$tmp/plugins" -sS tiny://x/y 2>&1)
[ "$tiny" = "tiny: tiny://x/y" ] && ok || bad "the C plugin built against the installed header: $tiny"

# Remove: every file the package installed is gone, and Porter's own folders with them.
if apt remove -y -qq porter >"$tmp/remove.log" 2>&1; then ok; else bad "apt-get remove porter: $(tail -n 5 "$tmp/remove.log")"; fi
installed=
left=$(for f in $files; do if [ -e "$f" ] || [ -L "$f" ]; then echo "$f"; fi; done)
[ -z "$left" ] && ok || bad "left after apt-get remove: $left"
for d in /usr/lib/porter /usr/include/porter /usr/share/doc/porter; do [ ! -e "$d" ] && ok || bad "$d is left"; done
dpkg-query -W -f='${Status}' porter 2>/dev/null | grep -q 'ok installed' && bad "dpkg still lists porter" || ok
[ -z "$(command -v porter)" ] || [ "$(command -v porter)" != /usr/bin/porter ] && ok || bad "porter is still on PATH"

echo "deb-check: $passed checks passed, $failed failed"
[ "$failed" = 0 ]
