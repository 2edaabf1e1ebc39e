"""Change notification between replicas (and `serve --workers` processes) sharing one store.

A service that changes something another replica must see at once (a session created, patched or deleted; an
approval filed or decided; a token revoked; a new policy revision) calls `feed.publish(Change(...))` after its
write committed. Subscribers (`ChangeHandler`s, one per kind) get every change made elsewhere: `on_change` for
one change, `resync` after the feed (re)connected — what may have been missed is re-read from the store, so a
lost notification is never a lost deny.

`PgChangeFeed` carries changes over PostgreSQL `LISTEN/NOTIFY` on one channel (psycopg 3 async connections:
one listening, one sending). `LocalChangeFeed` is the in-process path (SQLite, one process): local changes are
already applied where they are made, so publishing delivers nothing; replicas on one SQLite file keep their
periodic re-reads.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("sandgate.changes")

CHANNEL = "sandgate_changes"
KINDS = ("session", "approval", "revocation", "policy", "pgcancel")   # pgcancel: a CancelRequest for another worker
RETRY_S = (0.1, 0.25, 0.5, 1.0, 2.0)
MAX_PAYLOAD = 7900                     # PostgreSQL refuses NOTIFY payloads of 8000 bytes or more


@dataclass(frozen=True)
class Change:
    kind: str                          # one of KINDS
    id: str                            # session id, approval id, token jti or policy revision
    what: str = ""                     # created, patched, deleted, filed, decided, used, revoked, reloaded


def encode_change(change: Change, origin: str) -> str:
    return json.dumps({"o": origin, "k": change.kind, "id": change.id, "w": change.what}, separators=(",", ":"))


def decode_change(payload: str) -> tuple[str, Change] | None:
    """(origin, change) from a notification payload; None for anything malformed or of an unknown kind."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    origin, kind, ident, what = doc.get("o"), doc.get("k"), doc.get("id"), doc.get("w", "")
    if not all(isinstance(v, str) for v in (origin, kind, ident, what)) or kind not in KINDS or not ident:
        return None
    return origin, Change(kind, ident, what)


class ChangeHandler(Protocol):
    """What a service gives the feed: apply one change made elsewhere; re-read everything after a gap."""

    async def on_change(self, change: Change) -> None: ...

    async def resync(self) -> None: ...


class ChangeFeed(Protocol):
    def subscribe(self, kind: str, handler: ChangeHandler) -> None: ...

    def publish(self, change: Change) -> None:
        """Tell the other replicas (never blocks, never raises)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class _Subscribers:
    def __init__(self) -> None:
        self._handlers: dict[str, list[ChangeHandler]] = {}

    def subscribe(self, kind: str, handler: ChangeHandler) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown change kind {kind!r}")
        self._handlers.setdefault(kind, []).append(handler)

    def handlers(self, kind: str) -> list[ChangeHandler]:
        return list(self._handlers.get(kind, ()))

    def all(self) -> list[ChangeHandler]:
        seen: list[ChangeHandler] = []
        for hs in self._handlers.values():
            seen.extend(h for h in hs if all(h is not s for s in seen))
        return seen


class LocalChangeFeed(_Subscribers):
    """One process: every change is applied where it is made; nothing to carry."""

    def publish(self, change: Change) -> None:
        return None

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


class PgChangeFeed(_Subscribers):
    """LISTEN/NOTIFY on one channel. `dsn` is a libpq connection string or postgresql:// URL."""

    def __init__(self, dsn: str, channel: str = CHANNEL):
        super().__init__()
        self._dsn = dsn
        self._channel = channel
        self.origin = uuid.uuid4().hex[:16]
        self._outbox: asyncio.Queue[str] = asyncio.Queue()
        self._listening = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._runners: list[asyncio.Task] = []
        self.received = 0
        self.reconnects = 0

    @property
    def connected(self) -> bool:
        return self._listening.is_set()

    def publish(self, change: Change) -> None:
        payload = encode_change(change, self.origin)
        if len(payload.encode()) <= MAX_PAYLOAD:
            self._outbox.put_nowait(payload)

    async def start(self, timeout_s: float = 10.0) -> None:
        """Start listening and sending; wait (bounded) for the first LISTEN so no change is missed at start."""
        self._runners = [asyncio.create_task(self._listen(), name="sandgate-changes-listen"),
                         asyncio.create_task(self._send(), name="sandgate-changes-send")]
        try:
            await asyncio.wait_for(self._listening.wait(), timeout_s)
        except asyncio.TimeoutError:
            log.warning("change notifications not connected yet; retrying in the background")

    async def close(self) -> None:
        await self._drain(1.0)
        for task in self._runners + list(self._tasks):
            task.cancel()
        for task in self._runners + list(self._tasks):
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - being stopped
                pass

    async def _drain(self, timeout_s: float) -> None:
        """Give pending notifications a moment to go out (SIGTERM path)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not self._outbox.empty() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    async def _connect(self, role: str):  # -> psycopg.AsyncConnection
        import psycopg

        return await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, connect_timeout=5,
                                                     application_name=f"sandgate-{role}-{os.getpid()}",
                                                     keepalives=1, keepalives_idle=5, keepalives_interval=2,
                                                     keepalives_count=3)

    async def _listen(self) -> None:
        attempt = 0
        while True:
            try:
                conn = await self._connect("listen")
                async with conn:
                    await conn.execute(f"LISTEN {self._channel}")
                    if attempt or self.reconnects:
                        log.info("change notifications reconnected")
                    self._listening.set()
                    attempt = 0
                    # Anything changed before LISTEN took effect (or while disconnected) is re-read now.
                    self._spawn_resync()
                    async for note in conn.notifies():
                        self._dispatch(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the store may come back; until then re-read on reconnect
                if self._listening.is_set() or attempt == 0:
                    log.warning("change notifications lost (%s); reconnecting", exc.__class__.__name__)
            self._listening.clear()
            self.reconnects += 1
            await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
            attempt += 1

    async def _send(self) -> None:
        attempt = 0
        while True:
            try:
                conn = await self._connect("notify")
                async with conn:
                    attempt = 0
                    while True:
                        payload = await self._outbox.get()
                        try:
                            await conn.execute("SELECT pg_notify(%s, %s)", (self._channel, payload))
                        except Exception:
                            self._outbox.put_nowait(payload)     # resent once connected again
                            raise
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - receivers re-read on their own reconnects
                if attempt == 0:
                    log.warning("cannot send change notifications (%s); retrying", exc.__class__.__name__)
            await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
            attempt += 1

    def _dispatch(self, payload: str) -> None:
        decoded = decode_change(payload)
        if decoded is None:
            log.warning("ignored a malformed change notification")
            return
        origin, change = decoded
        if origin == self.origin:
            return
        self.received += 1
        for handler in self.handlers(change.kind):
            self._track(handler.on_change(change), f"on {change.kind} change")

    def _spawn_resync(self) -> None:
        for handler in self.all():
            self._track(handler.resync(), "resync")

    def _track(self, coro, what: str) -> None:
        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one failed apply must not stop the feed; the backstop re-reads
                log.warning("applying a change notification failed (%s)", what, exc_info=True)
        task = asyncio.create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
