"""A raw client for tunnel tests: CONNECT through the proxy, then send exactly the bytes a test wants."""
from __future__ import annotations

import base64
import socket
import ssl
import time

import h2.connection
import h2.events


def proxy_auth(token: str) -> str:
    return "Basic " + base64.b64encode(f"sandbox:{token}".encode()).decode()


def read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def open_tunnel(proxy_port: int, token: str, target: str) -> socket.socket:
    """A socket with an established CONNECT tunnel to `target` ("host:port")."""
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
                 f"Proxy-Authorization: {proxy_auth(token)}\r\n\r\n".encode())
    head = read_head(sock)
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        sock.close()
        raise AssertionError(f"CONNECT {target} refused: {head[:200]!r}")
    return sock


def send_segments(sock: socket.socket, segments: list[bytes], pause_s: float = 0.15) -> None:
    """Each segment in its own write, with a pause between them (separate TCP segments)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i, segment in enumerate(segments):
        if i:
            time.sleep(pause_s)
        try:
            sock.sendall(segment)
        except OSError:
            return                  # the proxy closed the connection: that is an answer too


def read_until_closed(sock: socket.socket, timeout_s: float = 5.0) -> tuple[bytes, bool]:
    """(everything received, whether the peer closed within the timeout)."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except socket.timeout:
        return data, False
    except OSError:
        pass
    return data, True


def read_response(sock: socket.socket, timeout_s: float = 8.0) -> bytes:
    """One HTTP/1 response (head and Content-Length body), or whatever arrived before close or timeout."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body
    except (socket.timeout, OSError):
        return data


def tls_in_tunnel(sock: socket.socket, ca_file: str, server_name: str,
                  alpn: list[str] | None = None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=ca_file)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx.wrap_socket(sock, server_hostname=server_name)


def h2_request(tls: ssl.SSLSocket, headers: list[tuple[str, str]], timeout_s: float = 10.0) -> tuple[int, bytes]:
    """One HTTP/2 request on an established h2 connection: (status, body)."""
    conn = h2.connection.H2Connection()
    conn.initiate_connection()
    conn.send_headers(1, headers, end_stream=True)
    tls.sendall(conn.data_to_send())
    tls.settimeout(timeout_s)
    status, body = 0, b""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        data = tls.recv(65536)
        if not data:
            break
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                status = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                body += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                return status, body
        tls.sendall(conn.data_to_send())
    return status, body
