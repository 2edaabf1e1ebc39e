"""The outbox on real SQLite and PostgreSQL: filing and deciding write the event in the same transaction (a vote
short of the quorum writes none); deliverers claim disjoint rows under a lease; failed rows wait for their next
attempt; the table is bounded (oldest dropped)."""
from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from gateway.approvals.queue import ApprovalQueue
from gateway.audit.log import AuditLog
from gateway.config import ApprovalSettings
from gateway.runtime.metrics import Metrics
from gateway.store import Store
from gateway.store.outbox import LEASE_S, Outbox
from tests.conftest import need
from tests.support.pg import PG_URL, pg_available


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request, tmp_path):
    if request.param == "postgresql":
        need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
        url = PG_URL
    else:
        url = f"sqlite:///{tmp_path / 'sandgate.db'}"
    s = Store(url)
    await s.open()
    await s.run(lambda: s.driver(lambda cur: cur.execute("DELETE FROM notify_outbox"), commit=True))
    yield s
    await s.run(lambda: s.driver(lambda cur: cur.execute("DELETE FROM notify_outbox"), commit=True))
    s.close()


async def fill(outbox: Outbox, n: int, now: float = 1000.0) -> None:
    async def one(i: int) -> None:
        stmt = Outbox.entry("approval.filed", {"id": f"a_{i}", "session": "s"}, now=now + i)
        with outbox.store.engine.begin() as conn:
            conn.execute(stmt)
    for i in range(n):
        await one(i)


async def test_filing_and_deciding_write_their_events_with_the_change(store):
    async with AsyncExitStack() as stack:
        audit = AuditLog(store)
        audit.start()
        stack.push_async_callback(audit.close)
        queue = ApprovalQueue(store, audit, Metrics(), ApprovalSettings(quorum=2))
        queue.outbox = Outbox.entry
        outbox = Outbox(store)
        item = await queue.file(session="s_1", kind="toolcall", binding="b1", summary="deploy", action={},
                                reasons=["asks"], requested_by="harness:h")
        await queue.decide(item["id"], "approver:a", "approve", None)          # 1 of 2: no event
        await queue.decide(item["id"], "approver:b", "approve", "fine")
        other = await queue.file(session="s_1", kind="toolcall", binding="b2", summary="drop", action={},
                                 reasons=["asks"], requested_by="harness:h")
        await queue.cancel(other["id"], "harness:h", "the session ended")
        rows = await outbox.claim(10, now=10**10)
        assert [(r.payload["id"], r.event) for r in rows] == [
            (item["id"], "approval.filed"), (item["id"], "approval.approved"), (other["id"], "approval.filed"),
            (other["id"], "approval.cancelled")]
        assert rows[0].payload["status"] == "pending" and rows[1].payload["status"] == "approved"
        assert rows[1].payload["decided_by"] == "approver:b" and len(rows[1].payload["votes"]) == 2
        assert len({r.delivery for r in rows}) == 4


async def test_without_notify_nothing_is_written(store):
    async with AsyncExitStack() as stack:
        audit = AuditLog(store)
        audit.start()
        stack.push_async_callback(audit.close)
        queue = ApprovalQueue(store, audit, Metrics(), ApprovalSettings())
        item = await queue.file(session="s_1", kind="toolcall", binding="b3", summary="x", action={},
                                reasons=[], requested_by="harness:h")
        await queue.decide(item["id"], "approver:a", "deny", "no")
        assert await Outbox(store).count() == 0


async def test_deliverers_claim_disjoint_rows_under_a_lease(store):
    await fill(Outbox(store), 60)
    a, b = Outbox(store, "a"), Outbox(store, "b")
    got = await asyncio.gather(*[o.claim(7, now=2000.0) for o in (a, b, a, b, a, b)])
    ids = [r.id for batch in got for r in batch]
    assert len(ids) == len(set(ids)) == 42
    # Leased rows are nobody else's until the lease ends; then anyone may take them.
    rest = await b.claim(100, now=2000.0)
    assert len(rest) == 18 and not set(ids) & {r.id for r in rest}
    assert await a.claim(100, now=2000.0 + LEASE_S / 2) == []
    assert len(await a.claim(100, now=2000.0 + LEASE_S + 1)) == 60


async def test_failed_rows_wait_and_delivered_rows_leave(store):
    await fill(Outbox(store), 3)
    o = Outbox(store, "me")
    rows = await o.claim(10, now=2000.0)
    assert await o.delivered(rows[0].id)
    await o.failed(rows[1].id, next_at=2010.0, error="the receiver answered 500")
    await o.release([rows[2].id])
    again = await o.claim(10, now=2001.0)
    assert [r.id for r in again] == [rows[2].id]
    later = await Outbox(store, "other").claim(10, now=2011.0)
    assert [(r.id, r.attempts) for r in later] == [(rows[1].id, 1)]
    assert not await o.delivered(rows[1].id), "no longer this process's lease"
    assert await o.count() == 2


async def test_trim_drops_the_oldest_past_the_cap_and_the_too_old(store):
    await fill(Outbox(store), 12, now=1000.0)
    o = Outbox(store)
    dropped = await o.trim(max_rows=5, max_age_s=100.0, now=1105.0)
    assert [w for _, _, w in dropped].count("too old") == 5           # created before 1005
    assert [w for _, _, w in dropped].count("outbox full") == 2
    left = await o.claim(100, now=10**10)
    assert len(left) == 5 and [r.payload["id"] for r in left] == [f"a_{i}" for i in range(7, 12)]
