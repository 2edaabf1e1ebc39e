"""A real HTTP/2 upstream on loopback (TLS, ALPN h2 only), built on the `h2` protocol library.

`with H2Upstream(tls=CertPair) as up:` -> up.port, up.recorder (the same Recorder/Seen as tests.support.upstream),
up.alpns (the protocol each connection negotiated). Every request is answered 200 with a body naming its path and
the protocol and the request's headers ("h2 /path", then "name: value" lines). A client that does not negotiate h2 is disconnected.
"""
from __future__ import annotations

import socket
import ssl
import threading

import h2.config
import h2.connection
import h2.events

from tests.support.upstream import CertPair, Recorder, Seen


class H2Upstream:
    def __init__(self, tls: CertPair, host: str = "127.0.0.1"):
        self.recorder = Recorder()
        self.alpns: list[str | None] = []
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(tls.cert, tls.key)
        self.ctx.set_alpn_protocols(["h2"])
        self.sock = socket.create_server((host, 0))
        self.host, self.port = self.sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            with self.recorder.lock:
                self.recorder.connections += 1
            threading.Thread(target=self._connection, args=(raw,), daemon=True).start()

    def _connection(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(10)
            conn = self.ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        with conn:
            alpn = conn.selected_alpn_protocol()
            self.alpns.append(alpn)
            if alpn != "h2":
                return
            h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
            h2c.initiate_connection()
            conn.sendall(h2c.data_to_send())
            heads: dict[int, dict] = {}
            bodies: dict[int, bytes] = {}
            try:
                while data := conn.recv(65536):
                    for event in h2c.receive_data(data):
                        if isinstance(event, h2.events.RequestReceived):
                            heads[event.stream_id] = dict(event.headers)
                            bodies[event.stream_id] = b""
                        elif isinstance(event, h2.events.DataReceived):
                            bodies[event.stream_id] = bodies.get(event.stream_id, b"") + event.data
                            h2c.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                        elif isinstance(event, h2.events.StreamEnded):
                            self._answer(h2c, event.stream_id, heads.pop(event.stream_id, {}),
                                         bodies.pop(event.stream_id, b""))
                    conn.sendall(h2c.data_to_send())
            except (OSError, ssl.SSLError, h2.exceptions.ProtocolError):
                return

    def _answer(self, h2c: h2.connection.H2Connection, stream_id: int, head: dict, body: bytes) -> None:
        path = head.get(":path", "")
        self.recorder.add(Seen(method=head.get(":method", ""), path=path,
                               headers={k: v for k, v in head.items() if not k.startswith(":")}, body=body))
        payload = "\n".join([f"h2 {path}", *(f"{k}: {v}" for k, v in head.items() if not k.startswith(":"))]).encode()
        h2c.send_headers(stream_id, [(":status", "200"), ("content-type", "text/plain"),
                                     ("content-length", str(len(payload)))])
        h2c.send_data(stream_id, payload, end_stream=True)

    def __enter__(self) -> "H2Upstream":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()
