"""What one session may make the proxy hold at once, as plain bookkeeping (no I/O, no mitmproxy).

- `HeldLimits`: egress requests held for approval per session (`sessions.max_held`), and the bytes of request
  bodies held in memory for holds and inspection by all sessions together (`egress.max_held_bytes`). A request
  is admitted before its body is read (at `requestheaders`, from its declared length), so a refused one never
  makes the proxy buffer more than the cap.
- `ConnectionLimits`: proxy client connections per session (`sessions.max_connections`).

Every admission is released exactly once (a `Claim` remembers what it took; releasing it twice is harmless).
"""
from __future__ import annotations

from dataclasses import dataclass

TOO_MANY_HELD = "egress.too_many_held"          # 429: the session already holds max_held requests
HELD_BYTES_FULL = "egress.held_bytes_full"      # 503: holding this body would pass egress.max_held_bytes
TOO_MANY_CONNECTIONS = "egress.too_many_connections"    # 429: the session has max_connections open


@dataclass
class Claim:
    """What one request took: a held slot of `session` (or none), and `nbytes` of the global byte budget."""

    session: str | None
    nbytes: int
    released: bool = False


class HeldLimits:
    def __init__(self, max_held: int, max_bytes: int):
        self.max_held = max_held
        self.max_bytes = max_bytes
        self.bytes = 0                           # held now, all sessions
        self._held: dict[str, int] = {}          # session -> requests held now

    def held(self, session: str) -> int:
        return self._held.get(session, 0)

    def admit(self, session: str | None, nbytes: int) -> Claim | str:
        """Take a held slot of `session` (None: the body is only inspected, no slot) and `nbytes` of the byte
        budget, or nothing: then the refusal's code."""
        nbytes = max(0, int(nbytes))
        if session is not None and self._held.get(session, 0) >= self.max_held:
            return TOO_MANY_HELD
        if nbytes and self.bytes + nbytes > self.max_bytes:
            return HELD_BYTES_FULL
        if session is not None:
            self._held[session] = self._held.get(session, 0) + 1
        self.bytes += nbytes
        return Claim(session, nbytes)

    def release(self, claim: Claim | None) -> None:
        if claim is None or claim.released:
            return
        claim.released = True
        self.bytes -= claim.nbytes
        if claim.session is not None:
            left = self._held.get(claim.session, 0) - 1
            if left > 0:
                self._held[claim.session] = left
            else:
                self._held.pop(claim.session, None)


class ConnectionLimits:
    """Open client connections per session, keyed by the connection's id."""

    def __init__(self, max_connections: int):
        self.max_connections = max_connections
        self._session_of: dict[str, str] = {}    # connection id -> session
        self._count: dict[str, int] = {}         # session -> open connections

    def open(self, conn: str, session: str) -> bool:
        """Count `conn` as one of `session`'s (moving it from another session it was counted for). False, and
        nothing counted, when the session already has max_connections."""
        if self._session_of.get(conn) == session:
            return True
        if self._count.get(session, 0) >= self.max_connections:
            return False
        self.close(conn)
        self._session_of[conn] = session
        self._count[session] = self._count.get(session, 0) + 1
        return True

    def close(self, conn: str) -> None:
        session = self._session_of.pop(conn, None)
        if session is None:
            return
        left = self._count.get(session, 0) - 1
        if left > 0:
            self._count[session] = left
        else:
            self._count.pop(session, None)

    def count(self, session: str) -> int:
        return self._count.get(session, 0)
