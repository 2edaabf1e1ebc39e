"""ApprovalQueue in process, against a real SQLite store (no sockets): the one request_approval, deciding,
expiry on every read, waiting, cancelling."""
from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from gateway.approvals.rules import binding_hash, canonical_json
from gateway.approvals.queue import ApprovalError, ApprovalRequest
from gateway.config import ApprovalSettings
from tests.support.services import open_services


@pytest.fixture
async def svc(tmp_path):
    async with AsyncExitStack() as stack:
        yield await open_services(stack, tmp_path)


def ask(session: dict | None, target: str = "deploy", *, sid: str = "", by: str = "harness:h",
        ttl_s: float | None = None) -> ApprovalRequest:
    sid = session["id"] if session else sid
    return ApprovalRequest(session=session, session_id=sid, kind="toolcall",
                           binding=binding_hash(sid, "toolcall", target, canonical_json({"target": "prod"})),
                           summary=f"{target} prod", action={"tool": target, "args": {"target": "prod"}},
                           reasons=["deploys ask"], requested_by=by, used_by=by, ttl_s=ttl_s)


async def test_request_files_once_then_an_approved_item_is_used_once(svc):
    session, _ = await svc.session()
    first = await svc.approvals.request_approval(ask(session))
    again = await svc.approvals.request_approval(ask(session))
    assert not first.reused and first.row["status"] == "pending"
    assert again.row["id"] == first.row["id"]                      # the pending one, not a second item
    await svc.approvals.decide(first.row["id"], "approver:alice", "approve", None)
    used = await svc.approvals.request_approval(ask(session))
    assert used.reused and used.row["id"] == first.row["id"]
    assert (await svc.approvals.get(first.row["id"]))["used_at"] is not None
    refiled = await svc.approvals.request_approval(ask(session))  # used once: the next identical action asks
    assert not refiled.reused and refiled.row["id"] != first.row["id"]
    kinds = [e["kind"] for e in await svc.events(session["id"]) if e["kind"].startswith("approval.")]
    assert kinds == ["approval.filed", "approval.approved", "approval.used", "approval.filed"]


async def test_an_approval_is_not_reused_for_a_frozen_or_ended_session(svc):
    session, _ = await svc.session()
    item = (await svc.approvals.request_approval(ask(session))).row
    await svc.approvals.decide(item["id"], "approver:alice", "approve", None)
    frozen = await svc.sessions.patch(session["id"], {"frozen": True}, "harness:test")
    assert not (await svc.approvals.request_approval(ask(frozen))).reused
    assert not (await svc.approvals.request_approval(ask(None, sid=session["id"]))).reused


@pytest.mark.parametrize("by, verdict, reason, code", [
    ("harness:h", "approve", None, "forbidden"),            # nobody decides what they filed
    ("approver:alice", "deny", None, "reason_required"),
    ("approver:alice", "deny", "  ", "reason_required"),
    ("approver:alice", "maybe", "x", "bad_request"),
])
async def test_refusals_carry_a_code_not_a_status(svc, by, verdict, reason, code):
    session, _ = await svc.session()
    item = (await svc.approvals.request_approval(ask(session))).row
    with pytest.raises(ApprovalError) as refused:
        await svc.approvals.decide(item["id"], by, verdict, reason)
    assert refused.value.code == code and not hasattr(refused.value, "status")


async def test_a_decided_item_is_not_decided_again_and_unknown_items_are_not_found(svc):
    session, _ = await svc.session()
    item = (await svc.approvals.request_approval(ask(session))).row
    await svc.approvals.decide(item["id"], "approver:alice", "deny", "no")
    with pytest.raises(ApprovalError) as again:
        await svc.approvals.decide(item["id"], "approver:bob", "approve", None)
    assert again.value.code == "already_decided"
    with pytest.raises(ApprovalError) as missing:
        await svc.approvals.decide("a_nope", "approver:bob", "approve", None)
    assert missing.value.code == "not_found"


async def test_quorum_needs_distinct_approvers(tmp_path):
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path, approvals=ApprovalSettings(quorum=2))
        session, _ = await svc.session()
        item = (await svc.approvals.request_approval(ask(session))).row
        voted = await svc.approvals.decide(item["id"], "approver:alice", "approve", None)
        assert voted["status"] == "pending" and len(voted["votes"]) == 1
        with pytest.raises(ApprovalError) as twice:
            await svc.approvals.decide(item["id"], "approver:alice", "approve", None)
        assert twice.value.code == "already_voted"
        assert (await svc.approvals.decide(item["id"], "approver:bob", "approve", None))["status"] == "approved"


async def test_every_read_applies_the_expiry(svc):
    session, _ = await svc.session()
    late = (await svc.approvals.request_approval(ask(session, "late", ttl_s=-1))).row   # already past its TTL
    fresh = (await svc.approvals.request_approval(ask(session, "fresh"))).row
    assert [r["id"] for r in await svc.approvals.list(status="pending")] == [fresh["id"]]
    assert (await svc.approvals.get(late["id"]))["status"] == "expired"
    with pytest.raises(ApprovalError) as too_late:
        await svc.approvals.decide(late["id"], "approver:alice", "approve", None)
    assert too_late.value.code == "already_decided"


async def test_wait_returns_the_moment_it_is_decided(svc):
    session, _ = await svc.session()
    item = (await svc.approvals.request_approval(ask(session))).row
    waiting = asyncio.create_task(svc.approvals.wait(item["id"], 60))
    await asyncio.sleep(0)
    assert not waiting.done()
    await svc.approvals.decide(item["id"], "approver:alice", "approve", None)
    assert (await asyncio.wait_for(waiting, 10))["status"] == "approved"


async def test_subscribers_hear_every_change(svc):
    session, _ = await svc.session()
    q = svc.approvals.subscribe()
    item = (await svc.approvals.request_approval(ask(session))).row
    await svc.approvals.decide(item["id"], "approver:alice", "approve", None)
    await svc.approvals.request_approval(ask(session))
    seen = [q.get_nowait() for _ in range(q.qsize())]
    assert [s["type"] for s in seen] == ["filed", "decided", "used"] and {s["id"] for s in seen} == {item["id"]}
    svc.approvals.unsubscribe(q)


async def test_ending_a_session_cancels_its_pending_items(svc):
    session, _ = await svc.session()
    item = (await svc.approvals.request_approval(ask(session))).row
    await svc.sessions.delete(session, "harness:test")
    row = await svc.approvals.get(item["id"])
    assert row["status"] == "cancelled" and row["reason"] == "the session ended"


async def test_pending_cap_holds_under_concurrent_asks(svc):
    """sessions.max_pending_approvals: asks of one session arriving together are counted one at a time."""
    from gateway.approvals.queue import TooManyPending

    svc.approvals.max_pending = 3
    session, _ = await svc.session()
    other, _ = await svc.session()
    out = await asyncio.gather(*(svc.approvals.request_approval(ask(session, f"deploy{i}")) for i in range(10)),
                               return_exceptions=True)
    assert sum(1 for o in out if isinstance(o, TooManyPending)) == 7
    assert len(await svc.approvals.list(status="pending", session=session["id"])) == 3
    assert not (await svc.approvals.request_approval(ask(other))).reused      # another session files its own
    # Which three were filed depends on the order the asks reached the lock (their store reads finish in any
    # order on a busy machine): asking one of those again gets the pending one, not a new item.
    i, first = next((i, o) for i, o in enumerate(out) if not isinstance(o, BaseException))
    again = await svc.approvals.request_approval(ask(session, f"deploy{i}"))
    assert again.row["id"] == first.row["id"] and again.row["status"] == "pending"
    assert svc.approvals._filing == {}
