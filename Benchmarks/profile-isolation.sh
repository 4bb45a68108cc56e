#!/usr/bin/env bash
# Isolated plugins under valgrind's callgrind: instructions of the host (porter) and of the
# worker (porter-plugin-worker), separately, isolated and --plugins-in-process, for
#   - sftp from OpenSSH's sshd on loopback: 1 MiB and 16 MiB (the cost per MiB is the
#     difference over 15 MiB, so start-up and the ssh handshake drop out);
#   - the test plugin (no network, the boundary alone): 1 MiB and 16 MiB, and 20 and 300
#     loads of 1 KiB, 32 at once (per load: the difference over 280 loads).
# Instruction counts do not depend on the machine's load (wall-clock ratios on a busy
# 2-core machine do). Valgrind cannot run the worker's sandbox (seccomp, landlock, a 4 GiB
# RLIMIT_AS): Benchmarks/valgrind-sandbox-shim.c, preloaded, pretends those calls worked.
#   Benchmarks/profile-isolation.sh BIN_DIR
# BIN_DIR holds porter, porter-plugin-worker and libPorterSFTPPlugin.so (e.g. .build/release).
# Leaves the callgrind files in $PROFILE_DIR (default .build/profile-isolation).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${PROFILE_DIR:-$PWD/.build/profile-isolation}
rm -rf "$out"; mkdir -p "$out/bin"
command -v valgrind >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind; }
# Valgrind 3.19 cannot read the DWARF 5 Swift writes: copies without debug information.
for f in porter porter-plugin-worker libPorterSFTPPlugin.so; do objcopy --strip-debug "$1/$f" "$out/bin/$f"; done
cc -shared -fPIC -O2 -o "$out/shim.so" Benchmarks/valgrind-sandbox-shim.c -ldl
work=$(mktemp -d "${TMPDIR:-/tmp}/porter-profile-isolation.XXXXXX")
sshd_pid=""
trap '[ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null; rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -m 755 "$work/home" "$work/root" "$work/sftp" "$work/tp" "$work/cache"
install -m 644 "$out/bin/libPorterSFTPPlugin.so" "$work/sftp/"
cc -shared -fPIC -O2 -I Sources/CPorterPlugin/include -DSCHEME='"p1"' -o "$work/tp/p1.so" \
    Tests/PorterPluginsTests/Fixtures/testplugin.c -lpthread
chmod 644 "$work/tp/p1.so"
head -c $((16 << 20)) /dev/urandom > "$work/root/m16.bin"
head -c $((1 << 20)) "$work/root/m16.bin" > "$work/root/m1.bin"
for i in $(seq 1 20); do echo "p1://h/big?1024"; done > "$work/loads20.txt"
for i in $(seq 1 300); do echo "p1://h/big?1024"; done > "$work/loads300.txt"
# sshd with a key login for root, as Benchmarks/isolation.sh starts it.
mkdir -m 700 "$work/home/.ssh"
ssh-keygen -q -t ed25519 -N "" -f "$work/host_key"
ssh-keygen -q -t ed25519 -N "" -f "$work/home/.ssh/id_ed25519"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$work/host_key.pub")" > "$work/home/.ssh/known_hosts"
install -m 600 "$work/home/.ssh/id_ed25519.pub" "$work/authorized_keys"
printf '%s\n' "ListenAddress 127.0.0.1" "Port $port" "HostKey $work/host_key" "PidFile $work/sshd.pid" \
    "AuthorizedKeysFile $work/authorized_keys" "StrictModes no" "UsePAM no" "PermitRootLogin prohibit-password" \
    "PasswordAuthentication no" "Subsystem sftp internal-sftp" > "$work/sshd_config"
mkdir -p /run/sshd
/usr/sbin/sshd -D -f "$work/sshd_config" -E "$work/sshd.log" &
sshd_pid=$!
for _ in $(seq 1 50); do (exec 9<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
export HOME="$work/home" XDG_CACHE_HOME="$work/cache"
sftp="sftp://root@127.0.0.1:$port$work/root"
# The plugins' descriptions are cached first, natively: the probe is not what is measured.
PORTER_PLUGIN_PATH="$work/sftp" "$out/bin/porter" -s -o /dev/null "$sftp/m1.bin"
PORTER_PLUGIN_PATH="$work/tp" "$out/bin/porter" -s -o /dev/null "p1://h/big?1"

# count NAME PLUGIN_DIR ARGS...: prints "host N worker N" (worker 0 in process).
count() {
    local name=$1 dir=$2; shift 2
    LD_PRELOAD="$out/shim.so" PORTER_PLUGIN_PATH="$dir" valgrind --tool=callgrind --trace-children=yes \
        --callgrind-out-file="$out/$name.%p" "$out/bin/porter" -s "$@" >/dev/null 2>"$out/$name.log"
    # The worker writes its counts as it exits, after the host: wait for them.
    for _ in $(seq 1 120); do
        local done=1
        for f in "$out/$name".*[0-9]; do grep -q '^totals:' "$f" || done=0; done
        [ "$done" = 1 ] && break
        sleep 1
    done
    local host=0 worker=0
    for f in "$out/$name".*[0-9]; do
        local n; n=$(grep -m1 '^totals:' "$f" | awk '{print $2}')
        if grep -q '^cmd:.*porter-plugin-worker --serve' "$f"; then worker=$n; else host=$n; fi
    done
    echo "$host $worker"
}
row() {  # row LABEL SMALL_NAME LARGE_NAME DIVISOR DIR SMALL_ARGS -- LARGE_ARGS
    local label=$1 small=$2 large=$3 div=$4 dir=$5; shift 5
    local a=() b=() seen=0
    for x in "$@"; do if [ "$x" = "--" ]; then seen=1; elif [ $seen = 0 ]; then a+=("$x"); else b+=("$x"); fi; done
    for mode in isolated in-process; do
        local extra=(); [ $mode = in-process ] && extra=(--plugins-in-process)
        read -r h1 w1 < <(count "$small-$mode" "$dir" "${a[@]}" "${extra[@]}")
        read -r h2 w2 < <(count "$large-$mode" "$dir" "${b[@]}" "${extra[@]}")
        local host=$(( (h2 - h1) / div )) worker=$(( (w2 - w1) / div ))
        printf '| %s, %s | %s | %s | %s |\n' "$label" "$mode" "$host" "$worker" "$((host + worker))"
    done
}
echo "| instructions (callgrind Ir) | host | worker | total |"
echo "|---|---:|---:|---:|"
row "sftp, per MiB" sftp1 sftp16 15 "$work/sftp" -o /dev/null "$sftp/m1.bin" -- -o /dev/null "$sftp/m16.bin"
row "test plugin, per MiB" tp1 tp16 15 "$work/tp" -o /dev/null "p1://h/big?$((1 << 20))" -- -o /dev/null "p1://h/big?$((16 << 20))"
row "test plugin, per 1 KiB load" tp20 tp300 280 "$work/tp" --url-list "$work/loads20.txt" --concurrency 32 -- \
    --url-list "$work/loads300.txt" --concurrency 32
