"""SessionMemory: a session's tool-call events and path rows, loaded from the store once (single-writer stores),
with what is recorded during the load kept, and read through every time when other processes write too."""
from __future__ import annotations

import asyncio

import pytest

from gateway.sessions.memory import SessionMemory
from gateway.store import StoreError


def ev(rid: str, **kw) -> dict:
    return {"request_id": rid, "step": 0, "ts": 1.0, "action": "allow", "codes": [], "detail": {}, **kw}


class FakeStore:
    """The two reads SessionMemory makes; `gate` holds a load until the test lets it go."""

    def __init__(self, events=None, rows=None):
        self.events, self.rows, self.queue = list(events or []), list(rows or []), []
        self.loads = 0
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def load(self, sid):
        self.loads += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise StoreError("store unavailable")
        return list(self.events), list(self.rows)

    def queued(self, sid):
        return list(self.queue)


def memory(store: FakeStore, authoritative=True, **kw) -> SessionMemory:
    return SessionMemory(store.load, store.queued, authoritative=authoritative, events=3, **kw)


async def test_loaded_once_then_kept_with_what_is_recorded():
    store = FakeStore([ev("a"), ev("b")], [{"path": "/w/x", "kind": "file", "content": "1"}])
    store.queue = [ev("c")]
    mem = memory(store)
    events, rows = await mem.get("s")
    assert [e["request_id"] for e in events] == ["a", "b", "c"] and rows[0]["content"] == "1"
    mem.record_event("s", ev("d"))
    mem.record_paths("s", [{"path": "/w/x", "kind": "link", "target": "/etc"}])
    events, rows = await mem.get("s")
    assert [e["request_id"] for e in events] == ["b", "c", "d"]          # the last `events` (3)
    assert rows == [{"path": "/w/x", "kind": "link", "target": "/etc"}]  # a later row for a path replaces it
    assert store.loads == 1


async def test_calls_during_a_load_wait_for_it_and_what_they_record_is_kept():
    store = FakeStore([ev("a")])
    store.gate = asyncio.Event()
    mem = memory(store)
    first = asyncio.create_task(mem.get("s"))
    await asyncio.sleep(0)
    second = asyncio.create_task(mem.get("s"))
    await asyncio.sleep(0)
    mem.record_event("s", ev("during"))                    # recorded while the store is being read
    store.queue = [ev("during")]                           # ... and also still queued for the audit writer
    store.gate.set()
    for events, _ in await asyncio.gather(first, second):
        assert [e["request_id"] for e in events] == ["a", "during"]   # once, after the stored ones
    assert store.loads == 1


async def test_a_failed_load_raises_for_every_waiter_and_is_retried():
    store = FakeStore([ev("a")])
    store.gate, store.fail = asyncio.Event(), True
    mem = memory(store)
    tasks = [asyncio.create_task(mem.get("s")) for _ in range(2)]
    await asyncio.sleep(0)
    store.gate.set()
    for t in tasks:
        with pytest.raises(StoreError):
            await t
    store.fail = False
    events, _ = await mem.get("s")
    assert [e["request_id"] for e in events] == ["a"] and store.loads == 2


async def test_not_authoritative_reads_the_store_every_time():
    store = FakeStore([ev("a")])
    mem = memory(store, authoritative=False)
    mem.record_event("s", ev("x"))                          # another replica may write too: not trusted
    store.queue = [ev("q")]
    for _ in range(3):
        events, _ = await mem.get("s")
        assert [e["request_id"] for e in events] == ["a", "q"]
    assert store.loads == 3


async def test_forget_and_eviction_load_again():
    store = FakeStore([ev("a")])
    mem = memory(store, max_sessions=2)
    await mem.get("s1")
    mem.forget("s1")
    await mem.get("s1")
    await mem.get("s2")
    await mem.get("s3")                                     # s1 is the least recently used: dropped
    await mem.get("s1")
    assert store.loads == 5


async def test_recording_for_a_session_not_loaded_is_left_to_the_store():
    store = FakeStore([ev("a")])
    mem = memory(store)
    mem.record_event("s", ev("b"))                          # not loaded: the audit row reaches the store
    store.events.append(ev("b"))
    events, _ = await mem.get("s")
    assert [e["request_id"] for e in events] == ["a", "b"]


async def test_older_paths_keep_only_that_they_were_written_and_past_the_bound_the_memory_is_truncated():
    """Contents are kept for the newest `paths` paths; an older file is still written (content unknown), an older
    link still has its target (regression: they were dropped, so a script written early looked like one already
    there). Past `max_paths` distinct paths the oldest go and `truncated` says so."""
    store = FakeStore()
    mem = memory(store, paths=2, max_paths=5)
    await mem.get("s")
    mem.record_paths("s", [{"path": "/w/l", "kind": "link", "target": "/etc", "content": None}])
    mem.record_paths("s", [{"path": f"/w/{i}", "kind": "file", "content": str(i)} for i in range(3)])
    _, rows = await mem.get("s")
    assert [(r["path"], r.get("target"), r["content"]) for r in rows] == [
        ("/w/l", "/etc", None), ("/w/0", None, None), ("/w/1", None, "1"), ("/w/2", None, "2")]
    assert not rows.truncated
    mem.record_paths("s", [{"path": "/w/0", "kind": "file", "content": "again"}])     # rewritten: newest again
    _, rows = await mem.get("s")
    assert [(r["path"], r["content"]) for r in rows][-2:] == [("/w/2", "2"), ("/w/0", "again")]
    mem.record_paths("s", [{"path": f"/w/x{i}", "kind": "file", "content": "x"} for i in range(2)])
    _, rows = await mem.get("s")
    assert len(rows) == 5 and rows.truncated and "/w/l" not in [r["path"] for r in rows]


async def test_a_truncated_store_view_stays_truncated():
    from gateway.store.store import PathRows

    view = PathRows([{"path": "/w/a", "kind": "file", "content": None}], truncated=True)

    async def load(sid):
        return [], view
    mem = SessionMemory(load, lambda sid: [], authoritative=True, events=3)
    _, rows = await mem.get("s")
    assert rows.truncated and [r["path"] for r in rows] == ["/w/a"]


async def test_while_another_process_writes_every_call_reads_the_store_and_nothing_stale_is_kept():
    """`authoritative` is asked on every call (a second process on the same SQLite file): while it is false the
    store is read and what was kept is dropped; once alone again the session is loaded afresh."""
    store = FakeStore([ev("a")])
    alone = [True]
    mem = SessionMemory(store.load, store.queued, authoritative=lambda: alone[0], events=3)
    await mem.get("s")
    assert store.loads == 1
    alone[0] = False
    store.events.append(ev("b"))                            # written by the other process
    events, _ = await mem.get("s")
    assert [e["request_id"] for e in events] == ["a", "b"] and store.loads == 2
    alone[0] = True
    events, _ = await mem.get("s")
    assert [e["request_id"] for e in events] == ["a", "b"] and store.loads == 3
    await mem.get("s")
    assert store.loads == 3
