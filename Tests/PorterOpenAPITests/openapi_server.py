#!/usr/bin/env python3
"""A small HTTP API for PorterOpenAPI's tests (Python's standard library only). Prints
"READY <port>" once bound to 127.0.0.1.

Operations (any path prefix before them is kept in the echo, so a base URL may have one):
  POST .../pets               JSON {"name": ...} -> 201 {"id", "name", "path", "headers", "framing"}
  GET  .../pets/<id>          -> 200 {"id", "name", "path"} or 404 {"error"}
  HEAD .../pets/<id>          -> 200, Content-Length of the GET's body, no body
  GET  .../status/<code>      -> that status, JSON {"status": code}
  PUT  .../upload?id=K[&stall=1]  reads the body (Content-Length or chunked) -> 200
       {"received", "sha256", "pattern", "framing"} ("pattern": the body is the pattern below); with stall=1 it stops reading after 64 KiB
       until POST /release?id=K. GET /upload-state?id=K -> {"received", "done", "closed"}
  GET  .../download?id=K&size=N   chunked: 64 KiB, then waits for POST /release?id=K (or
       the client closing), then the rest. GET /download-state?id=K -> {"sent", "done", "closed"}
  GET  .../flood?id=K&size=N      Content-Length N, written as fast as the client reads.
       GET /flood-state?id=K -> {"sent", "done", "closed"}
  GET  .../hang?id=K          never answers; notes when the client closes.
       GET /hang-state?id=K -> {"arrived", "closed"}
  GET  .../short              Content-Length 1000, 10 bytes, then the connection closes
  GET  .../odd-status         "HTTP/1.1 599 Very\\x01Odd" with a body
  GET  .../gzip               a JSON body sent gzip-encoded, with the encoded Content-Length
  POST .../redirect-307       307 to .../pets (the body must be sent again)
The pattern of download and flood bodies: byte i is (i * 31 + 7) % 251.
"""
import gzip, hashlib, json, select, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs

state = {}
lock = threading.Lock()
releases = {}
pets = {}
next_id = [1]


def note(kind, key, **values):
    with lock:
        entry = state.setdefault((kind, key), {})
        entry.update(values)


def snapshot(kind, key):
    with lock:
        return dict(state.get((kind, key), {}))


def release_event(key):
    with lock:
        return releases.setdefault(key, threading.Event())


def pattern(start, count):
    return bytes(((i * 31 + 7) % 251) for i in range(start, start + count))


PATTERN_PERIOD = 251
BLOCK = pattern(0, PATTERN_PERIOD * 512)  # a whole number of periods, ~128 KiB


def pattern_bytes(offset, count):
    """`count` bytes of the pattern from `offset`, built from BLOCK."""
    out = bytearray()
    start = offset % PATTERN_PERIOD
    while len(out) < count:
        take = min(count - len(out), len(BLOCK) - start)
        out += BLOCK[start:start + take]
        start = 0
    return bytes(out)


def closed_by_peer(sock):
    """True when the client has closed its side (readable and EOF)."""
    try:
        r, _, _ = select.select([sock], [], [], 0)
        if not r:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    # -- helpers --------------------------------------------------------------------
    def parts(self):
        u = urlsplit(self.path)
        return u.path, {k: v[-1] for k, v in parse_qs(u.query).items()}

    def send_json(self, status, obj, extra=None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def framing(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            return "chunked"
        if self.headers.get("Content-Length") is not None:
            return "length:" + self.headers["Content-Length"]
        return "none"

    def body_pieces(self):
        """Yields the request body in pieces as it arrives (chunked or Content-Length)."""
        if self.framing() == "chunked":
            while True:
                line = self.rfile.readline()
                if not line:
                    raise ConnectionError("closed inside a chunked body")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return
                left = size
                while left:
                    piece = self.rfile.read(min(left, 65536))
                    if not piece:
                        raise ConnectionError("closed inside a chunk")
                    left -= len(piece)
                    yield piece
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                piece = self.rfile.read1(min(left, 65536)) if hasattr(self.rfile, "read1") else self.rfile.read(min(left, 65536))
                if not piece:
                    raise ConnectionError("closed inside the body")
                left -= len(piece)
                yield piece

    def read_body(self):
        return b"".join(self.body_pieces())

    # -- methods --------------------------------------------------------------------
    def do_HEAD(self):
        path, _ = self.parts()
        if "/pets/" in path:
            body = json.dumps({"id": path.rsplit("/", 1)[1], "name": "Rex", "path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def do_GET(self):
        path, q = self.parts()
        key = q.get("id", "")
        if path.endswith("/upload-state"):
            return self.send_json(200, snapshot("upload", key))
        if path.endswith("/download-state"):
            return self.send_json(200, snapshot("download", key))
        if path.endswith("/flood-state"):
            return self.send_json(200, snapshot("flood", key))
        if path.endswith("/hang-state"):
            return self.send_json(200, snapshot("hang", key))
        if "/pets/" in path:
            pet_id = path.rsplit("/", 1)[1]
            with lock:
                pet = pets.get(pet_id)
            if pet is None:
                return self.send_json(404, {"error": "no pet " + pet_id, "path": self.path})
            return self.send_json(200, {"id": int(pet_id), "name": pet, "path": self.path})
        if "/status/" in path:
            code = int(path.rsplit("/", 1)[1])
            return self.send_json(code, {"status": code})
        if path.endswith("/download"):
            return self.download(key, int(q.get("size", "1048576")))
        if path.endswith("/flood"):
            return self.flood(key, int(q.get("size", "1048576")))
        if path.endswith("/hang"):
            return self.hang(key)
        if path.endswith("/short"):
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000\r\n\r\n0123456789")
            self.wfile.flush()
            self.close_connection = True
            return
        if path.endswith("/gzip"):
            body = gzip.compress(json.dumps({"text": "Porter " * 1000}).encode())
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if path.endswith("/odd-status"):
            self.wfile.write(b"HTTP/1.1 599 Very\x01Odd\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"odd\": 1}\n")
            self.wfile.flush()
            return
        self.send_json(404, {"error": "no route " + path})

    def do_POST(self):
        path, q = self.parts()
        if path.endswith("/release"):
            release_event(q.get("id", "")).set()
            return self.send_json(200, {"released": q.get("id", "")})
        if path.endswith("/redirect-307"):
            self.read_body()
            target = path[: -len("/redirect-307")] + "/pets"
            self.send_response(307)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path.endswith("/pets"):
            framing = self.framing()
            raw = self.read_body()
            try:
                obj = json.loads(raw)
            except ValueError:
                return self.send_json(400, {"error": "not JSON", "received": len(raw)})
            with lock:
                pet_id = next_id[0]
                next_id[0] += 1
                pets[str(pet_id)] = obj.get("name")
            headers = {k.lower(): v for k, v in self.headers.items()}
            return self.send_json(201, {"id": pet_id, "name": obj.get("name"), "path": self.path,
                                        "headers": headers, "framing": framing},
                                  {"Location": path + "/" + str(pet_id)})
        self.send_json(404, {"error": "no route " + path})

    def do_PUT(self):
        path, q = self.parts()
        if path.endswith("/upload"):
            return self.upload(q.get("id", ""), q.get("stall") == "1")
        self.send_json(404, {"error": "no route " + path})

    # -- operations -----------------------------------------------------------------
    def upload(self, key, stall):
        framing = self.framing()
        digest = hashlib.sha256()
        matches = True
        received = 0
        note("upload", key, received=0, done=False, closed=False, framing=framing)
        try:
            for piece in self.body_pieces():
                digest.update(piece)
                matches = matches and piece == pattern_bytes(received, len(piece))
                received += len(piece)
                note("upload", key, received=received)
                if stall and received >= 65536:
                    stall = False
                    release_event(key).wait(30)
        except (ConnectionError, OSError, ValueError):
            note("upload", key, closed=True)
            self.close_connection = True
            return
        note("upload", key, done=True)
        self.send_json(200, {"received": received, "sha256": digest.hexdigest(), "pattern": matches,
                                  "framing": framing})

    def download(self, key, size):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        note("download", key, sent=0, done=False, closed=False)
        try:
            first = min(65536, size)
            self.write_chunk(pattern_bytes(0, first))
            sent = first
            note("download", key, sent=sent)
            event = release_event(key)
            deadline = time.time() + 30
            while not event.wait(0.02):
                if closed_by_peer(self.connection) or time.time() > deadline:
                    note("download", key, closed=True)
                    self.close_connection = True
                    return
            while sent < size:
                n = min(65536, size - sent)
                self.write_chunk(pattern_bytes(sent, n))
                sent += n
                note("download", key, sent=sent)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            note("download", key, done=True)
        except OSError:
            note("download", key, closed=True)
            self.close_connection = True

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
        self.wfile.flush()

    def flood(self, key, size):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        sent = 0
        note("flood", key, sent=0, done=False, closed=False)
        try:
            while sent < size:
                n = min(65536, size - sent)
                self.wfile.write(pattern_bytes(sent, n))
                sent += n
                note("flood", key, sent=sent)
            self.wfile.flush()
            note("flood", key, done=True)
        except OSError:
            note("flood", key, closed=True)
            self.close_connection = True

    def hang(self, key):
        note("hang", key, arrived=True, closed=False)
        deadline = time.time() + 30
        while time.time() < deadline:
            if closed_by_peer(self.connection):
                note("hang", key, closed=True)
                break
            time.sleep(0.02)
        self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    server = Server(("127.0.0.1", 0), Handler)
    print("READY %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
