"""A real NTLM acceptor for the tests: HTTP/1.1 with keep-alive on loopback, the NTLM
handshake (type 1, 2, 3) verified by pyspnego against the users in NTLM_USER_FILE
("DOMAIN:user:password" lines).

    python ntlmserver.py PORT LOGFILE [--proxy]

As a server it answers 401 + WWW-Authenticate: NTLM; with --proxy it acts as a proxy that
asks for NTLM with 407 + Proxy-Authenticate (and answers the request itself once the
connection is authenticated; forwarding is not what the tests look at). NTLM
authenticates the connection: once the type 3 message is accepted, later requests on the
same connection are answered without asking again, as IIS does; a new connection starts
over. Every request is logged as one line: the connection's number, the NTLM message
type it carried (0: none), the status sent, the path. Prints READY once listening.
"""
import base64
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
        log(f"{self.number} {kind} 200 {self.path}")
        text = f"ntlm user={self.user} connection={self.number} method={self.command} body={body.decode(errors='replace')}\n"
        self.reply(200, text)

    do_GET = do_POST = do_PUT = do_HEAD = handle_one


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


server = Server(("127.0.0.1", PORT), Handler)
print("READY", flush=True)
server.serve_forever()
