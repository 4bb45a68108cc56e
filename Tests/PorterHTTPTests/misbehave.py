#!/usr/bin/env python3
"""A deliberately broken HTTP server for Porter's tests. Prints "READY <port>" once bound.

Paths: /reset (RST after 1000 of 100000 bytes), /stall (10 bytes then silence),
/truncated (chunked body cut before the last chunk), /malformed (no status line),
/empty (closes without a byte), /forever (redirects to itself with a counter),
/weird-status (status 999), /junk-headers (a line without a colon), /odd-headers
(odd bytes, a bad field name, an empty value), /wrong-range (a 206 for bytes 0-9 whatever
was asked), /huge-header (a 400 KiB header field), /bad-version (HTTP/4.2), /echo-head (the request head as the body), CONNECT (kept, then refused: /connect-head?HOST:PORT gives the head back), /retry-503?K (503 twice, then 200),
/ignore-expect (never sends 100 Continue), /many-headers (six 52 KiB fields: over libcurl's 300 KiB
for a whole head, each under its 100 KiB for one field), /escape-status (ESC and BEL in the reason
phrase, a C1 CSI in a field), /disposition?cd=PCT (Content-Disposition: the percent-decoded bytes),
/bighead?kb=N (a cacheable 1-byte body under N KiB of header fields), /record... (every byte the
connection brings is logged once the client closes it) and /recorded (that log), /gzip-bomb?mib=N (a valid gzip of N MiB of zeros), /bad-gzip (a damaged
gzip body), /half-gzip (half a gzip body), /brotli (a br body), /bad-cookies (cookies with an ESC,
non-UTF-8 bytes and a BEL beside a good one), /ok.
"""
import socket, socketserver, struct, sys, threading, time, urllib.parse, zlib

_counts = {}
_counts_lock = threading.Lock()
_bombs = {}
_recorded = []
_connects = {}
_recorded_lock = threading.Lock()
_bombs_lock = threading.Lock()

def gzip_of_zeros(mib):
    """A valid gzip file of `mib` MiB of zeros (about 1 KiB per MiB), made once."""
    with _bombs_lock:
        if mib not in _bombs:
            z = zlib.compressobj(9, zlib.DEFLATED, 31)
            chunk = bytes(1 << 20)
            parts = [z.compress(chunk) for _ in range(mib)]
            parts.append(z.flush())
            _bombs[mib] = b"".join(parts)
        return _bombs[mib]

class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ", 2)[1].decode("latin-1")
        s = self.request
        if data.startswith(b"CONNECT "):
            # As a proxy: the CONNECT head is kept under its target (/connect-head?TARGET
            # gives it back) and the tunnel refused.
            with _recorded_lock:
                _connects[path] = data.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
            s.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        if path.startswith("/connect-head?"):
            with _recorded_lock:
                head = _connects.get(path.split("?", 1)[1], b"none")
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(head) + head)
            return
        if path.startswith("/reset"):
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
            time.sleep(0.05)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        elif path.startswith("/stall"):
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
            time.sleep(30)
        elif path.startswith("/truncated"):
            s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            time.sleep(0.05)
        elif path.startswith("/malformed"):
            s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
            time.sleep(0.05)
        elif path.startswith("/empty"):
            pass
        elif path.startswith("/forever"):
            n = int(path.split("=")[1]) if "=" in path else 0
            s.sendall(("HTTP/1.1 302 Found\r\nLocation: /forever?n=%d\r\nContent-Length: 0\r\n\r\n" % (n + 1)).encode())
        elif path.startswith("/weird-status"):
            s.sendall(b"HTTP/1.1 999 Who Knows\r\nContent-Length: 2\r\n\r\nok")
        elif path.startswith("/junk-headers"):
            s.sendall(b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 2\r\n\r\nok")
        elif path.startswith("/odd-headers"):
            s.sendall(b"HTTP/1.1 200 OK\r\nX-Bin: \xff\xfe\r\nBad Name: x\r\nX-Empty:\r\nContent-Length: 2\r\n\r\nok")
        elif path.startswith("/wrong-range"):
            # Whatever Range was asked for, the first ten bytes come back as a 206.
            s.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/20\r\nContent-Length: 10\r\n"
                      b"ETag: \"r1\"\r\n\r\n0123456789")
        elif path.startswith("/huge-range"):
            # Lengths at Int64's edge: their sum must not trap the client.
            s.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 9223372036854775000-9223372036854775009/*\r\n"
                      b"Content-Length: 9223372036854775000\r\nETag: \"r1\"\r\n\r\n0123456789")
        elif path.startswith("/huge-header"):
            s.sendall(b"HTTP/1.1 200 OK\r\nX-Huge: " + b"h" * (400 * 1024) + b"\r\nContent-Length: 2\r\n\r\nok")
        elif path.startswith("/echo-head"):
            # The request head exactly as it arrived, as the body.
            head = data.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(head) + head)
        elif path.startswith("/retry-503"):
            # 503 (with Retry-After: 1) for the first two requests of each path, then 200.
            with _counts_lock:
                _counts[path] = _counts.get(path, 0) + 1
                n = _counts[path]
            if n <= 2:
                s.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 5\r\n\r\nbusy\n")
            else:
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nthird time\n")
        elif path.startswith("/ignore-expect"):
            # Never answers "100 Continue": reads the body by its length, then replies.
            head, body = data.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            while len(body) < length:
                chunk = self.request.recv(65536)
                if not chunk:
                    break
                body += chunk
            reply = b"got %d\n" % len(body)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(reply) + reply)
        elif path.startswith("/gzip-bomb"):
            mib = int(path.split("=")[1]) if "=" in path else 100
            body = gzip_of_zeros(mib)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Type: application/octet-stream\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body))
            s.sendall(body)
        elif path.startswith("/bad-gzip"):
            # A gzip header, then a deflate block of the reserved type 3.
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 14\r\n\r\n"
                      b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff\xff\xff")
        elif path.startswith("/half-gzip"):
            whole = gzip_of_zeros(1)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % (len(whole) // 2))
            s.sendall(whole[:len(whole) // 2])
        elif path.startswith("/brotli"):
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 4\r\n\r\n\x0b\x01\x80\x03")
        elif path.startswith("/bad-cookies"):
            s.sendall(b"HTTP/1.1 200 OK\r\nSet-Cookie: esc=a\x1bb\r\nSet-Cookie: bin=\xff\xfe\r\n"
                      b"Set-Cookie: bell=\x07\r\nSet-Cookie: fine=ok; Path=/\r\nContent-Length: 2\r\n\r\nok")
        elif path.startswith("/many-headers"):
            fields = b"".join(b"X-Big-%d: %s\r\n" % (i, b"b" * (52 * 1024)) for i in range(6))
            s.sendall(b"HTTP/1.1 200 OK\r\n" + fields + b"Content-Length: 2\r\n\r\nok")
        elif path.startswith("/escape-status"):
            s.sendall(b"HTTP/1.1 200 OK\x1b]0;owned\x07\x1b[2J\x1b[31mred\r\nX-C1: a\xc2\x9b31mb\r\n"
                      b"Content-Length: 2\r\n\r\nok")
        elif path.startswith("/disposition"):
            query = path.split("?", 1)[1] if "?" in path else ""
            cd = urllib.parse.unquote_to_bytes(query[3:]) if query.startswith("cd=") else b""
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Disposition: " + cd + b"\r\nContent-Length: 2\r\n\r\nok")
        elif path.startswith("/bighead"):
            query = urllib.parse.parse_qs(path.split("?", 1)[1] if "?" in path else "")
            kb = int(query.get("kb", ["1"])[0])
            fields = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(kb))
            s.sendall(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Type: text/plain\r\n" + fields +
                      b"Content-Length: 1\r\n\r\nx")
        elif path.startswith("/recorded"):
            with _recorded_lock:
                body = b"\n----\n".join(_recorded)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        elif path.startswith("/record"):
            # Answers the first request, then logs everything the connection brought (a
            # second request smuggled behind the first included) once the client closes it.
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            s.settimeout(10)
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            with _recorded_lock:
                _recorded.append(data)
        elif path.startswith("/bad-version"):
            s.sendall(b"HTTP/4.2 200 OK\r\nContent-Length: 2\r\n\r\nok")
        else:
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

srv = Server(("127.0.0.1", 0), Handler)
print("READY %d" % srv.server_address[1], flush=True)
srv.serve_forever()
