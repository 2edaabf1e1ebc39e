"""The durable approval queue, shared by tool calls and held egress requests.

State lives in the store; it changes only by compare-and-set on `pending`, so two deciders (or two replicas)
can never both win. Waiters block on an in-process event that is set the moment this process changes an item;
`tick()` (once a second) also re-reads items that have waiters, so a decision taken by another replica wakes
them too, and expires items past their TTL.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any, Iterable

from gateway.store.models import ApprovalRow

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger("sandgate.approvals")

FINAL = ("approved", "denied", "expired", "cancelled")


class ApprovalError(Exception):
    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def binding_hash(session: str, kind: str, target: str, canonical: str) -> str:
    """What an approval is bound to: (session, kind, tool or method+URL, canonical args or body hash)."""
    return hashlib.sha256(canonical_json([session, kind, target, canonical]).encode()).hexdigest()


def reusable(row: dict, session: dict | None, now: float, window_s: float) -> bool:
    """Whether an approved, unused item may let an identical action through again (pure): within
    `window_s` of the decision, and only while its session is live and not frozen."""
    decided = row.get("decided_at")
    return (row.get("status") == "approved" and row.get("used_at") is None and decided is not None
            and now - float(decided) <= window_s and session is not None and not session.get("frozen"))


def new_approval_id() -> str:
    return "a_" + secrets.token_hex(8)


def tally(votes: Iterable[dict], quorum: int) -> bool:
    """True when `quorum` distinct approvers voted approve."""
    return len({v["by"] for v in votes if v.get("verdict") == "approve"}) >= quorum


class ApprovalQueue:
    def __init__(self, gw: "Gateway"):
        self.gw = gw
        self.default_ttl_s = float(gw.cfg.raw["approvals"]["ttl_s"])
        self.quorum = int(gw.cfg.raw["approvals"]["quorum"])
        self.hold_timeout_s = float(gw.cfg.raw["egress"]["hold_timeout_s"])
        self.reuse_window_s = float(gw.cfg.raw["approvals"]["reuse_window_s"])
        self._events: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        self._subscribers: set[asyncio.Queue] = set()
        self._held_by_conn: dict[int, set[str]] = {}

    # -- notifications ---------------------------------------------------------------------------
    def _event(self, aid: str) -> asyncio.Event:
        ev = self._events.get(aid)
        if ev is None:
            ev = self._events[aid] = asyncio.Event()
        return ev

    def notify(self, aid: str, what: str) -> None:
        ev = self._events.get(aid)
        if ev is not None:
            ev.set()
        for q in list(self._subscribers):
            try:
                q.put_nowait({"type": what, "id": aid})
            except asyncio.QueueFull:
                pass

    def subscribe(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(maxsize=1000)
        self._subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        self._subscribers.discard(q)

    # -- reading ---------------------------------------------------------------------------------
    async def get(self, aid: str) -> dict | None:
        row = await self.gw.store.get_approval(aid)
        if row is not None and row["status"] == "pending" and time.time() >= row["expires_at"]:
            await self._finish(row, "expired", None, "the approval expired before anyone decided")
            row = await self.gw.store.get_approval(aid)
        return row

    async def wait(self, aid: str, timeout_s: float) -> dict | None:
        """Return the item as soon as it leaves `pending` (or when the wait runs out)."""
        row = await self.get(aid)
        if row is None or row["status"] != "pending":
            return row
        ev = self._event(aid)
        self._waiting[aid] = self._waiting.get(aid, 0) + 1
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                remaining = min(deadline, time.monotonic() + max(0.0, row["expires_at"] - time.time()) + 0.05)
                remaining -= time.monotonic()
                if remaining <= 0:
                    break
                ev.clear()
                row = await self.get(aid)
                if row is None or row["status"] != "pending":
                    return row
                try:
                    await asyncio.wait_for(ev.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
            return await self.get(aid)
        finally:
            self._waiting[aid] -= 1
            if not self._waiting[aid]:
                del self._waiting[aid]
                self._events.pop(aid, None)

    # -- filing ----------------------------------------------------------------------------------
    async def find_unused(self, binding: str, session: str) -> dict | None:
        """An approved, unused item for this exact action that may still be reused (see `reusable`)."""
        rows = await self.gw.store.list_approvals(status="approved", binding=binding)
        live = self.gw.sessions.live(session)
        now = time.time()
        return next((r for r in rows if reusable(r, live, now, self.reuse_window_s)), None)

    async def consume(self, row: dict, by: str) -> bool:
        """Mark an approved item used (once). False when someone else used it first."""
        if not await self.gw.store.mark_used(row["id"]):
            return False
        self.gw.audit.record("approval.used", session=row["session"], action="used",
                             detail={"approval_id": row["id"], "by": by})
        self.notify(row["id"], "used")
        return True

    async def file(self, *, session: str, kind: str, binding: str, summary: str, action: dict,
                   reasons: list[str], requested_by: str, ttl_s: float | None = None) -> dict:
        """File a pending item, or return the pending one already filed for the same binding."""
        pending = await self.gw.store.list_approvals(status="pending", binding=binding)
        now = time.time()
        for row in pending:
            if row["expires_at"] > now:
                return row
        row = ApprovalRow(id=new_approval_id(), session=session, kind=kind, status="pending", binding=binding,
                          summary=summary[:300], action=action, reasons=list(reasons), created_at=now,
                          expires_at=now + float(ttl_s or self.default_ttl_s), quorum=self.quorum,
                          requested_by=requested_by)
        stored = await self.gw.store.put_approval(row)
        self.gw.audit.record("approval.filed", session=session, action="ask", reasons=list(reasons),
                             detail={"approval_id": stored["id"], "kind": kind, "summary": stored["summary"]})
        self.notify(stored["id"], "filed")
        return stored

    # -- deciding --------------------------------------------------------------------------------
    async def decide(self, aid: str, by: str, verdict: str, reason: str | None) -> dict:
        if verdict not in ("approve", "deny"):
            raise ApprovalError(400, "bad_request", "verdict must be approve or deny")
        if verdict == "deny" and not (reason or "").strip():
            raise ApprovalError(400, "reason_required", "a deny needs a reason")
        for _attempt in range(5):
            row = await self.get(aid)
            if row is None:
                raise ApprovalError(404, "not_found", "no such approval")
            if row["status"] != "pending":
                raise ApprovalError(409, "already_decided", f"the approval is already {row['status']}")
            if row["requested_by"] == by:
                raise ApprovalError(403, "forbidden", "nobody decides an approval they filed")
            votes = list(row["votes"])
            if any(v["by"] == by for v in votes):
                raise ApprovalError(409, "already_voted", "you already voted on this approval")
            votes.append({"by": by, "verdict": verdict, "at": time.time(), "reason": reason or ""})
            now = time.time()
            if verdict == "deny":
                values = {"status": "denied", "votes": votes, "decided_by": by, "reason": reason,
                          "decided_at": now}
            elif tally(votes, int(row["quorum"])):
                values = {"status": "approved", "votes": votes, "decided_by": by, "reason": reason,
                          "decided_at": now}
            else:
                values = {"votes": votes}
            if await self.gw.store.cas_approval(aid, "pending", values, expect_version=row["version"]):
                status = values.get("status", "pending")
                self.gw.audit.record(f"approval.{status if status != 'pending' else 'vote'}",
                                     session=row["session"], action=verdict,
                                     reasons=[reason] if reason else [],
                                     detail={"approval_id": aid, "by": by, "votes": len(votes),
                                             "quorum": row["quorum"]})
                self.notify(aid, "decided" if status != "pending" else "voted")
                return await self.gw.store.get_approval(aid)
        raise ApprovalError(409, "conflict", "the approval changed while deciding; try again")

    async def _finish(self, row: dict, status: str, by: str | None, reason: str) -> bool:
        ok = await self.gw.store.cas_approval(row["id"], "pending", {
            "status": status, "decided_by": by, "reason": reason, "decided_at": time.time()})
        if ok:
            self.gw.audit.record(f"approval.{status}", session=row["session"], action=status, reasons=[reason],
                                 detail={"approval_id": row["id"], "by": by})
            self.notify(row["id"], "decided")
        return ok

    async def cancel(self, aid: str, by: str, reason: str) -> None:
        row = await self.gw.store.get_approval(aid)
        if row is not None and row["status"] == "pending":
            await self._finish(row, "cancelled", by, reason)

    async def cancel_session(self, session: str, by: str) -> None:
        for row in await self.gw.store.list_approvals(status="pending", session=session):
            await self._finish(row, "cancelled", by, "the session ended")

    # -- held egress requests --------------------------------------------------------------------
    async def hold_egress(self, addon: Any, flow: Any, st: Any) -> None:
        from gateway.egress.hold import hold_egress

        await hold_egress(addon, flow, st)

    def track_held(self, conn: Any, aid: str) -> None:
        self._held_by_conn.setdefault(id(conn), set()).add(aid)

    def untrack_held(self, conn: Any, aid: str) -> None:
        held = self._held_by_conn.get(id(conn))
        if held is not None:
            held.discard(aid)
            if not held:
                del self._held_by_conn[id(conn)]

    def connection_closed(self, conn: Any) -> None:
        for aid in self._held_by_conn.pop(id(conn), set()):
            self.client_gone(aid)

    def client_gone(self, aid: str) -> None:
        task = asyncio.get_running_loop().create_task(
            self.cancel(aid, "sandgate", "the client disconnected while the request was held"))
        self.gw.keep(task)

    async def tick(self) -> None:
        """Expire overdue items; re-read items somebody waits on (decisions by another replica)."""
        now = time.time()
        for row in await self.gw.store.list_approvals(status="pending"):
            if row["expires_at"] <= now:
                await self._finish(row, "expired", None, "the approval expired before anyone decided")
        for aid in list(self._waiting):
            row = await self.gw.store.get_approval(aid)
            if row is not None and row["status"] != "pending":
                self.notify(aid, "decided")
        self.gw.metrics.approvals_pending.set(len(await self.gw.store.list_approvals(status="pending")))
