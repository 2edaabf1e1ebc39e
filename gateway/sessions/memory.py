"""What a session's earlier tool calls left, kept in memory: the last tool-call events and the session's path
rows (links made, files written), so that a tool call does not read them from the store each time.

Only while one process writes the store (`authoritative`, asked on every call: a SQLite file no other sandgate
process has joined, gateway/store/presence.py, polled in the background). There the memory is complete once
loaded: every tool-call event and path row of the session is written by this process, and each is added here
when it is recorded (before the audit writer's batch reaches the store). With PostgreSQL, or a second process on the same SQLite file,
other processes write the same sessions, so every call reads the store (this class then only passes the read
through, and drops what it kept: it may have missed the other's writes).

A session is loaded from the store once (the events still queued in the audit writer added); calls that
arrive during that load wait for it, and what they record meanwhile is kept and merged. Least recently used
sessions are dropped past `max_sessions` (they are loaded again when next used), and a session is dropped
when it ends.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from typing import Any, Awaitable, Callable, Iterable, Mapping

from gateway.store.records import ToolCallRecord
from gateway.store.store import PathRows
from gateway.toolcalls.history import MAX_SESSION_PATHS, EventRow

Loader = Callable[[str], Awaitable[tuple[list[ToolCallRecord], list[dict]]]]
Queued = Callable[[str], list[dict]]


class _Memory:
    __slots__ = ("events", "ids", "recent", "older", "truncated", "loading")

    def __init__(self, events: int, loop: asyncio.AbstractEventLoop):
        self.events: deque = deque(maxlen=events)
        self.ids: set = set()
        self.recent: "OrderedDict[str, dict]" = OrderedDict()   # the newest paths, with their content
        self.older: "OrderedDict[str, dict]" = OrderedDict()    # every earlier one, content dropped
        self.truncated = False                                   # some paths were dropped altogether
        self.loading: asyncio.Future | None = loop.create_future()

    def add_event(self, row: Mapping[str, Any]) -> None:
        rid = row.get("request_id")
        if rid:
            if rid in self.ids:
                return
            if len(self.events) == self.events.maxlen and self.events[0].get("request_id"):
                self.ids.discard(self.events[0]["request_id"])
            self.ids.add(rid)
        self.events.append(row if row.__class__ is EventRow else EventRow(row))

    def add_paths(self, rows: Iterable[Mapping[str, Any]], limit: int, max_paths: int) -> None:
        """A later row for a path replaces the earlier one. Past `limit` paths the oldest keep only that they
        were written (a file's content becomes unknown) or linked (the target stays); past `max_paths` the
        oldest are dropped and the memory is `truncated`."""
        recent, older = self.recent, self.older
        for row in rows:
            path = row["path"]
            recent.pop(path, None)
            older.pop(path, None)
            recent[path] = dict(row)
        while len(recent) > limit:
            path, row = recent.popitem(last=False)
            older[path] = {**row, "content": None}
        while len(older) > max(0, max_paths - limit):
            older.popitem(last=False)
            self.truncated = True

    def paths(self) -> PathRows:
        return PathRows([*self.older.values(), *self.recent.values()], self.truncated)

    def seed(self, stored: list[ToolCallRecord], queued: list[dict], rows: list[dict], limit: int,
             max_paths: int) -> None:
        """The store's view, under what was recorded while it was being read."""
        recorded, self.events, self.ids = list(self.events), deque(maxlen=self.events.maxlen), set()
        for row in stored + queued + recorded:
            self.add_event(row)
        later = self.paths()
        self.recent, self.older = OrderedDict(), OrderedDict()
        self.truncated = later.truncated or bool(getattr(rows, "truncated", False))
        self.add_paths(rows, limit, max_paths)
        self.add_paths(later, limit, max_paths)


class SessionMemory:
    def __init__(self, load: Loader, queued: Queued, authoritative: bool | Callable[[], bool], events: int,
                 paths: int = 500, max_sessions: int = 4096, max_paths: int = MAX_SESSION_PATHS):
        self._load, self._queued = load, queued
        self._sole: Callable[[], bool] = authoritative if callable(authoritative) else (lambda: authoritative)
        self._events, self._paths, self._max = events, paths, max_sessions
        self._max_paths = max_paths
        self._sessions: "OrderedDict[str, _Memory]" = OrderedDict()

    async def get(self, sid: str) -> tuple[list[ToolCallRecord | dict], PathRows]:
        """(events oldest first, path rows oldest first) of the session. Raises what the store raises."""
        if not self._sole():
            self._sessions.clear()               # another process writes too: what was kept may be stale
            queued = self._queued(sid)           # first: a flush during the read moves rows to the store
            stored, rows = await self._load(sid)
            return stored + queued, rows
        mem = self._sessions.get(sid)
        if mem is None:
            mem = await self._fill(sid)
        elif mem.loading is not None:
            await asyncio.shield(mem.loading)
        else:
            self._sessions.move_to_end(sid)
        return list(mem.events), mem.paths()

    async def _fill(self, sid: str) -> _Memory:
        mem = _Memory(self._events, asyncio.get_running_loop())
        self._sessions[sid] = mem
        while len(self._sessions) > self._max:
            self._sessions.popitem(last=False)
        loading = mem.loading
        try:
            queued = self._queued(sid)
            stored, rows = await self._load(sid)
        except BaseException as exc:
            if self._sessions.get(sid) is mem:
                del self._sessions[sid]
            loading.set_exception(exc)
            loading.exception()                      # retrieved: waiters re-raise it, nobody else must
            raise
        mem.seed(stored, queued, rows, self._paths, self._max_paths)
        mem.loading = None
        loading.set_result(None)
        return mem

    def record_event(self, sid: str, row: Mapping[str, Any]) -> None:
        """A tool-call event of the session was just recorded (queued for the audit writer)."""
        mem = self._sessions.get(sid)
        if mem is not None:
            mem.add_event(row)

    def record_paths(self, sid: str, rows: list[dict]) -> None:
        """Path rows of the session were just written to the store."""
        mem = self._sessions.get(sid)
        if mem is not None and rows:
            mem.add_paths(rows, self._paths, self._max_paths)

    def forget(self, sid: str) -> None:
        self._sessions.pop(sid, None)
