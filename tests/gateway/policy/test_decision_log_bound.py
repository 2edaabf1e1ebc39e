"""The decision log's rows waiting for the store are bounded by count and by what their inputs hold: a session
sending large distinct arguments while the store lags cannot make them keep more than `max_pending_chars`."""
from __future__ import annotations

import pytest

from gateway.policy.decisionlog import MAX_PENDING_CHARS, DecisionLog, weight
from gateway.store import Store
from gateway.store.decisions import DecisionStore


@pytest.fixture
async def store(tmp_path):
    opened = Store(f"sqlite:///{tmp_path}/s.db")
    await opened.open()
    yield opened
    opened.close()


def _doc(i: int, size: int) -> dict:
    return {"session": {"id": "s"}, "tool": {"name": "sql", "args": {"query": f"select {i} -- " + "x" * size,
                                                                     "database": "prod"}}}


def test_weight_counts_the_arguments_strings_nested():
    assert weight({"session": {"id": "s"}}) == 4096
    assert weight(_doc(1, 100_000)) >= 100_000
    nested = {"tool": {"name": "x", "args": {"a": [{"b": "y" * 50_000}, "z" * 20_000]}}}
    assert 70_000 <= weight(nested) < 75_000


async def test_pending_rows_never_hold_more_than_the_bound(store):
    log = DecisionLog(store, flush_interval_s=3600, max_batch=100, max_pending_chars=2_000_000)   # not started:
    for i in range(100):                                       # nothing is written, as with a stalled store
        log.record("toolcall", _doc(i, 100_000), {"action": "allow"}, "rev1", "embedded", 1, f"d{i}")
        assert log.pending_chars == sum(weight(d[3]) for d in log._decisions) <= 2_000_000
    assert 15 <= len(log._decisions) <= 20
    assert log.dropped == 100 - len(log._decisions)
    assert log._decisions[-1][0] == "d99"                      # the newest kept, the oldest dropped
    for i in range(100, 150):                                  # small rows: only the count bound applies
        log.record("egress", {"session": {"id": "s"}}, {"action": "allow"}, "rev1", "embedded", 1, f"d{i}")
    assert log.pending_chars <= 2_000_000
    await log.flush()                                          # what was kept is written, the count back to 0
    rows = await DecisionStore(store).list_decisions(limit=1000)
    assert [r["id"] for r in rows][-50:] == [f"d{i}" for i in range(100, 150)]
    assert log.pending_chars == 0 and not log._decisions
    assert DecisionLog(store).pending_chars == 0 and MAX_PENDING_CHARS == 256 * 1024 * 1024


async def test_the_count_bound_still_holds(store):
    log = DecisionLog(store, flush_interval_s=3600, max_batch=10, max_pending=30)
    for i in range(100):
        log.record("egress", {"session": {"id": "s"}}, {"action": "allow"}, "rev1", "embedded", 1, f"d{i}")
        assert len(log._decisions) <= 30
    assert log.dropped == 70 and log._decisions[0][0] == "d70"
    assert log.pending_chars == 30 * 4096
