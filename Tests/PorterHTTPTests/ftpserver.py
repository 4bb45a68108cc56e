"""FTP + explicit FTPS server for Porter's tests (pyftpdlib from a venv: Debian's
python3-pyftpdlib breaks FTPS downloads with this libcurl). Prints "READY <port>".

usage: ftpserver.py ROOT CERT KEY [LOG]   (user alice / secret with full rights on
ROOT, anonymous read-only on ROOT/pub; LOG gets every command and reply)
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
authorizer.add_anonymous(os.path.join(root, "pub"))
handler = TLS_FTPHandler
handler.certfile = cert
handler.keyfile = key
handler.tls_control_required = False
handler.tls_data_required = False
handler.authorizer = authorizer
handler.banner = "porter test ftp"
server = FTPServer(("127.0.0.1", 0), handler)
print("READY %d" % server.address[1], flush=True)
server.serve_forever(handle_exit=True)
