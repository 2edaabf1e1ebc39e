"""The durable approval queue, shared by tool calls and held egress requests.

State lives in the store; it changes only by compare-and-set on `pending`, so two deciders (or two replicas)
can never both win. Waiters block on an in-process event that is set the moment this process changes an item
(`changed`), or another replica does (a change notification, gateway/store/changes.py: `on_change`); `tick()` (once a
second) also re-reads items that have waiters (the backstop for a lost notification), and expires items past
their TTL. Every read applies the expiry first: an item past its
TTL is never shown, used or decided as pending.

`request_approval` is the one way an action asks: it uses an approved, unused item for the same binding
(a retry), or files a pending one (or returns the pending one already filed).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gateway.approvals.access import AccessRequest, AccessRules, BadAccess, live_grants, narrow
from gateway.approvals.index import BindingIndex
from gateway.approvals.rules import binding_hash, new_approval_id, overdue, reusable, tally
from gateway.audit.log import AuditLog
from gateway.store.changes import Change, ChangeFeed, LocalChangeFeed
from gateway.config import ApprovalSettings
from gateway.runtime.metrics import Metrics
from gateway.store import Store
from gateway.store.models import ApprovalRow, row_dict
from gateway.store.records import Approval, Session

log = logging.getLogger("sandgate.approvals")

EXPIRED_REASON = "the approval expired before anyone decided"


class ApprovalError(Exception):
    """A decision the queue refuses. `code` is stable (`bad_request`, `reason_required`, `not_found`,
    `forbidden`, `already_decided`, `already_voted`, `conflict`); adapters map it to their own answer."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code, self.detail = code, detail


class TooManyPending(Exception):
    """The session already has `sessions.max_pending_approvals` pending: this ask is not filed (a deny)."""

    code = "approvals.too_many"

    def __init__(self, limit: int):
        super().__init__(f"this session already has {limit} approvals pending (sessions.max_pending_approvals)")
        self.limit = limit


@dataclass(frozen=True)
class ApprovalRequest:
    """An action that needs a person's approval."""

    session: Session | Mapping[str, Any] | None      # the session as it is now (None once it ended): reuse needs it live
    session_id: str
    kind: str                              # "toolcall" | "egress"
    binding: str                           # approval_rules.binding_hash of the exact action
    summary: str
    action: dict
    reasons: list[str]
    requested_by: str                      # who files it (never allowed to decide it)
    used_by: str                           # who is recorded as using an approved item for it
    ttl_s: float | None = None             # the policy's TTL for this item, else approvals.ttl_s


@dataclass(frozen=True)
class ApprovalTicket:
    row: Approval
    reused: bool                           # True: an approved item was used (go ahead); False: `row` is pending


class ApprovalQueue:
    def __init__(self, store: Store, audit: AuditLog, metrics: Metrics, settings: ApprovalSettings,
                 feed: ChangeFeed | None = None, max_pending: int = 0, access: AccessRules | None = None):
        self._store = store
        self.access = access if access is not None else AccessRules(max_ttl_s=settings.max_grant_ttl_s)
        self.max_pending = max_pending               # per session, 0 = no cap (sessions.max_pending_approvals)
        self._filing: dict[str, list] = {}           # session -> [lock, users]: its count-and-file one at a time
        self._feed: ChangeFeed = feed if feed is not None else LocalChangeFeed()
        self._audit = audit
        self._metrics = metrics
        self.settings = settings
        self._events: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        self._subscribers: set[asyncio.Queue] = set()
        self._index = BindingIndex()                 # bindings with a live item (approval_index.py)
        self._access: dict[str, dict[str, Approval]] = {}   # session -> {id: approved, unwithdrawn access item}
        self._loaded = False
        self._trusted = False            # the index was read while this process was the store's only writer
        # (event, item) -> a statement written with each filing and decision (gateway/store/outbox.py: the
        # notification outbox, set when [notify] is on)
        self.outbox: Callable[[str, dict], Any] | None = None

    def _notes(self, event: str, row: Mapping[str, Any]) -> list:
        return [self.outbox(event, dict(row))] if self.outbox is not None else []

    async def _ensure_index(self) -> None:
        """Read the live items once (at the first ask): pending ones, and approved ones not yet used."""
        if self._loaded:
            return
        trusted = self._store.sole_writer()
        pending = await self._store.list_approvals(status="pending", limit=1_000_000)
        approved = await self._store.list_approvals(status="approved", limit=1_000_000)
        if not self._loaded:
            self._access = {}
            self._index.sync_pending(pending)        # items decided elsewhere meanwhile leave the index
            for row in pending + approved:
                self._note(row)
            self._loaded = True
            self._trusted = trusted and self._store.sole_writer()

    def _alone(self) -> bool:
        """Whether the index holds the store's pending items as they are: it was read while this process was the
        store's only writer and it has been ever since (asked at each use), so every change was made here. Once
        another process writes the store the index is read again before it is trusted again."""
        if not self._store.sole_writer():
            if self._trusted:
                self._trusted = self._loaded = False     # read again: the other process may change items
            return False
        return self._loaded and self._trusted

    def _note(self, row: Approval) -> None:
        """Take an item as it is now: the binding index, and the session's granted access items."""
        self._index.put(row)
        if row.kind != "access":
            return
        items = self._access.get(row.session)
        if row.status == "approved" and row.used_at is None:
            self._access.setdefault(row.session, {})[row.id] = row
        elif items is not None:
            items.pop(row.id, None)
            if not items:
                self._access.pop(row.session, None)

    async def grants_for(self, session: str, now: float) -> list[dict]:
        """The session's live grants (access/grant_in_force), from memory; expired ones are forgotten."""
        await self._ensure_index()
        items = self._access.get(session)
        if not items:
            return []
        grants = live_grants(items.values(), now)
        if len(grants) < len(items):
            live = {g["approval"] for g in grants}
            for aid in [a for a in items if a not in live]:
                del items[aid]
            if not items:
                self._access.pop(session, None)
        return grants

    async def load_index(self) -> None:
        """Read the live items now rather than at the first ask (the filtering resolver cannot wait for it)."""
        await self._ensure_index()

    def granted_hosts(self, session: str, now: float) -> frozenset[str]:
        """The hosts of the session's live grants, from memory, never waiting (the filtering resolver's question:
        a name a person granted resolves under `run --isolate`); nothing before the index is loaded."""
        items = self._access.get(session)
        if not items:
            return frozenset()
        return frozenset(g["host"] for g in live_grants(items.values(), now))

    async def file_access(self, session: str, req: AccessRequest, requested_by: str) -> tuple[Approval, bool]:
        """File an access request (an approval of kind "access"). Returns (item, filed): filed is False when the
        session already has one pending for the host (that one is returned). TooManyPending beyond the cap."""
        await self._ensure_index()
        binding = binding_hash(session, "access", req.host, "")
        for row in await self._store.list_approvals(status="pending", binding=binding):
            if row.expires_at > time.time():
                return row, False
        port = f":{req.port}" if req.port is not None else ""
        summary = f"access to {req.host}{port}{req.path_prefix} ({', '.join(req.methods)}) for {req.ttl_s:g} s"
        row = await self.file(session=session, kind="access", binding=binding, summary=summary,
                              action={"grant": req.grant(), "request_reason": req.reason},
                              reasons=["access requested: " + req.reason[:200]], requested_by=requested_by)
        return row, True

    async def withdraw(self, aid: str, by: str) -> bool:
        """End an approved access item's grant (at once on every replica). False when there is none live."""
        row = await self._store.get_approval(aid)
        if row is None or row.kind != "access" or row.status != "approved" or row.used_at is not None:
            return False
        if not await self._store.mark_used(aid):
            return False
        self._note(row.replace(used_at=time.time()))
        self._audit.record("grant.withdrawn", session=row.session, action="withdrawn",
                           detail={"approval_id": aid, "by": by})
        self._changed_here(aid, "withdrawn")
        return True

    # -- notifications ---------------------------------------------------------------------------
    def _event(self, aid: str) -> asyncio.Event:
        ev = self._events.get(aid)
        if ev is None:
            ev = self._events[aid] = asyncio.Event()
        return ev

    def changed(self, aid: str, what: str) -> None:
        """An item changed (here, or on another replica): wake its waiters and tell the subscribers."""
        ev = self._events.get(aid)
        if ev is not None:
            ev.set()
        for q in list(self._subscribers):
            try:
                q.put_nowait({"type": what, "id": aid})
            except asyncio.QueueFull:
                pass

    def _changed_here(self, aid: str, what: str) -> None:
        """This process changed an item: wake local waiters and tell the other replicas."""
        self.changed(aid, what)
        self._feed.publish(Change("approval", aid, what))

    async def on_change(self, change: Change) -> None:
        """Another replica changed an item (ChangeHandler): the binding index takes the row as stored now, and
        its waiters here re-read it. When the row cannot be read, the index is read again at the next ask."""
        try:
            row = await self._store.get_approval(change.id)
        except Exception:  # noqa: BLE001 - store down: forget the index rather than trust a stale one
            row = None
            self._loaded = False
        if row is not None:
            self._note(row)
        self.changed(change.id, change.what or "changed")

    async def resync(self) -> None:
        """After a gap in notifications: the binding index is read again at the next ask, and every waiter
        re-reads its item."""
        self._loaded = False
        for aid in list(self._waiting):
            self.changed(aid, "changed")

    def subscribe(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(maxsize=1000)
        self._subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        self._subscribers.discard(q)

    # -- reading ---------------------------------------------------------------------------------
    async def get(self, aid: str) -> Approval | None:
        row = await self._store.get_approval(aid)
        if row is not None and overdue(row, time.time()):
            await self._finish(row, "expired", None, EXPIRED_REASON)
            row = await self._store.get_approval(aid)
        return row

    async def list(self, *, status: str | None = None, session: str | None = None, kind: str | None = None,
                   limit: int = 1000) -> list[Approval]:
        """Items oldest first; pending items past their TTL are expired first (never listed as pending)."""
        rows = await self._store.list_approvals(status=status, session=session, kind=kind, limit=limit)
        now = time.time()
        late = [r for r in rows if overdue(r, now)]
        for row in late:
            await self._finish(row, "expired", None, EXPIRED_REASON)
        if late:
            rows = await self._store.list_approvals(status=status, session=session, kind=kind, limit=limit)
        return rows

    async def wait(self, aid: str, timeout_s: float) -> Approval | None:
        """Return the item as soon as it leaves `pending` (or when the wait runs out)."""
        row = await self.get(aid)
        if row is None or row.status != "pending":
            return row
        ev = self._event(aid)
        self._waiting[aid] = self._waiting.get(aid, 0) + 1
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                remaining = min(deadline, time.monotonic() + max(0.0, row.expires_at - time.time()) + 0.05)
                remaining -= time.monotonic()
                if remaining <= 0:
                    break
                ev.clear()
                row = await self.get(aid)
                if row is None or row.status != "pending":
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

    # -- asking ----------------------------------------------------------------------------------
    async def request_approval(self, req: ApprovalRequest) -> ApprovalTicket:
        """Use an approved, unused item for this exact action (marked used by `req.used_by`), or file one."""
        await self._ensure_index()
        used = await self.find_unused(req.binding, req.session)
        if used is not None and await self.consume(used, req.used_by):
            return ApprovalTicket(used, reused=True)
        filed = await self.file(session=req.session_id, kind=req.kind, binding=req.binding, summary=req.summary,
                                action=req.action, reasons=req.reasons, requested_by=req.requested_by,
                                ttl_s=req.ttl_s)
        return ApprovalTicket(filed, reused=False)

    async def find_unused(self, binding: str, session: Session | Mapping[str, Any] | None) -> Approval | None:
        """An approved, unused item for this exact action that may still be reused (see `reusable`)."""
        if self._loaded and not self._index.has(binding, "approved"):
            return None                          # nothing approved and unused for it: no store read
        rows = await self._store.list_approvals(status="approved", binding=binding)
        now = time.time()
        return next((r for r in rows if reusable(r, session, now, self.settings.reuse_window_s)), None)

    async def consume(self, row: Approval, by: str) -> bool:
        """Mark an approved item used (once). False when someone else used it first."""
        if not await self._store.mark_used(row.id):
            return False
        self._note(row.replace(used_at=time.time()))
        self._audit.record("approval.used", session=row.session, action="used",
                           detail={"approval_id": row.id, "by": by})
        self._changed_here(row.id, "used")
        return True

    async def file(self, *, session: str, kind: str, binding: str, summary: str, action: dict,
                   reasons: list[str], requested_by: str, ttl_s: float | None = None) -> Approval:
        """File a pending item, or return the pending one already filed for the same binding. TooManyPending when
        the session already has `max_pending` pending (counted across replicas)."""
        pending: list[Approval] = []
        if self._alone():                # every change to an item was made here: the index has them as stored
            pending = self._index.pending(binding)
        elif not self._loaded or self._index.has(binding, "pending"):   # else nothing pending: no store read
            pending = await self._store.list_approvals(status="pending", binding=binding)
        now = time.time()
        for row in pending:
            if row.expires_at > now:
                return row
        if not self.max_pending:
            return await self._put_pending(session, kind, binding, summary, action, reasons, requested_by, ttl_s, now)
        entry = self._filing.setdefault(session, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:             # concurrent asks of one session: counted and filed one at a time
                if await self._store.count_pending(session) >= self.max_pending:
                    raise TooManyPending(self.max_pending)
                return await self._put_pending(session, kind, binding, summary, action, reasons, requested_by,
                                               ttl_s, now)
        finally:
            entry[1] -= 1
            if not entry[1]:
                self._filing.pop(session, None)

    async def _put_pending(self, session: str, kind: str, binding: str, summary: str, action: dict,
                           reasons: list[str], requested_by: str, ttl_s: float | None, now: float) -> Approval:
        row = ApprovalRow(id=new_approval_id(), session=session, kind=kind, status="pending", binding=binding,
                          summary=summary[:300], action=action, reasons=list(reasons), created_at=now,
                          expires_at=now + float(ttl_s or self.settings.ttl_s), quorum=self.settings.quorum,
                          requested_by=requested_by)
        stored = await self._store.put_approval(row, also=self._notes("approval.filed", row_dict(row)))
        self._note(stored)
        self._audit.record("approval.filed", session=session, action="ask", reasons=list(reasons),
                           detail={"approval_id": stored.id, "kind": kind, "summary": stored.summary})
        self._changed_here(stored.id, "filed")
        return stored

    # -- deciding --------------------------------------------------------------------------------
    async def decide(self, aid: str, by: str, verdict: str, reason: str | None,
                     grant: dict | None = None) -> Approval | None:
        """A vote. `grant` (an approve of an access item only) narrows what approving grants."""
        if verdict not in ("approve", "deny"):
            raise ApprovalError("bad_request", "verdict must be approve or deny")
        if verdict == "deny" and not (reason or "").strip():
            raise ApprovalError("reason_required", "a deny needs a reason")
        for _attempt in range(5):
            row = await self.get(aid)
            if row is None:
                raise ApprovalError("not_found", "no such approval")
            if row.status != "pending":
                raise ApprovalError("already_decided", f"the approval is already {row.status}")
            if row.requested_by == by:
                raise ApprovalError("forbidden", "nobody decides an approval they filed")
            votes = list(row.votes)
            if any(v.by == by for v in row.ballots):
                raise ApprovalError("already_voted", "you already voted on this approval")
            vote = {"by": by, "verdict": verdict, "at": time.time(), "reason": reason or ""}
            if grant is not None:
                if row.kind != "access" or verdict != "approve":
                    raise ApprovalError("bad_request", "only an approve of an access request takes a grant")
                try:
                    narrow(row.action["grant"], grant, self.settings.max_grant_ttl_s)
                except BadAccess as exc:
                    raise ApprovalError(exc.code, str(exc)) from None
                vote["grant"] = grant
            votes.append(vote)
            now = time.time()
            if verdict == "deny":
                values = {"status": "denied", "votes": votes, "decided_by": by, "reason": reason,
                          "decided_at": now}
            elif tally(votes, int(row.quorum)):
                values = {"status": "approved", "votes": votes, "decided_by": by, "reason": reason,
                          "decided_at": now}
            else:
                values = {"votes": votes}
            done = values.get("status")
            notes = self._notes(f"approval.{done}", row.to_json() | values) if done else ()
            if await self._store.cas_approval(aid, "pending", values, expect_version=row.version, also=notes):
                status = values.get("status", "pending")
                self._audit.record(f"approval.{status if status != 'pending' else 'vote'}",
                                   session=row.session, action=verdict,
                                   reasons=[reason] if reason else [],
                                   detail={"approval_id": aid, "by": by, "votes": len(votes),
                                           "quorum": row.quorum})
                self._changed_here(aid, "decided" if status != "pending" else "voted")
                stored = await self._store.get_approval(aid)
                if stored is not None:
                    self._note(stored)
                return stored
        raise ApprovalError("conflict", "the approval changed while deciding; try again")

    async def _finish(self, row: Approval, status: str, by: str | None, reason: str) -> bool:
        values = {"status": status, "decided_by": by, "reason": reason, "decided_at": time.time()}
        ok = await self._store.cas_approval(row.id, "pending", values,
                                            also=self._notes(f"approval.{status}", row.to_json() | values))
        if ok:
            self._note(row.replace(status=status))
            self._audit.record(f"approval.{status}", session=row.session, action=status, reasons=[reason],
                               detail={"approval_id": row.id, "by": by})
            self._changed_here(row.id, "decided")
        return ok

    async def cancel(self, aid: str, by: str, reason: str) -> None:
        row = await self._store.get_approval(aid)
        if row is not None and row.status == "pending":
            await self._finish(row, "cancelled", by, reason)

    async def cancel_session(self, session: str, by: str) -> None:
        for row in await self._store.list_approvals(status="pending", session=session):
            await self._finish(row, "cancelled", by, "the session ended")

    async def tick(self) -> None:
        """Expire overdue items; re-read items somebody waits on (decisions by another replica)."""
        now = time.time()
        pending = await self._store.list_approvals(status="pending", limit=1_000_000)
        if self._loaded:
            self._index.sync_pending(pending)        # items decided elsewhere leave the index within a tick
        for row in pending:
            if overdue(row, now):
                await self._finish(row, "expired", None, EXPIRED_REASON)
        for aid in list(self._waiting):
            row = await self._store.get_approval(aid)
            if row is not None and row.status != "pending":
                self.changed(aid, "decided")
        self._metrics.approvals_pending.set(len(await self._store.list_approvals(status="pending")))
