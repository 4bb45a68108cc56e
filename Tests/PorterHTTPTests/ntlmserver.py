"""A real NTLM acceptor for the tests: HTTP/1.1 with keep-alive on loopback, the NTLM
handshake (type 1, 2, 3) verified by pyspnego against the users in NTLM_USER_FILE
("DOMAIN:user:password" lines).

    python ntlmserver.py PORT LOGFILE [--proxy]

As a server it answers 401 + WWW-Authenticate: NTLM; with --proxy it acts as a proxy that
asks for NTLM with 407 + Proxy-Authenticate (and answers the request itself once the
connection is authenticated; forwarding is not what the tests look at). NTLM
authenticates the connection: once the type 3 message is accepted, later requests on the
same connection are answered without asking again, as IIS does; a new connection starts
over. A request with `Upgrade: websocket` on an authenticated connection is upgraded
(the WebSocket tests' NTLM acceptor): one text message, then the client's close. Every request is logged as one line: the connection's number, the NTLM message
type it carried (0: none), the status sent, the path. Prints READY once listening.
"""
import base64
import hashlib
import http.server
import itertools
import socketserver
import sys

import spnego

PORT = int(sys.argv[1])
LOG = sys.argv[2]
PROXY = "--proxy" in sys.argv[3:]
CHALLENGE = "Proxy-Authenticate" if PROXY else "WWW-Authenticate"
ANSWER = "Proxy-Authorization" if PROXY else "Authorization"
DENIED = 407 if PROXY else 401
connections = itertools.count(1)


def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.number = next(connections)
        self.context = None
        self.user = None

    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=()):
        data = body.encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def handle_one(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        auth = self.headers.get(ANSWER, "")
        kind = 0
        if self.user is None and auth[:5].lower() == "ntlm ":
            try:
                token = base64.b64decode(auth[5:].strip())
                kind = token[8] if len(token) > 8 else -1
                if kind == 1 or self.context is None:
                    self.context = spnego.server(protocol="ntlm")
                out = self.context.step(token)
                if self.context.complete:
                    self.user = self.context.client_principal
                    self.context = None
                elif out:
                    log(f"{self.number} {kind} {DENIED} {self.path}")
                    return self.reply(DENIED, "continue\n", [(CHALLENGE, "NTLM " + base64.b64encode(out).decode())])
            except Exception as e:  # a refused or damaged message: start over
                log(f"{self.number} {kind} refused {type(e).__name__}")
                self.context = None
        if self.user is None:
            log(f"{self.number} {kind} {DENIED} {self.path}")
            return self.reply(DENIED, "NTLM please\n", [(CHALLENGE, "NTLM")])
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.upgrade(kind)
        log(f"{self.number} {kind} 200 {self.path}")
        text = f"ntlm user={self.user} connection={self.number} method={self.command} body={body.decode(errors='replace')}\n"
        self.reply(200, text)

    def upgrade(self, kind):
        """A WebSocket upgrade on the authenticated connection (RFC 6455 §4.2.2): the 101,
        one text message naming the user and the connection, then the client's frames
        are read and dropped until its close (answered) or the end of the stream."""
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        log(f"{self.number} {kind} 101 {self.path}")
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        text = f"ntlm user={self.user} connection={self.number}".encode()
        self.wfile.write(bytes([0x81, len(text)]) + text)
        self.wfile.flush()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                break
            length = head[1] & 0x7F
            if length == 126:
                length = int.from_bytes(self.rfile.read(2), "big")
            elif length == 127:
                length = int.from_bytes(self.rfile.read(8), "big")
            mask = self.rfile.read(4) if head[1] & 0x80 else b""
            payload = self.rfile.read(length)
            if head[0] & 0x0F == 8:
                if mask:
                    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
                self.wfile.write(bytes([0x88, len(payload[:125])]) + payload[:125])
                self.wfile.flush()
                break
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_HEAD = handle_one


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


server = Server(("127.0.0.1", PORT), Handler)
print("READY", flush=True)
server.serve_forever()
