#!/usr/bin/env python3
"""An HTTP/1.1 origin for Porter's cache tests that answers as each URL's query says and
keeps every request it receives. Prints "READY <port>" once bound.

Any path: status=N (default 200), reason=TEXT, h=Name:Value (repeatable, the response
fields), body=TEXT (default "body"), cl=self (Content-Location: the request's own path and
query), ranges=1 (Range and If-Range honoured against the ETag given in h: a 206 with
Content-Range, a 416, or the whole 200 when If-Range does not match); cond=1 (a 304 when
If-None-Match is the ETag given in h); later_h,
later_body, later_status and later_reason replace h, body, status and reason from the second request for the same target on (the
representation changed). GET /log gives the
requests so far as JSON lines {"method","target","headers":[[name,value],...]}; /log is not
itself logged.
"""
import json, sys, threading, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_log = []
_lock = threading.Lock()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/log":
            with _lock:
                text = "".join(json.dumps(e) + "\n" for e in _log)
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)
            return
        with _lock:
            again = any(e["target"] == self.path for e in _log)
            _log.append({"method": self.command, "target": self.path, "headers": [[k, v] for k, v in self.headers.items()]})
        q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        if again:
            for name in ("h", "body", "status", "reason"):
                if "later_" + name in q:
                    q[name] = q["later_" + name]
        status = int(q.get("status", ["200"])[0])
        reason = q.get("reason", ["Whatever"])[0]
        fields = [h.split(":", 1) for h in q.get("h", []) if ":" in h]
        body = q.get("body", ["body"])[0].encode()
        if q.get("cl", [""])[0] == "self":
            fields.append(["Content-Location", self.path])
        etag = next((v for k, v in fields if k.lower() == "etag"), None)
        if q.get("cond", [""])[0] == "1" and etag is not None and self.headers.get("If-None-Match") == etag:
            status, reason, body = 304, "Not Modified", b""
        if q.get("ranges", [""])[0] == "1" and status == 200:
            etag = next((v for k, v in fields if k.lower() == "etag"), None)
            rng = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            if rng and (if_range is None or if_range == etag) and rng.startswith("bytes=") and "," not in rng:
                a, _, b = rng[6:].partition("-")
                total = len(body)
                if a == "":
                    first, last = max(0, total - int(b)), total - 1
                else:
                    first, last = int(a), min(int(b), total - 1) if b else total - 1
                if first >= total:
                    status, reason, body = 416, "Range Not Satisfiable", b""
                    fields.append(["Content-Range", "bytes */%d" % total])
                else:
                    status, reason = 206, "Partial Content"
                    fields.append(["Content-Range", "bytes %d-%d/%d" % (first, last, total)])
                    body = body[first:last + 1]
        self.send_response(status, reason)
        for k, v in fields:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_HEAD = do_PUT = answer

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print("READY %d" % server.server_address[1], flush=True)
server.serve_forever()
