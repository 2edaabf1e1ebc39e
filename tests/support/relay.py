"""A TCP relay on loopback in front of a real server (PostgreSQL, say), which a test can cut and restore to
make that server unreachable for the process under test without touching the server itself."""
from __future__ import annotations

import socket
import threading


class Relay:
    """`with Relay(("127.0.0.1", 5432)) as relay:` -> relay.port; `relay.cut()` closes every relayed
    connection and refuses new ones (accepted, then closed at once) until `relay.restore()`."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.up = True
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            self._close(s)

    def _close(self, s: socket.socket) -> None:
        with self._lock:
            self._open.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def cut(self) -> None:
        self.up = False
        with self._lock:
            sockets = list(self._open)
        for s in sockets:
            self._close(s)

    def restore(self) -> None:
        self.up = True

    def __enter__(self) -> "Relay":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.cut()
        self.sock.close()
