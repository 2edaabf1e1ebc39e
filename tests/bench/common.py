"""Shared helpers for the benchmarks: a fast loopback upstream, a raw keep-alive HTTP/1.1 client,
/proc readers and small statistics.

Standard library only, so that `python tests/bench/common.py upstream --port P` can run the upstream
in its own process without importing the project.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1 << 20
SMALL_BODY = (b"sandgate-bench:" + b"x" * 84 + b"\n")          # 100 bytes
_CHUNK = memoryview(b"\0" * (256 * 1024))


# -- processes -----------------------------------------------------------------------------------
def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_port(host: str, port: int, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout:.0f}s")


def stop_process(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`. Only ever the process we started."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def proc_status_kb(pid: int, name: str) -> int:
    """A field of /proc/PID/status in kB (VmRSS, VmHWM, ...)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {name}")


_TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds the process and its live child processes (policy workers) used so far."""
    total = 0.0
    for p in [pid] + _children(pid):
        try:
            text = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and every live descendant (`serve --workers N`: the supervisor, its
    workers and their policy workers)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            text = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        total += (int(fields[11]) + int(fields[12])) / _TICK
        todo += _children(p)
    return total


class RssSampler:
    """Samples VmRSS of a process in the background (asyncio) and keeps the peak."""

    def __init__(self, pid: int, every_s: float = 0.02):
        self.pid, self.every_s, self.peak_kb = pid, every_s, 0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            self.peak_kb = max(self.peak_kb, proc_status_kb(self.pid, "VmRSS"))
            await asyncio.sleep(self.every_s)

    def __enter__(self) -> "RssSampler":
        self.peak_kb = proc_status_kb(self.pid, "VmRSS")
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc) -> None:
        if self._task is not None:
            self._task.cancel()
        self.peak_kb = max(self.peak_kb, proc_status_kb(self.pid, "VmRSS"))


# -- statistics ----------------------------------------------------------------------------------
def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(p / 100.0 * len(ordered))))
    return ordered[rank - 1]


# -- upstream ------------------------------------------------------------------------------------
class _UpstreamProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive server. GET /small -> 100 bytes; GET /big/N -> N bytes, streamed with backpressure.

    No request bodies are expected (a Content-Length body is skipped). Requests are answered in order.
    """

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = bytearray()
        self.skip = 0
        self.busy = False
        self.writable = asyncio.Event()
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        while not self.busy:
            if self.skip:
                n = min(self.skip, len(self.buf))
                del self.buf[:n]
                self.skip -= n
                if self.skip:
                    return
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end])
            del self.buf[:end + 4]
            lines = head.split(b"\r\n")
            parts = lines[0].split(b" ")
            if len(parts) != 3:
                self.transport.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                self.transport.close()
                return
            close = False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    self.skip = int(value.strip() or b"0")
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            target = parts[1]
            if target.startswith(b"http://") or target.startswith(b"https://"):
                target = b"/" + target.split(b"/", 3)[3] if target.count(b"/") >= 3 else b"/"
            if target == b"/small" or target.startswith(b"/small?"):
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                                     % (len(SMALL_BODY), SMALL_BODY))
            elif target.startswith(b"/big/") and target[5:].isdigit():
                self.busy = True
                asyncio.get_running_loop().create_task(self._stream(int(target[5:]), close))
                return
            else:
                self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            if close:
                self.transport.close()
                return

    async def _stream(self, size: int, close: bool) -> None:
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             b"Content-Length: %d\r\n\r\n" % size)
        left = size
        while left > 0:
            if self.transport.is_closing():
                return
            await self.writable.wait()
            n = min(left, len(_CHUNK))
            self.transport.write(_CHUNK[:n])
            left -= n
        self.busy = False
        if close:
            self.transport.close()
        else:
            self._process()


class _H2UpstreamProtocol(asyncio.Protocol):
    """HTTP/2 server (the `h2` library; imported only when used): every request is answered with SMALL_BODY."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        import h2.config
        import h2.connection
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.conn.initiate_connection()
        self.transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        import h2.events
        import h2.exceptions
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.conn.send_headers(event.stream_id, [(":status", "200"), ("content-type", "text/plain"),
                                                         ("content-length", str(len(SMALL_BODY)))])
                self.conn.send_data(event.stream_id, SMALL_BODY, end_stream=True)
        self.transport.write(self.conn.data_to_send())


def _tls_context(cert: str, key: str, alpn: list[str]):
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(alpn)
    return ctx


async def serve_upstream(host: str, port: int, cert: str = "", key: str = "", h2: bool = False) -> None:
    """Plain HTTP/1.1; with a certificate, HTTPS (ALPN http/1.1 only), or with `h2` HTTPS speaking HTTP/2 only."""
    loop = asyncio.get_running_loop()
    ssl_ctx = _tls_context(cert, key, ["h2"] if h2 else ["http/1.1"]) if cert else None
    server = await loop.create_server(_H2UpstreamProtocol if h2 else _UpstreamProtocol, host, port, backlog=1024,
                                      reuse_address=True, ssl=ssl_ctx)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


# -- client --------------------------------------------------------------------------------------
class HttpError(RuntimeError):
    pass


@dataclass
class Response:
    status: int
    headers: dict
    body: bytes
    size: int                      # body bytes received (body may be b"" when discarded)


@dataclass
class Conn:
    """One keep-alive HTTP/1.1 connection (plain TCP), used by a single coroutine at a time."""
    host: str
    port: int
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    opened: int = 0
    extra: dict = field(default_factory=dict)

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.opened += 1

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, raw: bytes, *, keep_body: bool = True) -> Response:
        """Send a complete request (bytes) and read one response. Reopens a closed connection once."""
        if self.writer is None:
            await self.open()
        try:
            self.writer.write(raw)
            return await self._read_response(keep_body)
        except (ConnectionError, asyncio.IncompleteReadError):
            # the server closed an idle keep-alive connection between requests: one retry on a new one
            self.close()
            await self.open()
            self.writer.write(raw)
            return await self._read_response(keep_body)

    async def _read_response(self, keep_body: bool) -> Response:
        reader = self.reader
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
            raise HttpError(f"bad status line {lines[0]!r}")
        status = int(status_line[1])
        headers: dict = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        chunks: list[bytes] = []
        size = 0
        if "content-length" in headers:
            left = int(headers["content-length"])
            if keep_body:
                body = await reader.readexactly(left) if left else b""
                size = len(body)
                chunks.append(body)
            else:
                while left:
                    data = await reader.read(min(left, 1 << 20))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", left)
                    left -= len(data)
                    size += len(data)
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                line = await reader.readuntil(b"\r\n")
                n = int(line.split(b";", 1)[0].strip(), 16)
                if n == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":   # trailers
                        pass
                    break
                left = n
                while left:
                    data = await reader.read(min(left, 1 << 20))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", left)
                    left -= len(data)
                    size += len(data)
                    if keep_body:
                        chunks.append(data)
                await reader.readexactly(2)
        elif status not in (204, 304) and not (100 <= status < 200):
            while True:                                             # body until close
                data = await reader.read(1 << 20)
                if not data:
                    break
                size += len(data)
                if keep_body:
                    chunks.append(data)
            self.close()
        if headers.get("connection", "").lower() == "close" and self.writer is not None:
            self.close()
        return Response(status, headers, b"".join(chunks), size)


def build_request(method: str, target: str, host: str, headers: dict | None = None, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def main() -> None:
    parser = argparse.ArgumentParser(description="benchmark helpers")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("upstream", help="run the loopback upstream until SIGTERM")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, required=True)
    up.add_argument("--cert", default="", help="serve HTTPS with this certificate (PEM) ...")
    up.add_argument("--key", default="", help="... and key")
    up.add_argument("--h2", action="store_true", help="speak HTTP/2 only (with --cert)")
    args = parser.parse_args()
    if args.cmd == "upstream":
        asyncio.run(serve_upstream(args.host, args.port, args.cert, args.key, args.h2))


if __name__ == "__main__":
    main()
