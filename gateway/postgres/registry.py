"""The gateway's live connections: per-session counts (the `max_connections_per_session` cap), the backend keys
it handed out (a CancelRequest names one), and closing every connection of a session that ended."""
from __future__ import annotations

import secrets
from typing import Protocol


class Cancellable(Protocol):
    session: str
    database: str

    async def cancel(self) -> None: ...

    def end(self, code: str, message: str) -> None: ...


class ConnectionRegistry:
    def __init__(self, worker: int = 0, workers: int = 1) -> None:
        self._by_key: dict[tuple[int, int], Cancellable] = {}
        self._by_session: dict[str, set[Cancellable]] = {}
        self._worker, self._workers = worker, max(1, workers)

    def count(self, session: str, database: str) -> int:
        return sum(1 for c in self._by_session.get(session, ()) if c.database == database)

    def add(self, conn: Cancellable) -> tuple[int, int]:
        """Register a connection; the (process id, secret key) the client gets for it. The process id's low bits
        name this worker (`serve --workers N`: the worker a CancelRequest lands on can tell whose key it is)."""
        while True:
            pid = (secrets.randbelow(2 ** 30 // self._workers) * self._workers + self._worker) or self._workers
            key = secrets.randbits(32) - 2 ** 31
            if (pid, key) not in self._by_key:
                break
        self._by_key[(pid, key)] = conn
        self._by_session.setdefault(conn.session, set()).add(conn)
        return pid, key

    def remove(self, conn: Cancellable, pid: int, key: int) -> None:
        if self._by_key.get((pid, key)) is conn:
            del self._by_key[(pid, key)]
        conns = self._by_session.get(conn.session)
        if conns is not None:
            conns.discard(conn)
            if not conns:
                del self._by_session[conn.session]

    def find(self, pid: int, key: int) -> Cancellable | None:
        return self._by_key.get((pid, key))

    def sessions(self) -> list[str]:
        return list(self._by_session)

    def end_session(self, session: str, code: str, message: str) -> int:
        conns = list(self._by_session.get(session, ()))
        for conn in conns:
            conn.end(code, message)
        return len(conns)
