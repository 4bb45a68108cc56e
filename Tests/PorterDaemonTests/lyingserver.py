#!/usr/bin/env python3
"""A server that lies when a download resumes. Prints "READY <port>" once bound.

/v?TAG        2000 bytes of b"a", ETag "v1". With "stall" in the query, the first full
              request sends 1000 bytes (in ten steps) and then nothing (the client stops it).
              A Range request is answered 206 with ETag "v2" and b"b" (another version,
              whatever If-Range said).
/grown?TAG    as /v, but a Range request gets 206 with the same ETag "v1" and a
              Content-Range total of 3000 (the resource grew).
/count?TAG    "full=N range=M": the requests seen for TAG.
"""
import socketserver, sys, threading, time

counts = {}
lock = threading.Lock()

class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        target = head.split(" ", 2)[1]
        path, _, query = target.partition("?")
        rng = None
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "range":
                rng = value.strip()
        s = self.request
        if path == "/count":
            with lock:
                full, ranged = counts.get(query, (0, 0))
            body = ("full=%d range=%d" % (full, ranged)).encode()
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            return
        with lock:
            full, ranged = counts.get(query, (0, 0))
            if rng:
                ranged += 1
            else:
                full += 1
            counts[query] = (full, ranged)
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if path == "/grown":
                total, tag, byte = 3000, '"v1"', b"c"
            else:
                total, tag, byte = 2000, '"v2"', b"b"
            body = byte * (total - start)
            s.sendall(("HTTP/1.1 206 Partial Content\r\nETag: %s\r\nContent-Range: bytes %d-%d/%d\r\n"
                       "Content-Length: %d\r\nConnection: close\r\n\r\n" % (tag, start, total - 1, total, len(body))).encode() + body)
            return
        headers = b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nAccept-Ranges: bytes\r\nContent-Length: 2000\r\nConnection: close\r\n\r\n"
        if "stall" in query and full == 1:
            # 1000 bytes in ten steps (each a progress update an app hears), then silence.
            s.sendall(headers)
            for _ in range(10):
                s.sendall(b"a" * 100)
                time.sleep(0.15)
            time.sleep(60)
            return
        s.sendall(headers + b"a" * 2000)

class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

srv = Server(("127.0.0.1", 0), Handler)
print("READY %d" % srv.server_address[1], flush=True)
srv.serve_forever()
