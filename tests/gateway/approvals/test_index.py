"""The approval queue's index of live bindings (approval_index.py), and the queue using it on a real store:
items filed before this process started, or changed by another replica, are never missed for good, and a
stale index never lets an action through."""
from __future__ import annotations

import time
from contextlib import AsyncExitStack

import pytest

from gateway.approvals.index import BindingIndex, live
from gateway.approvals.queue import ApprovalQueue
from gateway.store.changes import Change
from gateway.store.models import ApprovalRow
from gateway.store.records import Approval
from tests.gateway.approvals.test_queue import ask
from tests.support.services import open_services


def row(aid: str, status: str, binding: str = "b1", used_at: float | None = None) -> Approval:
    return Approval(id=aid, status=status, binding=binding, used_at=used_at, session="s", kind="toolcall",
                    created_at=0.0, expires_at=1.0)


@pytest.mark.parametrize("r, expected", [
    (row("a", "pending"), True), (row("a", "approved"), True), (row("a", "approved", used_at=1.0), False),
    (row("a", "denied"), False), (row("a", "expired"), False), (row("a", "cancelled"), False),
])
def test_live(r, expected):
    assert live(r) is expected


def test_index_follows_an_item_through_its_life():
    idx = BindingIndex()
    idx.put(row("a", "pending"))
    assert idx.has("b1", "pending") and not idx.has("b1", "approved")
    idx.put(row("a", "approved"))
    assert idx.has("b1", "approved") and not idx.has("b1", "pending")
    idx.put(row("a", "approved", used_at=2.0))
    assert not idx.has("b1", "approved") and len(idx) == 0
    idx.load([row("x", "pending", "b2"), row("y", "pending", "b2")])
    idx.sync_pending([row("y", "pending", "b2")])          # x was decided elsewhere
    assert idx.has("b2", "pending") and len(idx) == 1
    idx.sync_pending([])
    assert not idx.has("b2", "pending")


@pytest.fixture
async def svc(tmp_path):
    async with AsyncExitStack() as stack:
        yield await open_services(stack, tmp_path)


def _foreign(req, status: str, **extra) -> ApprovalRow:
    """An item as another replica (or an earlier run) stored it, this queue never having seen it."""
    now = time.time()
    return ApprovalRow(id=f"a_{status}{int(now * 1e6)}", session=req.session_id, kind="toolcall", status=status,
                       binding=req.binding, summary="x", action={}, reasons=[], created_at=now,
                       expires_at=now + 600, requested_by="harness:h", **extra)


async def test_items_stored_before_the_first_ask_are_found(svc):
    session, _ = await svc.session()
    req = ask(session)
    stored = await svc.store.put_approval(_foreign(req, "pending"))
    queue = ApprovalQueue(svc.store, svc.audit, svc.metrics, svc.approvals.settings)   # a fresh process
    assert (await queue.request_approval(req)).row["id"] == stored["id"]             # not a second item


async def test_an_approval_made_elsewhere_is_used_once_announced(svc):
    session, _ = await svc.session()
    req = ask(session)
    queue = svc.approvals
    first = await queue.request_approval(req)
    # another replica approves it (a direct store change), and its notification arrives with the row
    assert await svc.store.cas_approval(first.row["id"], "pending", {"status": "approved", "decided_by": "approver:x",
                                                                     "decided_at": time.time()})
    await queue.on_change(Change("approval", first.row["id"], "decided"))
    used = await queue.request_approval(req)
    assert used.reused and used.row["id"] == first.row["id"]


async def test_a_stale_index_never_lets_an_action_through(svc):
    session, _ = await svc.session()
    req = ask(session)
    queue = svc.approvals
    first = await queue.request_approval(req)
    await queue.decide(first.row["id"], "approver:alice", "approve", None)
    # another replica uses the approval; this queue is not told and still indexes it as approved and unused
    assert await svc.store.mark_used(first.row["id"])
    again = await queue.request_approval(req)
    assert not again.reused and again.row["status"] == "pending" and again.row["id"] != first.row["id"]


async def test_pending_items_come_from_the_index_only_while_this_process_writes_alone(svc, monkeypatch):
    session, _ = await svc.session()
    req = ask(session)
    queue, store = svc.approvals, svc.store
    first = await queue.request_approval(req)
    reads = []
    listed = store.list_approvals

    async def counted(**kw):
        reads.append(kw)
        return await listed(**kw)

    monkeypatch.setattr(store, "list_approvals", counted)
    assert store.sole_writer()
    again = await queue.request_approval(req)          # every change was made here: no store read
    assert again.row["id"] == first.row["id"] and not again.reused and reads == []
    # another process joins the file and cancels the item; this queue is not told
    monkeypatch.setattr(store, "sole_writer", lambda: False)
    assert await store.cas_approval(first.row["id"], "pending", {"status": "cancelled", "decided_at": time.time()})
    other = await queue.request_approval(req)
    assert other.row["id"] != first.row["id"] and other.row["status"] == "pending" and reads
    # alone again: the index is read again before it is trusted
    monkeypatch.setattr(store, "sole_writer", lambda: True)
    reads.clear()
    last = await queue.request_approval(req)
    assert last.row["id"] == other.row["id"] and reads
    reads.clear()
    assert (await queue.request_approval(req)).row["id"] == other.row["id"] and reads == []
