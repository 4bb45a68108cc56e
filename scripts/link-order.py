#!/usr/bin/env python3
"""Writes scripts/static-link.order: the functions porter and porterd run in ordinary use, for
scripts/link-static.py to place side by side (lld's --symbol-ordering-file).

Usage: link-order.py PREFIX   (PREFIX: a `make install CONFIG=release` prefix of this tree)

Why: the kernel maps a program's code into the process 64 KiB around each page it touches
(fault-around), and those pages count in the process's resident set. Linked in source order,
the few thousand functions a transfer runs lie scattered over porter's 20 MB of code, and
starting porter touched 9.4 MiB of it. Placed together they fill about 2 MiB.

The list is porter's functions with any instructions under callgrind (valgrind --demangle=no,
so the names are the symbols the linker knows) while PREFIX's porter does ordinary work
against a loopback HTTP server (start-up, one GET, several GETs in flight, a file: copy, a
HEAD, a failed load, cache hits), then porterd's functions sampled by `perf record` (50 kHz)
while it runs 200 background downloads and lists them (porterd cannot run under valgrind
3.19: it does not know pidfd_send_signal). Functions
missing from the list (new code since it was made) are placed after the listed ones: a stale
list costs memory, never correctness. Make it again after large changes:
`make install PREFIX=/tmp/order CONFIG=release && python3 scripts/link-order.py /tmp/order`.
"""
import http.server
import os
import re
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "static-link.order")
PROGRAMS = ("porter", "porterd")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"x" * (1024 if "small" in self.path else 256 * 1024)
        if "missing" in self.path:
            self.send_response(404)
            body = b"not here\n"
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"v1"')
        self.send_header("Cache-Control", "max-age=60")
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "1024")
        self.end_headers()

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def functions(profile, binaries):
    """The symbols of functions with instructions in one callgrind profile, in the order the
    profile first names them, for the objects whose path ends with one of binaries."""
    names, objects, current, found = {}, {}, None, []
    pattern = re.compile(r"(c?ob|c?fn)=\((\d+)\)(?: (.*))?$")
    with open(profile, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = pattern.match(line.rstrip("\n"))
            if not m:
                continue
            kind, key, name = m.groups()
            table = objects if kind.endswith("ob") else names
            if name:
                table[key] = name
            if kind == "ob":
                current = objects.get(key)
            elif kind == "fn" and current and os.path.basename(current) in binaries:
                symbol = names.get(key)
                if symbol and not symbol.startswith("0x"):
                    found.append(symbol)
    return found


def porterd_functions(work, env, base):
    """porterd's functions seen by perf's samples while it queues, runs and lists 200
    downloads; it exits by itself when idle (PORTERD_IDLE_EXIT)."""
    if shutil.which("perf") is None:
        sys.exit("link-order: perf is not installed (apt-get install linux-perf)")
    data = os.path.join(work, "porterd.perf")
    daemon = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "50000", "-o", data, "--",
                               env["PORTERD_PATH"]], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socket_path = os.path.join(env["XDG_RUNTIME_DIR"], "porter", "porterd.sock")
    deadline = time.monotonic() + 30
    while not os.path.exists(socket_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    urls = os.path.join(work, "background.txt")
    with open(urls, "w") as f:
        f.write("".join(f"{base}/small-bg-{i}.bin\n" for i in range(200)))
    out = os.path.join(work, "out")
    os.makedirs(out)
    porter = os.path.join(work, "bin", "porter")
    subprocess.run([porter, "--background", "order", "-O", "--url-list", urls], cwd=out, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        listed = subprocess.run([porter, "jobs", "order"], env=env, capture_output=True, text=True).stdout
        if listed.count("completed") >= 200:
            break
        time.sleep(0.1)
    try:
        daemon.wait(timeout=120)
    except subprocess.TimeoutExpired:
        daemon.kill()
        sys.exit("link-order: porterd did not exit when idle")
    report = subprocess.run(["perf", "report", "-i", data, "--no-demangle", "--sort", "dso,sym", "--stdio"],
                            capture_output=True, text=True).stdout
    found = []
    for line in report.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "porterd" and fields[2] == "[.]":
            found.append(fields[3])
    if len(found) < 500:
        sys.exit(f"link-order: only {len(found)} of porterd's functions sampled")
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: link-order.py PREFIX")
    prefix = os.path.abspath(sys.argv[1])
    if shutil.which("valgrind") is None:
        sys.exit("link-order: valgrind is not installed (scripts/install-deps.sh installs it)")
    work = tempfile.mkdtemp(prefix="porter-link-order.")
    # Valgrind 3.19 cannot read the toolchain's DWARF 5; the symbol table is all it needs.
    os.makedirs(os.path.join(work, "bin"))
    for program in PROGRAMS:
        subprocess.run(["objcopy", "--strip-debug", os.path.join(prefix, "bin", program),
                        os.path.join(work, "bin", program)], check=True)
    porter = os.path.join(work, "bin", "porter")
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    os.makedirs(os.path.join(work, "run"), mode=0o700)
    env = dict(os.environ, HOME=work, XDG_RUNTIME_DIR=os.path.join(work, "run"),
               XDG_STATE_HOME=os.path.join(work, "state"), XDG_CACHE_HOME=os.path.join(work, "cache"),
               XDG_CONFIG_HOME=os.path.join(work, "config"),
               PORTERD_PATH=os.path.join(work, "bin", "porterd"), PORTERD_IDLE_EXIT="2")
    with open(os.path.join(work, "list.txt"), "w") as f:
        f.write("".join(f"{base}/small-{i}\n" for i in range(40)))
    with open(os.path.join(work, "src.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    runs = [
        ["-s", "-o", "/dev/null", "data:,x"],
        ["-s", "-o", "/dev/null", f"{base}/large"],
        ["-s", "-o", os.path.join(work, "out.bin"), f"{base}/large"],
        ["-s", "--url-list", os.path.join(work, "list.txt"), "--concurrency", "8", "-o", "/dev/null"],
        ["-sS", "-o", "/dev/null", "-w", "%{http_code} %{size_download}\\n", f"{base}/small"],
        ["-s", "-I", f"{base}/head"],
        ["-s", "-f", "-o", "/dev/null", f"{base}/missing"],
        ["-s", "-o", os.path.join(work, "copy.bin"), "file://" + os.path.join(work, "src.bin")],
        ["-s", "--cache", "-o", "/dev/null", f"{base}/small-cached"],
        ["-s", "--cache", "-o", "/dev/null", f"{base}/small-cached"],
    ]
    for i, args in enumerate(runs):
        out = os.path.join(work, f"cg.{i}.%p")
        subprocess.run(["valgrind", "--tool=callgrind", "--demangle=no", "--trace-children=yes",
                        "--trace-children-skip=*porter-plugin-worker*",
                        f"--callgrind-out-file={out}", porter] + args,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    profiles = sorted(p for p in os.listdir(work) if p.startswith("cg."))
    order, seen = [], set()
    for p in profiles:
        for symbol in functions(os.path.join(work, p), PROGRAMS):
            if symbol not in seen:
                seen.add(symbol)
                order.append(symbol)
    for symbol in porterd_functions(work, env, base):
        if symbol not in seen:
            seen.add(symbol)
            order.append(symbol)
    server.shutdown()
    shutil.rmtree(work, ignore_errors=True)
    if len(order) < 1000:
        sys.exit(f"link-order: only {len(order)} functions found; the runs failed?")
    with open(OUTPUT, "w", encoding="utf-8") as f:
        f.write("".join(s + "\n" for s in order))
    print(f"link-order: {len(order)} functions from {len(profiles)} profiles -> {OUTPUT}")


main()
