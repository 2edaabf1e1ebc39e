"""A small recording forward proxy (CONNECT and absolute-form HTTP/1.1), a stand-in for a corporate proxy.

It records every request head it was asked (method, target, headers) and every byte it relayed each way, so a test
can check what the proxy was told and that no secret ever crossed it in the clear. Names in targets resolve through
its own `hosts` map (like a proxy that alone resolves outside names); with `credentials` set it answers 407 without
the matching Proxy-Authorization.
"""
from __future__ import annotations

import base64
import select
import socket
import socketserver
import threading
from dataclasses import dataclass, field


@dataclass
class Asked:
    method: str
    target: str
    headers: dict[str, str]


@dataclass
class ProxyLog:
    asked: list[Asked] = field(default_factory=list)
    relayed: bytearray = field(default_factory=bytearray)     # everything that crossed it, both ways
    lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        with self.lock:
            self.asked.clear()
            self.relayed.clear()


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a request head")
        buf += chunk
        if len(buf) > 65536:
            raise ConnectionError("head too large")
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _split_target(authority: str) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, port = authority[1:].partition("]:")
        return host, int(port)
    host, _, port = authority.rpartition(":")
    return host, int(port)


class _Handler(socketserver.BaseRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        client = self.request
        try:
            while self._one(client):
                pass
        except (OSError, ConnectionError, ValueError):
            pass

    def _one(self, client: socket.socket) -> bool:
        head, rest = _read_head(client)
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        log = self.server.log
        with log.lock:
            log.asked.append(Asked(method, target, headers))
            log.relayed += head + b"\r\n\r\n" + rest
        if self.server.credentials and headers.get("proxy-authorization") != self.server.credentials:
            client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n"
                           b"Content-Length: 0\r\n\r\n")
            return True
        if method == "CONNECT":
            up = self._dial(target)
            if up is None:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return False
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                up.sendall(rest)
            self._pipe(client, up)
            return False
        if not target.startswith("http://"):
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return False
        authority, _, path = target[len("http://"):].partition("/")
        has_port = "]:" in authority if authority.startswith("[") else ":" in authority
        up = self._dial(authority if has_port else authority + ":80")
        if up is None:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return False
        kept = [line for line in lines[1:] if not line.lower().startswith(("proxy-authorization:",
                                                                            "proxy-connection:"))]
        up.sendall(("\r\n".join([f"{method} /{path} HTTP/1.1", *kept, "Connection: close"]) + "\r\n\r\n").encode(
            "latin-1") + rest)
        self._pipe(client, up)
        return False

    def _dial(self, authority: str) -> socket.socket | None:
        host, port = _split_target(authority)
        host = self.server.hosts.get(host, host)
        try:
            return socket.create_connection((host, port), timeout=10)
        except OSError:
            return None

    def _pipe(self, client: socket.socket, up: socket.socket) -> None:
        log = self.server.log
        socks = [client, up]
        try:
            while True:
                readable, _, _ = select.select(socks, [], [], 30)
                if not readable:
                    return
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    (up if s is client else client).sendall(data)
                    with log.lock:
                        log.relayed += data
        finally:
            up.close()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, hosts: dict[str, str], credentials: str | None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.log = ProxyLog()
        self.hosts = hosts
        self.credentials = credentials


class ForwardProxy:
    """`with ForwardProxy(hosts={"bound.test": "127.0.0.1"}, user="u", password="p") as proxy: proxy.url`"""

    def __init__(self, hosts: dict[str, str] | None = None, user: str = "", password: str = ""):
        creds = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode() if user else None
        self._server = _Server(dict(hosts or {}), creds)
        self.log = self._server.log
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "ForwardProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
