"""Stopping the audit writer and the decision log while a batch is being written loses nothing and writes
nothing twice (regression: `close()` cancelled the background task in the middle of a write; the batch it had
taken was neither stored nor put back, so a SIGTERM at the wrong moment dropped up to a batch of audit rows).
Concurrent flushes are serialised: one that returns has seen every row recorded before it was called stored.

The stores are real SQLite stores; a gate in front of the write holds the first batch in flight."""
from __future__ import annotations

import asyncio

import pytest

from gateway.audit.log import AuditLog
from gateway.policy.decisionlog import DecisionLog
from gateway.store import Store
from gateway.store.decisions import DecisionStore


def _gate(obj, name: str):
    """Hold the first call of the coroutine method `obj.name` until `release` is set."""
    real = getattr(obj, name)
    entered, release = asyncio.Event(), asyncio.Event()

    async def gated(*args, **kwargs):
        if not entered.is_set():
            entered.set()
            await release.wait()
        return await real(*args, **kwargs)

    setattr(obj, name, gated)
    return entered, release


async def _close_during_write(writer, entered: asyncio.Event, release: asyncio.Event) -> None:
    await entered.wait()                       # the background task has a batch in flight
    closing = asyncio.create_task(writer.close())
    for _ in range(5):
        await asyncio.sleep(0)                 # close() has cancelled the background task
    assert not closing.done()                  # it waits for the batch in flight
    release.set()
    await closing


@pytest.fixture
async def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path}/s.db")
    await opened.open()
    yield opened
    opened.close()


def _decisions(log: DecisionLog, n: int) -> None:
    for i in range(n):
        log.record("egress", {"session": {"id": "s"}}, {"action": "allow"}, "rev1", "embedded", 1, f"d{i}")


async def test_audit_close_during_a_write_keeps_every_row(store):
    audit = AuditLog(store, flush_interval_s=3600, max_batch=100)
    entered, release = _gate(store, "append_events")
    audit.start()
    for i in range(250):
        audit.record("egress", session="s", action="allow", request_id=f"r{i}")
    await _close_during_write(audit, entered, release)
    rows = await store.list_events(session="s", limit=1000)
    assert [r["request_id"] for r in rows] == [f"r{i}" for i in range(250)]
    assert audit.pending == 0


async def test_decision_log_close_during_a_write_keeps_every_row(store):
    log = DecisionLog(store, flush_interval_s=3600, max_batch=100)
    entered, release = _gate(store, "run_bulk")
    log.start()
    _decisions(log, 250)
    await _close_during_write(log, entered, release)
    rows = await DecisionStore(store).list_decisions(limit=1000)
    assert [r["id"] for r in rows] == [f"d{i}" for i in range(250)]


async def test_a_flush_beside_the_background_one_returns_with_everything_stored(store):
    """The background task wakes at a full batch and flushes; a flush called meanwhile (a reader's, the test's)
    waits for it instead of returning while the other's batch is still on its way."""
    log = DecisionLog(store, flush_interval_s=3600, max_batch=100)
    entered, release = _gate(store, "run_bulk")
    log.start()
    _decisions(log, 250)
    await entered.wait()
    flushing = asyncio.create_task(log.flush())
    await asyncio.wait({flushing}, timeout=1.0)     # returned early before (the other batches written)
    if not flushing.done():
        release.set()
        await flushing
    rows = await DecisionStore(store).list_decisions(limit=1000)
    assert [r["id"] for r in rows] == [f"d{i}" for i in range(250)]
    release.set()
    await log.close()
