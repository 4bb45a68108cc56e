#!/usr/bin/env python3
"""A small gopher server (RFC 1436) for Porter's demo and tests: serves a folder.

    gopherd.py --root DIR [--port N]    prints "READY <port>" once listening

A folder is a menu (type 1) of its entries; *.txt files are text (type 0), ending
with the "." line; anything else is binary (type 9). Selectors are paths under DIR.
"""
import argparse
import os
import socketserver


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    root = os.path.realpath(args.root)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            line = self.rfile.readline(4096).decode("utf-8", "replace").rstrip("\r\n")
            selector = line.split("\t", 1)[0]
            path = os.path.realpath(os.path.join(root, selector.lstrip("/")))
            host, port = self.server.server_address[:2]
            if not (path == root or path.startswith(root + os.sep)) or not os.path.exists(path):
                self.wfile.write(b"3'" + selector.encode() + b"' does not exist\t\terror.host\t1\r\n.\r\n")
                return
            if os.path.isdir(path):
                out = []
                for name in sorted(os.listdir(path)):
                    full = os.path.join(path, name)
                    sel = "/" + os.path.relpath(full, root)
                    kind = "1" if os.path.isdir(full) else ("0" if name.endswith(".txt") else "9")
                    out.append(f"{kind}{name}\t{sel}\t{host}\t{port}\r\n")
                self.wfile.write("".join(out).encode() + b".\r\n")
            elif path.endswith(".txt"):
                with open(path, "rb") as f:
                    self.wfile.write(f.read() + b".\r\n")
            else:
                with open(path, "rb") as f:
                    while True:
                        chunk = f.read(65536)
                        if not chunk:
                            break
                        self.wfile.write(chunk)

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    with socketserver.ThreadingTCPServer(("127.0.0.1", args.port), Handler) as server:
        print(f"READY {server.server_address[1]}", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
