"""A recording upstream: a real threaded HTTP(S) server on loopback that remembers what it received."""
from __future__ import annotations

import datetime
import ipaddress
import json
import os
import random
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Seen:
    method: str
    path: str
    headers: dict
    body: bytes
    at: float = field(default_factory=time.time)


@dataclass
class Recorder:
    requests: list = field(default_factory=list)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seen: Seen) -> None:
        with self.lock:
            self.requests.append(seen)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = b""
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        if n > 64 * 1024 * 1024:
            remaining = n
            while remaining:
                remaining -= len(self.rfile.read(min(remaining, 1 << 20)))
            return b"<discarded %d>" % n
        return self.rfile.read(n) if n else b""

    def _handle(self) -> None:
        body = self._body()
        self.server.recorder.add(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        path = self.path.split("?", 1)[0]
        if path.startswith("/auth/") and "Authorization" not in self.headers:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path.startswith("/upgrade"):
            return self._upgrade()
        if path.startswith("/split"):
            return self._split(self.path.split("value=", 1)[-1].split("&", 1)[0].encode())
        if path.startswith("/big/"):
            return self._big(int(path.split("/")[2]))
        if path.startswith("/echo"):
            payload = json.dumps({"method": self.command, "path": self.path,
                                  "headers": {k: v for k, v in self.headers.items()},
                                  "body": body.decode("latin-1")}).encode()
            return self._send(200, payload, "application/json")
        if path.startswith("/status/"):
            return self._send(int(path.split("/")[2]), b"status\n", "text/plain")
        self._send(200, b"hello from upstream\n", "text/plain")

    def _send(self, status: int, payload: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _upgrade(self) -> None:
        """Switch protocols to whatever the client asked for, then record every raw byte that follows."""
        self.send_response(101)
        self.send_header("Upgrade", self.headers.get("Upgrade", "x-raw"))
        self.send_header("Connection", "Upgrade")
        self.end_headers()
        self.wfile.flush()
        self.connection.settimeout(3)
        data = b""
        try:
            while chunk := self.rfile.read1(65536):
                data += chunk
        except OSError:
            pass
        if data:
            self.server.recorder.add(Seen("RAW", "/upgrade-raw", {}, data))
        self.close_connection = True

    def _split(self, value: bytes) -> None:
        """Send `value` split across two chunks of a chunked response, with a pause between them."""
        import time as _time

        half = len(value) // 2
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in (b"token: " + value[:half], value[half:] + b" end\n"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
            _time.sleep(0.3)
        self.wfile.write(b"0\r\n\r\n")

    def _big(self, size: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        chunk = b"x" * (1 << 20)
        left = size
        while left > 0:
            n = min(left, len(chunk))
            self.wfile.write(chunk[:n])
            left -= n

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    recorder: Recorder

    def get_request(self):
        conn, addr = super().get_request()
        with self.recorder.lock:
            self.recorder.connections += 1
        return conn, addr


class Upstream:
    """`with Upstream() as up:` -> up.port, up.recorder; `Upstream(tls=CertPair)` for HTTPS."""

    def __init__(self, host: str = "127.0.0.1", tls: "CertPair | None" = None):
        self.recorder = Recorder()
        self.server = _Server((host, 0), _Handler)
        self.server.recorder = self.recorder
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls.cert, tls.key)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.host, self.port = self.server.server_address[:2]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "Upstream":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class EchoServer:
    """A raw TCP echo server on loopback: `with EchoServer() as echo:` -> echo.port, echo.received, echo.connections."""

    def __init__(self, host: str = "127.0.0.1"):
        self.sock = socket.create_server((host, 0))
        self.host, self.port = self.sock.getsockname()[:2]
        self.received = b""
        self.connections = 0
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                while chunk := conn.recv(65536):
                    with self.lock:
                        self.received += chunk
                    conn.sendall(chunk)
            except OSError:
                pass

    def __enter__(self) -> "EchoServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


@dataclass
class CertPair:
    cert: str
    key: str


def make_cert(directory: Path, names: list[str], ips: list[str] = ("127.0.0.1",)) -> CertPair:
    """A self-signed server certificate (its own CA) for the given names."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    sans = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "upstream.pem", directory / "upstream.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return CertPair(str(cert_path), str(key_path))


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999                     # Linux's default


_HANDED_OUT: set[int] = set()
_PORTS = random.Random()


def _worker() -> tuple[int, int]:
    """(this pytest-xdist worker's index, the number of workers); (0, 1) outside xdist."""
    name, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(name[2:]) % int(count), int(count)
    return 0, 1


def free_port(host: str = "127.0.0.1") -> int:
    """A free port for a server a test starts a moment later. Chosen below the kernel's ephemeral range: a port
    the kernel picks (bind to 0) can be taken by any outgoing connection (a PostgreSQL client, a policy worker)
    between this call and the server's bind, which made a replica fail to start now and then with
    "address already in use". Never the same port twice in one process, and never one another pytest-xdist
    worker of the same run can hand out (worker i of n takes the ports p with p % n == i)."""
    index, workers = _worker()
    low, high = _ephemeral_range()
    top = low - 1 if low > 12000 else 65535
    bottom = 10000 if low > 12000 else high + 1
    for _ in range(200):
        port = _PORTS.randint(bottom, top)
        port -= (port - index) % workers
        if port < bottom or port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port outside the ephemeral range")
