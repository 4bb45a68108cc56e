#!/usr/bin/env python3
"""WebSocket and raw TCP servers for Porter's stream and WebSocket tests.

Usage: wsserver.py WS_PORT WSS_PORT RAW_PORT ECHO_PORT DEFLATE_PORT CERT KEY LOG
Prints "READY <WS_PORT>" once every server listens.

- WS_PORT / WSS_PORT: the `websockets` package (PyPI), plain and TLS, by path:
  /echo (every message back, text as text, binary as binary), /fragments (a text
  message in fragments cut inside a UTF-8 sequence, then a binary one in three),
  /close (closes with 4001 "bye"), /ping (pings the client, then says whether the pong
  came), /headers (the handshake's Cookie, X-Test, Authorization and Sec-WebSocket-Protocol as
  JSON), /extensions (the extension offer and answer as JSON, then an echo),
  /big?N (a binary message of N bytes), /setcookie (the 101 sets a cookie); any path
  ending in "?hsts" gets Strict-Transport-Security (max-age=600; includeSubDomains) in its 101.
  Subprotocols "chat" and "superchat" are accepted. No extension is agreed.
- DEFLATE_PORT: the same paths with permessage-deflate agreed (websockets' defaults:
  12-bit windows both ways, or what the client asks), plus /bomb (64 MiB of zeros, about
  64 KiB compressed; the close code the client sent is logged as "/bomb <code>").
- RAW_PORT: a hand-written server that breaks RFC 6455 as the path says, then logs the
  close code the client sent to LOG as "<path> <code>":
  /masked, /rsv, /badutf8, /fragmented-ping, /badclose, /continuation, /huge-length,
  /badaccept, /refuse (403), /extension, /unoffered-protocol, /eof (closes without a
  close frame); and
  /pings (10 pings in one write; then a text message naming the pongs that came back, in
  order), /then-bad (a text message and a frame with opcode 5 in one write; logs the text
  messages the client sent and its close code), /badutf8-fragment (a text message whose
  second of three fragments is not UTF-8, and no third), /deflate-raw (agrees
  permessage-deflate; inflates the client's messages itself, answers each with
  "<rsv1> <text>" compressed, and logs "/deflate-raw <rsv1>,<text>;..." at the close),
  /ping-flood (20 million pings, never reading the pongs; logs how many it could send),
  /redirect-ws?P and /redirect-http?P (302 to ws:// or http:// 127.0.0.1:P/echo on the
  WebSocket port P), /redirect-other?P (302 to ws://localhost:P/headers: another origin),
  /basic (401 with a Basic challenge unless "Authorization: Basic dXNlcjpwYXNz"
  (user:pass) comes; then the 101 and a text message with the Authorization seen).
- ECHO_PORT: a line echo server for stream tasks: "STARTTLS" answers "GO" then speaks
  TLS; at the end of the client's stream it sends "bye" and closes.
"""
import asyncio, base64, hashlib, json, os, socket, ssl, struct, sys, zlib

import websockets
from websockets.asyncio.server import serve
from websockets.datastructures import Headers
from websockets.http11 import Response

WS_PORT, WSS_PORT, RAW_PORT, ECHO_PORT, DEFLATE_PORT = (int(x) for x in sys.argv[1:6])
CERT, KEY, LOG = sys.argv[6:9]
# The server's own complaints, beside the log (the fixture sends stderr nowhere).
sys.stderr = open(os.path.join(os.path.dirname(LOG), "server.err"), "a", buffering=1)
import logging
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def handler(ws):
    path = ws.request.path
    if path.startswith("/echo"):
        async for message in ws:
            await ws.send(message)
    elif path.startswith("/close"):
        await ws.close(4001, "bye")
    elif path.startswith("/ping"):
        waiter = await ws.ping(b"from-server")
        try:
            await asyncio.wait_for(waiter, 5)
            await ws.send("pong received")
        except asyncio.TimeoutError:
            await ws.send("no pong")
        await ws.wait_closed()
    elif path.startswith("/headers"):
        h = ws.request.headers
        await ws.send(json.dumps({"cookie": h.get("Cookie"), "x-test": h.get("X-Test"),
                                  "protocol": h.get("Sec-WebSocket-Protocol"), "subprotocol": ws.subprotocol,
                                  "authorization": h.get("Authorization", "")}))
        await ws.wait_closed()
    elif path.startswith("/big"):
        n = int(path.split("?", 1)[1]) if "?" in path else 2 << 20
        await ws.send(bytes(i % 251 for i in range(n)))
        await ws.wait_closed()
    elif path.startswith("/setcookie"):
        await ws.send("ok")
        await ws.wait_closed()
    elif path.startswith("/bomb"):
        await ws.send(bytes(64 << 20))
        await ws.wait_closed()
        log_close("/bomb", ws.close_code)
    elif path.startswith("/extensions"):
        await ws.send(json.dumps({"offer": ws.request.headers.get("Sec-WebSocket-Extensions", ""),
                                  "agreed": ws.response.headers.get("Sec-WebSocket-Extensions", "")}))
        async for message in ws:
            await ws.send(message)
    else:
        await ws.close(1008, "no such path")


async def handler_main(ws):
    if ws.request.path.startswith("/fragments"):
        text = "héllo wörld ✓".encode()
        pieces = [text[:2], text[2:9], text[9:-2], text[-2:]]
        async with ws.send_context():
            from websockets.frames import Frame, Opcode
            OP_TEXT, OP_CONT = Opcode.TEXT, Opcode.CONT
            ws.protocol.send_frame(Frame(OP_TEXT, pieces[0], fin=False))
            for p in pieces[1:-1]:
                ws.protocol.send_frame(Frame(OP_CONT, p, fin=False))
            ws.protocol.send_frame(Frame(OP_CONT, pieces[-1], fin=True))
        await ws.send([b"\x00\x01", b"\x02", b"\x03\x04\x05"])
        await ws.wait_closed()
        return
    await handler(ws)


def process_response(connection, request, response):
    if request.path.startswith("/setcookie") and response.status_code == 101:
        response.headers["Set-Cookie"] = "ws=yes; Path=/"
    if request.path.endswith("?hsts") and response.status_code == 101:
        response.headers["Strict-Transport-Security"] = "max-age=600; includeSubDomains"
    return response


def select_subprotocol(connection, offered):
    """The first offered of "chat" and "superchat", or none (a client may offer none)."""
    for p in offered:
        if p in ("chat", "superchat"):
            return p
    return None


def log_close(path, code):
    with open(LOG, "a") as f:
        f.write(f"{path} {code}\n")


def frame(opcode, payload, fin=True, rsv=0, mask=False, length=None):
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | rsv | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + struct.pack("!H", n)
    else:
        head += bytes([m | 127]) + struct.pack("!Q", n)
    if mask:
        key = b"\x01\x02\x03\x04"
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        head += key
    return head + payload


async def read_client_frame(reader):
    """One client frame: (opcode, unmasked payload, rsv1)."""
    b = await asyncio.wait_for(reader.readexactly(2), 5)
    n = b[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", await reader.readexactly(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", await reader.readexactly(8))[0]
    key = await reader.readexactly(4) if b[1] & 0x80 else b"\0\0\0\0"
    payload = bytes(x ^ key[i % 4] for i, x in enumerate(await reader.readexactly(n)))
    return b[0] & 0x0F, payload, bool(b[0] & 0x40)


async def read_client_close(reader):
    """Reads client frames until a close; returns its code (or None)."""
    try:
        while True:
            b = await asyncio.wait_for(reader.readexactly(2), 5)
            n = b[1] & 0x7F
            if n == 126:
                n = struct.unpack("!H", await reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", await reader.readexactly(8))[0]
            key = await reader.readexactly(4) if b[1] & 0x80 else b"\0\0\0\0"
            payload = bytes(x ^ key[i % 4] for i, x in enumerate(await reader.readexactly(n)))
            if b[0] & 0x0F == 8:
                return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
    except Exception:
        return None


async def raw(reader, writer):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1]
    fields = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip().lower()] = v.strip()
    key = fields.get("sec-websocket-key", "")
    accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    if path.startswith("/redirect-"):
        kind, port = path[len("/redirect-"):].split("?")
        target = {"ws": f"ws://127.0.0.1:{port}/echo", "http": f"http://127.0.0.1:{port}/echo",
                  "other": f"ws://localhost:{port}/headers"}[kind]
        writer.write(f"HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()
        return
    if path == "/basic" and fields.get("authorization") != "Basic dXNlcjpwYXNz":
        writer.write(b'HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm="ws"\r\nContent-Length: 0\r\n\r\n')
        await writer.drain()
        writer.close()
        return
    if path == "/refuse":
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\nnope\r\n")
        await writer.drain()
        writer.close()
        return
    if path == "/badaccept":
        accept = base64.b64encode(b"0" * 20).decode()
    if path == "/silent":
        # Reads the request and never answers.
        await asyncio.sleep(30)
        writer.close()
        return
    extra = ""
    if path == "/extension":
        extra = "Sec-WebSocket-Extensions: permessage-deflate\r\n"
    if path == "/unoffered-protocol":
        extra = "Sec-WebSocket-Protocol: evil\r\n"
    if path == "/deflate-raw":
        extra = "Sec-WebSocket-Extensions: permessage-deflate; client_no_context_takeover; server_no_context_takeover\r\n"
    writer.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {accept}\r\n{extra}\r\n").encode())
    bad = {
        "/masked": frame(1, b"hidden", mask=True),
        "/rsv": frame(1, b"deflated?", rsv=0x40),
        "/badutf8": frame(1, b"\xc3\x28 not utf-8"),
        "/fragmented-ping": frame(9, b"ping", fin=False),
        "/badclose": frame(8, struct.pack("!H", 1005)),
        "/continuation": frame(0, b"orphan"),
        "/huge-length": frame(2, b"", length=1 << 40),
        "/eof": frame(1, b"last words"),
    }.get(path, b"")
    if path == "/basic":
        bad = frame(1, fields.get("authorization", "").encode())
    if path == "/pings":
        bad = b"".join(frame(9, f"p{i}".encode()) for i in range(10))
    if path == "/then-bad":
        bad = frame(1, b"first") + frame(5, b"")
    if path == "/badutf8-fragment":
        bad = frame(1, b"valid ", fin=False) + frame(0, b"\xff bad", fin=False)
    writer.write(bad)
    await writer.drain()
    if path == "/pings":
        pongs = []
        try:
            while len(pongs) < 10:
                op, payload, _ = await read_client_frame(reader)
                if op == 10:
                    pongs.append(payload.decode())
        except Exception:
            pass
        writer.write(frame(1, ("pongs " + " ".join(pongs)).encode()))
        await writer.drain()
    if path == "/then-bad":
        texts = []
        code = None
        try:
            while True:
                op, payload, _ = await read_client_frame(reader)
                if op == 1:
                    texts.append(payload.decode())
                if op == 8:
                    code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                    break
        except Exception:
            pass
        log_close(path, ",".join(texts) + f" {code}")
        writer.close()
        return
    if path == "/deflate-raw":
        seen = []
        try:
            while True:
                op, payload, rsv1 = await read_client_frame(reader)
                if op == 8:
                    break
                if op == 1:
                    text = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff").decode() if rsv1 else payload.decode()
                    seen.append(f"{int(rsv1)},{text}")
                    c = zlib.compressobj(6, zlib.DEFLATED, -15)
                    body = c.compress(f"{int(rsv1)} {text}".encode()) + c.flush(zlib.Z_SYNC_FLUSH)
                    writer.write(frame(1, body[:-4], rsv=0x40))
                    await writer.drain()
        except Exception as e:
            print(f"deflate-raw: {e!r}", file=sys.stderr)
        log_close(path, ";".join(seen))
        writer.close()
        return
    if path == "/eof":
        writer.close()
        return
    if path == "/ping-flood":
        # Pings as fast as the client takes them, never reading its pongs; how many went is logged.
        sent = 0
        try:
            for _ in range(2000):
                writer.write(b"\x89\x00" * 10000)
                await asyncio.wait_for(writer.drain(), 2)
                sent += 10000
        except Exception:
            pass
        log_close(path, sent)
        await asyncio.sleep(5)
        writer.close()
        return
    if path == "/empty-flood":
        # Empty text messages as fast as the client takes them; how many went is logged.
        sent = 0
        try:
            # 20 million frames, 40 MB: more than the kernel's socket buffers hold.
            for _ in range(2000):
                writer.write(b"\x81\x00" * 10000)
                await asyncio.wait_for(writer.drain(), 2)
                sent += 10000
        except Exception:
            pass
        log_close(path, sent)
        await asyncio.sleep(5)
        writer.close()
        return
    if path == "/deaf":
        # Never reads: the client's writes back up; then a protocol violation.
        await asyncio.sleep(0.5)
        writer.write(frame(1, b"masked", mask=True))
        await writer.drain()
        await asyncio.sleep(20)
        writer.close()
        return
    code = await read_client_close(reader)
    log_close(path, code)
    writer.close()


async def echo(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                writer.write(b"bye\n")
                await writer.drain()
                break
            if line.strip() in (b"STARTTLS", b"STARTTLS-TAMPER", b"STARTTLS-CUT"):
                command = line.strip()
                # Stop reading before saying GO: a ClientHello read into the plain stream
                # buffer before start_tls would be lost to the TLS layer.
                writer.transport.pause_reading()
                writer.write(b"GO\n")
                await writer.drain()
                ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                ctx.load_cert_chain(CERT, KEY)
                await writer.start_tls(ctx)
                if command != b"STARTTLS":
                    await asyncio.sleep(0.3)
                    fd = writer.transport.get_extra_info("socket").fileno()
                    if command == b"STARTTLS-TAMPER":
                        # A forged record on the path: the client must not take it for data or an end.
                        os.write(fd, b"\x17\x03\x03\x00\x20" + b"\x00" * 32)
                    # Either way the TCP connection ends with no TLS close_notify.
                    os.close(os.dup(fd))
                    socket.socket(fileno=os.dup(fd)).shutdown(socket.SHUT_RDWR)
                    await asyncio.sleep(1)
                    break
                continue
            writer.write(line)
            await writer.drain()
    except Exception as e:
        print(f"echo: {e!r}", file=sys.stderr)
    log_close("echo-closed", 0)
    writer.close()


async def orphan_watch():
    """Ends the server when the test process that started it is gone."""
    parent = os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(1)
    os._exit(0)


async def main():
    asyncio.get_running_loop().create_task(orphan_watch())
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(CERT, KEY)
    # As production front ends do: h2 is offered, so a client that offers it too would
    # get HTTP/2, and no WebSocket handshake.
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    kw = dict(select_subprotocol=select_subprotocol, process_response=process_response,
              max_size=32 << 20, compression=None)
    deflate_kw = dict(kw, compression="deflate", max_size=None)
    async with serve(handler_main, "127.0.0.1", WS_PORT, **kw), \
            serve(handler_main, "127.0.0.1", WSS_PORT, ssl=ctx, **kw), \
            serve(handler_main, "127.0.0.1", DEFLATE_PORT, **deflate_kw):
        raw_server = await asyncio.start_server(raw, "127.0.0.1", RAW_PORT)
        echo_server = await asyncio.start_server(echo, "127.0.0.1", ECHO_PORT)
        print(f"READY {WS_PORT}", flush=True)
        async with raw_server, echo_server:
            await asyncio.Future()


asyncio.run(main())
