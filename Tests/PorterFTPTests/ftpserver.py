"""FTP + explicit FTPS server for Porter's tests (pyftpdlib from a venv: Debian's
python3-pyftpdlib breaks FTPS downloads with this libcurl). Prints "READY <port>".

usage: ftpserver.py ROOT CERT KEY [LOG [IMPLICIT_PORT_FILE]]   (user alice / secret
with full rights on ROOT, anonymous read-only on ROOT/pub, user legacy / secret
read-only with no MLSD and TLS required; LOG gets every command and reply). With
IMPLICIT_PORT_FILE, a second listener speaks implicit FTPS (TLS from the first byte, as
on port 990: curl's ftps://) and its port is written to that file before READY.
"""
import logging, os, sys
from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import TLS_FTPHandler
from pyftpdlib.servers import FTPServer

root, cert, key = sys.argv[1:4]
if len(sys.argv) > 4:
    transcript = logging.FileHandler(sys.argv[4])
    transcript.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("pyftpdlib")
    logger.addHandler(transcript)
    logger.setLevel(logging.DEBUG)
authorizer = DummyAuthorizer()
authorizer.add_user("alice", "secret", root, perm="elradfmwMT")
authorizer.add_user("legacy", "secret", root, perm="elr")
authorizer.add_anonymous(os.path.join(root, "pub"))

class Handler(TLS_FTPHandler):
    """User "legacy" meets an old server: no MLSD (listings fall back to LIST), and no
    login without TLS on the control connection (so a fallback that forgot TLS fails)."""

    def ftp_PASS(self, line):
        if self.username == "legacy" and not self._ssl_established:
            self.respond("530 TLS is required for this user.")
            return
        return super().ftp_PASS(line)

    def ftp_MLSD(self, path):
        if self.username == "legacy":
            self.respond('500 Command "MLSD" not understood.')
            return
        return super().ftp_MLSD(path)


handler = Handler
handler.certfile = cert
handler.keyfile = key
handler.tls_control_required = False
handler.tls_data_required = False
handler.authorizer = authorizer
handler.banner = "porter test ftp"
server = FTPServer(("127.0.0.1", 0), handler)


class ImplicitHandler(Handler):
    """Implicit FTPS: the TLS handshake comes first, then the banner, over TLS."""

    def handle(self):
        self.secure_connection(self.ssl_context)
        super().handle()


if len(sys.argv) > 5:
    implicit = FTPServer(("127.0.0.1", 0), ImplicitHandler, ioloop=server.ioloop)
    with open(sys.argv[5], "w") as f:
        f.write("%d\n" % implicit.address[1])
print("READY %d" % server.address[1], flush=True)
server.serve_forever(handle_exit=True)
