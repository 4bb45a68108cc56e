#!/usr/bin/env bash
# W2 under valgrind's callgrind: instruction counts of `porter --url-list` fetching a
# 1 KiB file N times (default 1,000), 32 in flight, from nginx on loopback, beside the
# libcurl C client and the curl CLI doing the same. Instruction counts do not depend on
# the machine's load, so they compare across runs and machines.
#   Benchmarks/profile-w2.sh PORTER_BINARY [N]
# Prints "name instructions" per client and leaves callgrind.out.* in $PROFILE_DIR
# (default .build/profile-w2) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${2:-1000}
out=${PROFILE_DIR:-$PWD/.build/profile-w2}
mkdir -p "$out"
# Valgrind 3.19 cannot read the DWARF 5 that Swift's toolchain writes: profile a copy
# without debug information (the symbol table still names every function).
P="$out/porter"
objcopy --strip-debug "$1" "$P"
command -v valgrind >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind; }
cc -O2 -o "$out/curl-multi" Benchmarks/Peers/c/curl-multi.c -lcurl
work=$(mktemp -d "${TMPDIR:-/tmp}/porter-w2.XXXXXX")
chmod 755 "$work"
. scripts/lib-nginx.sh
trap 'stop_nginx "$work/nginx"; rm -rf "$work"' EXIT
mkdir -p "$work/nginx" "$work/site"
make_test_ca "$work/nginx"
head -c 1024 /dev/urandom > "$work/site/1k.bin"
hp=$(free_port); tp=$(free_port)
start_nginx "$work/nginx" "$work/site" "$hp" "$tp"
H="http://127.0.0.1:$hp"
for i in $(seq "$N"); do echo "$H/1k.bin"; done > "$work/urls.txt"
for i in $(seq "$N"); do printf 'url = "%s/1k.bin"\noutput = "/dev/null"\n' "$H"; done > "$work/curl.conf"
count() {  # count NAME CMD...: total instructions of every thread
    local name=$1; shift
    valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out.$name" "$@" >/dev/null 2>"$out/$name.log"
    local ir
    ir=$(grep -E "Collected" "$out/$name.log" | tail -n 1 | awk '{print $NF}')
    echo "$name $ir"
}
count curl-multi "$out/curl-multi" many "$H/1k.bin" 32 "$N"
count curl curl -s --parallel --parallel-max 32 -K "$work/curl.conf"
count porter "$P" -s --url-list "$work/urls.txt" --concurrency 32
