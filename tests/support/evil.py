"""A hostile upstream for red-team tests: it echoes the credential it received in the places a scrubber may miss.

A real threaded TCP server on loopback (optionally TLS, offering h2 and http/1.1 by ALPN). For each request it
takes the value after "Bearer " in the Authorization header (the real secret, once sandgate injected it) and
puts it where the path says:

    /reason      in the HTTP/1 reason phrase
    /trailer     in an HTTP/1 chunked trailer, or an HTTP/2 trailer
    /hname       in a header name (X-<value>: 1)
    /gzip        gzip-compressed in the body (Content-Encoding: gzip)
    /unknown-ce  raw in a body declared with an unknown Content-Encoding
    /ws101       in a header of a WebSocket 101 switch
    /badline     in a malformed status line (the proxy's own error message quotes it)
    /badname     in an invalid header name (X-<value>(: 1), which mitmproxy's header validation quotes
    /dupte       in a second Transfer-Encoding header, which mitmproxy's header validation quotes
    /te-gzip     gzip-compressed in a body with Transfer-Encoding: gzip, chunked
    /nocontent   in a header of a 204 that declares Content-Length: 0 (keep-alive must stay in sync)
    /early       in a 103 Early Hints before the real answer
    /fold        split across an obsolete header line folding
    /b64         base64-encoded in the body, in both alphabets (standard, URL-safe) at each of the three byte
                 alignments
    /store       nowhere; remembered, and /fetch returns it later in a plain body (a request without a secret),
                 honouring a Range header
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import socket
import ssl
import threading

import h2.config
import h2.connection
import h2.events

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _bearer(headers: dict[str, str]) -> str:
    value = headers.get("authorization", "")
    return value.split(" ", 1)[1] if value.lower().startswith("bearer ") else value


class EvilUpstream:
    """`with EvilUpstream(tls=cert) as evil:` -> evil.port, evil.seen (list of (path, headers))."""

    def __init__(self, tls=None):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.ctx = None
        if tls is not None:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(tls.cert, tls.key)
            self.ctx.set_alpn_protocols(["h2", "http/1.1"])
        self.seen: list[tuple[str, dict]] = []
        self.stored = ""
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "EvilUpstream":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            if self.ctx is not None:
                conn = self.ctx.wrap_socket(conn, server_side=True)
                if conn.selected_alpn_protocol() == "h2":
                    return self._h2(conn)
            self._h1(conn)
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    # -- HTTP/1 ----------------------------------------------------------------------------------
    def _h1(self, conn: socket.socket) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, _, buf = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
            length = int(headers.get("content-length", "0") or 0)
            while len(buf) < length:
                buf += conn.recv(65536)
            buf = buf[length:]
            self.seen.append((path, headers))
            conn.sendall(self._h1_answer(path.split("?", 1)[0], _bearer(headers), headers))
            if path.startswith(("/ws101", "/badline", "/badname", "/dupte")):
                return

    def _h1_answer(self, path: str, secret: str, headers: dict) -> bytes:
        s = secret.encode("latin-1")
        if path == "/reason":
            return b"HTTP/1.1 200 OK " + s + b"\r\nContent-Length: 2\r\n\r\nok"
        if path == "/trailer":
            return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Echo\r\n\r\n"
                    b"2\r\nok\r\n0\r\nX-Echo: " + s + b"\r\n\r\n")
        if path == "/hname":
            return b"HTTP/1.1 200 OK\r\nX-" + s + b": 1\r\nContent-Length: 2\r\n\r\nok"
        if path == "/gzip":
            body = gzip.compress(b"token=" + s)
            return (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
        if path == "/unknown-ce":
            body = b"token=" + s
            return (b"HTTP/1.1 200 OK\r\nContent-Encoding: x-evil\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
        if path == "/ws101":
            key = headers.get("sec-websocket-key", "").encode()
            accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
            return (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Accept: " + accept + b"\r\nX-Echo: " + s + b"\r\n\r\n")
        if path == "/badline":
            return b"HTTP/1.1 2xx " + s + b"\r\nContent-Length: 0\r\n\r\n"
        if path == "/badname":
            return b"HTTP/1.1 200 OK\r\nX-" + s + b"(: 1\r\nContent-Length: 2\r\n\r\nok"
        if path == "/dupte":
            return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: " + s +
                    b"\r\n\r\n2\r\nok\r\n0\r\n\r\n")
        if path == "/te-gzip":
            body = gzip.compress(b"token=" + s)
            return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n%x\r\n" % len(body) + body +
                    b"\r\n0\r\n\r\n")
        if path == "/nocontent":
            return b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nX-Echo: " + s + b"\r\n\r\n"
        if path == "/early":
            return (b"HTTP/1.1 103 Early Hints\r\nLink: <https://cdn.test/" + s + b">\r\n\r\n"
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        if path == "/fold":
            return b"HTTP/1.1 200 OK\r\nX-Echo: " + s[:10] + b"\r\n " + s[10:] + b"\r\nContent-Length: 2\r\n\r\nok"
        if path == "/b64":
            body = b"".join(b"%s%d=%s\n" % (name, lead, encode(b"x" * lead + s + b"!")) for lead in range(3)
                            for name, encode in ((b"std", base64.b64encode), (b"url", base64.urlsafe_b64encode)))
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        if path == "/store":
            self.stored = secret
            return b"HTTP/1.1 204 No Content\r\n\r\n"
        if path == "/fetch":
            body = b"stored=" + self.stored.encode("latin-1")
            wanted = headers.get("range", "")
            if wanted.startswith("bytes="):            # honour a single byte range, like any file server
                first, _, last = wanted[6:].partition("-")
                part = body[int(first):int(last) + 1]
                return (b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d"
                        b"\r\n\r\n" % (int(first), int(first) + len(part) - 1, len(body), len(part)) + part)
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    # -- HTTP/2 ----------------------------------------------------------------------------------
    def _h2(self, conn: ssl.SSLSocket) -> None:
        h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        h2c.initiate_connection()
        conn.sendall(h2c.data_to_send())
        requests: dict[int, dict] = {}
        while True:
            data = conn.recv(65536)
            if not data:
                return
            for event in h2c.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    requests[event.stream_id] = {k.decode().lower(): v.decode() for k, v in event.headers}
                elif isinstance(event, h2.events.TrailersReceived) and event.stream_id in requests:
                    requests[event.stream_id]["trailers"] = repr(event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    h2c.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    if event.stream_id in requests:
                        requests[event.stream_id]["body"] = requests[event.stream_id].get("body", "") + \
                            event.data.decode("latin-1")
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id in requests:
                    headers = requests.pop(event.stream_id)
                    self.seen.append((headers.get(":path", ""), headers))
                    self._h2_answer(h2c, event.stream_id, headers.get(":path", "").split("?", 1)[0],
                                    _bearer(headers))
            conn.sendall(h2c.data_to_send())

    def _h2_answer(self, h2c: h2.connection.H2Connection, stream: int, path: str, secret: str) -> None:
        if path == "/trailer":
            h2c.send_headers(stream, [(":status", "200"), ("content-type", "text/plain")])
            h2c.send_data(stream, b"ok")
            h2c.send_headers(stream, [("x-echo", secret)], end_stream=True)
        elif path == "/hname":
            h2c.send_headers(stream, [(":status", "200"), ("x-" + secret.lower(), "1")])
            h2c.send_data(stream, b"ok", end_stream=True)
        elif path == "/gzip":
            body = gzip.compress(b"token=" + secret.encode())
            h2c.send_headers(stream, [(":status", "200"), ("content-encoding", "gzip"),
                                      ("content-length", str(len(body)))])
            h2c.send_data(stream, body, end_stream=True)
        else:
            h2c.send_headers(stream, [(":status", "200"), ("content-length", "2")])
            h2c.send_data(stream, b"ok", end_stream=True)
