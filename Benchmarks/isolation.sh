#!/usr/bin/env bash
# Plugins out of process (issue 13): the same loads through an isolated worker and in
# process, in one run, taken in turn, on what `make install` puts in place (porter, the
# worker, the sftp and gopher plugins; release; porter with the Swift runtime linked statically, the worker and plugins dynamically;
# Benchmarks/lib-installed.sh). Prints a Markdown section; `make bench` includes it.
#   - discovery: `porter plugins` with 10 C plugins beside the installed ones, cold (no
#     description cache) and warm;
#   - request rate: 5,000 loads of 1 KiB, 32 at once (`--url-list --concurrency 32`), from
#     the test plugin (no network: the boundary's cost alone) and from the installed gopher
#     plugin against gopherd.py on loopback;
#   - throughput: 256 MiB from the test plugin, and 256 MiB over sftp (the installed
#     plugin) from OpenSSH's sshd on loopback, to /dev/null.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/porter-isolation.XXXXXX")
sshd_pid=""
gopher_pid=""
cleanup() {
    [ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null || true
    [ -n "$gopher_pid" ] && kill "$gopher_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
chmod 755 "$work"
. Benchmarks/lib-installed.sh
prefix=$(installed_prefix "$work/prefix")
installed=$(find "$prefix/lib/porter/plugins" -name '*.so' | wc -l)
mkdir -m 755 "$work/ten" "$work/one" "$work/none" "$work/home" "$work/root" "$work/cache"
for i in $(seq 1 10); do
    cc -shared -fPIC -O2 -I Sources/CPorterPlugin/include -DSCHEME="\"p$i\"" \
        -o "$work/ten/p$i.so" Tests/PorterPluginsTests/Fixtures/testplugin.c -lpthread
done
chmod 644 "$work"/ten/*.so
install -m 644 "$work/ten/p1.so" "$work/one/"

# Servers: gopherd.py with a 1 KiB file; sshd with a 256 MiB file, a key login for root.
head -c 1024 /dev/urandom > "$work/root/k1.bin"
head -c $((256 << 20)) /dev/zero > "$work/root/big.bin"
exec 3< <(python3 scripts/gopherd.py --root "$work/root")
read -r ready port <&3
gopher_port=$port
gopher_pid=$(pgrep -f "gopherd.py --root $work/root" | head -1)
mkdir -m 700 "$work/home/.ssh"
ssh-keygen -q -t ed25519 -N "" -f "$work/host_key"
ssh-keygen -q -t ed25519 -N "" -f "$work/home/.ssh/id_ed25519"
sftp_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "[127.0.0.1]:$sftp_port $(cut -d' ' -f1,2 "$work/host_key.pub")" > "$work/home/.ssh/known_hosts"
cp "$work/home/.ssh/id_ed25519.pub" "$work/authorized_keys"
chmod 600 "$work/authorized_keys"
cat > "$work/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $sftp_port
HostKey $work/host_key
PidFile $work/sshd.pid
AuthorizedKeysFile $work/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
Subsystem sftp internal-sftp
EOF
mkdir -p /run/sshd
/usr/sbin/sshd -D -f "$work/sshd_config" -E "$work/sshd.log" &
sshd_pid=$!
for _ in $(seq 1 50); do (exec 9<>/dev/tcp/127.0.0.1/$sftp_port) 2>/dev/null && break; sleep 0.1; done

for i in $(seq 1 5000); do echo "p1://h/big?1024"; done > "$work/ptest-urls.txt"
for i in $(seq 1 5000); do echo "gopher://127.0.0.1:$gopher_port/9/k1.bin"; done > "$work/gopher-urls.txt"

python3 - "$prefix/bin/porter" "$work" "$sftp_port" "$installed" <<'PY'
import os, shutil, statistics, subprocess, sys, time
porter, work, sftp_port, installed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def run(args, path, in_process, cache=None, expect=None):
    env = dict(os.environ, HOME=work + "/home", PORTER_PLUGIN_PATH=path,
               XDG_CACHE_HOME=cache or (work + "/cache"))
    env.pop("PORTER_PLUGINS_IN_PROCESS", None)
    if in_process:
        args = args + ["--plugins-in-process"]
    t = time.perf_counter()
    r = subprocess.run([porter] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t
    if r.returncode != 0 or (expect is not None and not expect(r.stdout)):
        # Counted and reported, not fatal: a crash is a result too.
        failures.append(f"`porter {' '.join(a for a in args if not a.startswith(work))}` exit {r.returncode}: "
                        + (r.stderr.decode(errors="replace").splitlines() or [""])[0][:160])
        return None
    return elapsed

failures = []

def taken_in_turn(configs, rounds):
    times = {name: [] for name, _ in configs}
    for _ in range(rounds):
        for name, f in configs:
            t = f()
            if t is not None:
                times[name].append(t)
    return {name: (statistics.median(v), min(v)) if v else (float("nan"), float("nan")) for name, v in times.items()}

# Discovery.
def cold():
    shutil.rmtree(work + "/cold", ignore_errors=True)
    return run(["plugins"], work + "/ten", False, cache=work + "/cold")
loaded10 = lambda out: out.count(b"\nloaded") == 10 + installed
run(["plugins"], work + "/ten", False, expect=loaded10)   # warms the cache
disc = taken_in_turn([
    ("cold (every plugin described in a probe process)", cold),
    ("warm, isolated (descriptions cached; no plugin mapped)", lambda: run(["plugins"], work + "/ten", False, expect=loaded10)),
    ("warm, in process (cached probe, then dlopen)", lambda: run(["plugins"], work + "/ten", True, expect=loaded10)),
], 15)

# Request rate.
def rate(urls, path, in_process):
    return run(["-s", "--url-list", urls, "--concurrency", "32"], path, in_process,
               expect=lambda out: len(out) == 5000 * 1024)
rates = taken_in_turn([
    ("test plugin, isolated", lambda: rate(work + "/ptest-urls.txt", work + "/one", False)),
    ("test plugin, in process", lambda: rate(work + "/ptest-urls.txt", work + "/one", True)),
    ("gopher, isolated", lambda: rate(work + "/gopher-urls.txt", work + "/none", False)),
    ("gopher, in process", lambda: rate(work + "/gopher-urls.txt", work + "/none", True)),
], 5)

# Throughput.
big = 256 << 20
sftp_url = f"sftp://root@127.0.0.1:{sftp_port}{work}/root/big.bin"
def bulk(url, path, in_process):
    return run(["-s", "-o", "/dev/null", "-w", "%{size_download}", url], path, in_process,
               expect=lambda out: out.strip() == str(big).encode())
thr = taken_in_turn([
    ("test plugin, isolated", lambda: bulk(f"p1://h/big?{big}", work + "/one", False)),
    ("test plugin, in process", lambda: bulk(f"p1://h/big?{big}", work + "/one", True)),
    ("sftp, isolated", lambda: bulk(sftp_url, work + "/none", False)),
    ("sftp, in process", lambda: bulk(sftp_url, work + "/none", True)),
], 5)

print("## Plugins out of process (issue 13)")
print()
print("`bash Benchmarks/isolation.sh`: what `make install` puts in place (release; porter with the Swift runtime linked statically, the worker and plugins dynamically; the gopher and sftp plugins are the installed ones, found beside porter, the test plugin comes by PORTER_PLUGIN_PATH); each configuration taken in turn with the others, medians (and best).")
print()
print(f"| discovery, `porter plugins` with 10 C plugins and the {installed} installed | median ms | best ms |")
print("|---|---:|---:|")
for name, (med, best) in disc.items():
    print(f"| {name} | {med * 1000:.1f} | {best * 1000:.1f} |")
print()
print("| 5,000 loads of 1 KiB, 32 at once | median s | loads/s | isolated ÷ in process |")
print("|---|---:|---:|---:|")
for kind in ["test plugin", "gopher"]:
    iso, inp = rates[f"{kind}, isolated"][0], rates[f"{kind}, in process"][0]
    print(f"| {kind}, isolated | {iso:.2f} | {5000 / iso:.0f} | {inp / iso:.2f}× |")
    print(f"| {kind}, in process | {inp:.2f} | {5000 / inp:.0f} | |")
print()
print("| 256 MiB to /dev/null | median s | MiB/s | isolated ÷ in process |")
print("|---|---:|---:|---:|")
for kind in ["test plugin", "sftp"]:
    iso, inp = thr[f"{kind}, isolated"][0], thr[f"{kind}, in process"][0]
    print(f"| {kind}, isolated | {iso:.2f} | {256 / iso:.0f} | {inp / iso:.2f}× |")
    print(f"| {kind}, in process | {inp:.2f} | {256 / inp:.0f} | |")
if failures:
    print()
    print(f"Runs that failed ({len(failures)}; left out of the medians):")
    for f in failures:
        print(f"- {f}")
PY
