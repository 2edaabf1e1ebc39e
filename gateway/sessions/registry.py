"""Sessions: the one place a session row changes, and the live view the proxy checks on every request.

The store is the truth. `SessionCache` mirrors it in memory so per-request checks are cheap; `SessionRegistry`
writes every change in one sequence — store row, then cache, then the placeholder registry (a deleted session's
placeholders stop being its own at once) — whether the change is local (create, patch, delete) or comes from the
store (`refresh`, another replica's change; `on_change` applies one row named by a change notification, see
gateway/store/changes.py). Every local change is published to the other replicas.

A session may also be bound to a source address (`SourceBindings`): transparent capture (`sandgate run
--isolate`) knows a connection's session by the address it comes from, never by credentials it sends. Bindings
live in this process only (the transparent listener that sees the connection is this process's); a binding
ends with its session.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Mapping

from broker.registry import PlaceholderRegistry
from gateway.approvals.queue import ApprovalQueue
from gateway.audit.log import AuditLog
from gateway.auth.tokens import Principal
from gateway.store.changes import Change, ChangeFeed, LocalChangeFeed
from gateway.sessions import budgets as budget_rules
from gateway.sessions.memory import SessionMemory
from gateway.sessions.spec import STAT_KEYS, SessionSpec, lifetime_ceiling, new_session_id, session_status, sum_stats
from gateway.store import Store
from gateway.store.models import SessionRow
from gateway.store.records import Record, Session
from gateway.toolcalls.history import HISTORY_KINDS, HISTORY_SIZE, MAX_SESSION_PATHS, in_history


class SessionCache:
    """The in-memory mirror of the sessions table, with per-session step and counters (handed to policies as
    `session.stats`). Counters are the totals stored for all replicas when last synced (`base`), plus what this
    process counted since: `inflight` (being added to the store) and `pending` (not yet)."""

    def __init__(self) -> None:
        self._rows: dict[str, Session] = {}
        self.steps: dict[str, int] = {}
        self._base: dict[str, dict] = {}
        self._inflight: dict[str, dict] = {}
        self._pending: dict[str, dict] = {}

    def count(self, sid: str, **deltas: int) -> None:
        st = self._pending.get(sid)
        if st is None:
            st = self._pending[sid] = dict.fromkeys(STAT_KEYS, 0)
        for key, delta in deltas.items():
            st[key] = st.get(key, 0) + delta

    def stats_of(self, sid: str) -> dict:
        return sum_stats(self._base.get(sid), self._inflight.get(sid), self._pending.get(sid))

    def with_stats(self, row: Session | Mapping[str, Any]) -> dict:
        """The session as a JSON object (the policy input's `session`) with its counters."""
        out = row.to_json() if isinstance(row, Record) else dict(row)
        out["stats"] = self.stats_of(out["id"])
        return out

    def take_counts(self) -> dict[str, dict]:
        """Hand what was counted since the last sync to the store (kept visible as `inflight` until `settle`)."""
        self._inflight, self._pending = self._pending, {}
        return dict(self._inflight)

    def settle(self, totals: Mapping[str, dict], written: bool) -> None:
        """The sync finished: take the stored totals of the live sessions (they include what was in flight), or,
        when the write failed, count the in-flight part as pending again."""
        if written:
            self._base = dict(totals)
        else:
            for sid, st in self._inflight.items():
                self._pending[sid] = sum_stats(st, self._pending.get(sid))
        self._inflight = {}

    def put(self, row: Session) -> None:
        self._rows[row.id] = row

    def get(self, sid: str) -> Session | None:
        return self._rows.get(sid)

    def live(self, sid: str, now: float | None = None) -> Session | None:
        row = self._rows.get(sid)
        if row is None or session_status(row, time.time() if now is None else now) != "active":
            return None
        return row

    def count_live(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        return sum(1 for r in self._rows.values() if session_status(r, now) == "active")

    def all(self) -> list[Session]:
        return list(self._rows.values())


class SourceInUse(Exception):
    """Another live session is bound to this source address."""


class SourceBindings:
    """Source address <-> session, one each way. The principal is the session token's (so revoking that token
    also cuts what its address does)."""

    def __init__(self) -> None:
        self._by_addr: dict[str, tuple[str, Principal]] = {}
        self._by_session: dict[str, str] = {}

    def bind(self, sid: str, addr: str, principal: Principal) -> None:
        holder = self._by_addr.get(addr)
        if (holder is not None and holder[0] != sid) or self._by_session.get(sid, addr) != addr:
            raise SourceInUse(addr)
        self._by_addr[addr] = (sid, principal)
        self._by_session[sid] = addr

    def unbind(self, sid: str) -> None:
        addr = self._by_session.pop(sid, None)
        if addr is not None:
            self._by_addr.pop(addr, None)

    def lookup(self, addr: str) -> tuple[str, Principal] | None:
        return self._by_addr.get(addr)

    def address_of(self, sid: str) -> str | None:
        return self._by_session.get(sid)


class SessionRegistry:
    def __init__(self, store: Store, cache: SessionCache, placeholders: PlaceholderRegistry, audit: AuditLog,
                 approvals: ApprovalQueue, feed: ChangeFeed | None = None,
                 budgets: Mapping[str, Mapping[str, int]] | None = None, lifetimes: tuple[int, int] = (0, 86400)):
        self._store = store
        self.lifetimes = lifetimes              # (sessions.max_lifetime_s, sessions.ephemeral_max_lifetime_s)
        self._budgets = budgets or {}           # `[budgets.WORKLOAD]`: workload -> {key: limit}
        self._denials = budget_rules.DenialWindow()
        self._feed: ChangeFeed = feed if feed is not None else LocalChangeFeed()
        self._cache = cache
        self._placeholders = placeholders
        self._audit = audit
        self._approvals = approvals
        self._sources = SourceBindings()
        self._end_watchers: list[Callable[[str], None]] = []
        self._sync_lock = asyncio.Lock()        # one counter sync at a time (the once-a-second one, the last one)
        # While this process is the store's only writer (a SQLite file no other sandgate has joined) a
        # session's tool-call memory is kept here once loaded; otherwise every call reads the store.
        self._memory = SessionMemory(
            lambda sid: store.toolcall_memory(sid, HISTORY_SIZE, max_paths=MAX_SESSION_PATHS),
            lambda sid: [r for r in audit.queued(HISTORY_KINDS, sid) if in_history(r)], authoritative=store.sole_writer, events=HISTORY_SIZE)

    # -- the one write sequence --------------------------------------------------------------------
    def _remember(self, row: Session) -> None:
        """Cache a row as stored, and keep the placeholder registry in step with it."""
        self._cache.put(row)
        placeholders = row.placeholders or {}
        if row.deleted_at:
            for watcher in self._end_watchers:
                watcher(row.id)
            self._memory.forget(row.id)
            self._placeholders.remove(placeholders)
            self._sources.unbind(row.id)
        else:
            self._placeholders.add(row.id, placeholders)

    def watch_ends(self, watcher: Callable[[str], None]) -> None:
        """Call `watcher(session_id)` the moment a session is deleted (here or, by its change, on another replica)."""
        self._end_watchers.append(watcher)

    def apply(self, row: Session) -> None:
        """Take a row changed elsewhere (another replica) unless the cache already has it, or a newer one."""
        known = self._cache.get(row.id)
        if known is not None and (known == row or (known.updated_at or 0) >= (row.updated_at or 0)):
            return
        self._remember(row)

    async def load(self) -> None:
        """Read every session (at start), and the live ones' counters: a budget spent before a restart is spent
        from the first request after it."""
        for row in await self._store.list_sessions():
            self._remember(row)
        await self.sync_stats()

    async def refresh(self) -> None:
        """Merge the store's view into the cache (deletions, freezes, new sessions of other replicas)."""
        for row in await self._store.list_sessions():
            self.apply(row)

    # -- changes made elsewhere (ChangeHandler) ----------------------------------------------------
    async def on_change(self, change: Change) -> None:
        """Another replica created, patched or deleted a session: read its row and apply it."""
        row = await self._store.get_session(change.id)
        if row is not None:
            self.apply(row)

    async def resync(self) -> None:
        await self.refresh()

    # -- reading -----------------------------------------------------------------------------------
    async def live(self, sid: str | None) -> Session | None:
        """The session if it is live. A session this process has not seen (created by another replica) is
        read from the store once; `refresh` brings changes made elsewhere within seconds."""
        if not sid:
            return None
        if self._cache.get(sid) is None:
            row = await self._store.get_session(sid)
            if row is None:
                return None
            self._remember(row)
        return self._cache.live(sid)

    async def known(self, sid: str) -> Session | None:
        """The cached row, live or not (read from the store, and cached, the first time)."""
        row = self._cache.get(sid)
        if row is None:
            row = await self._store.get_session(sid)
            if row is not None:
                self._remember(row)
        return row

    def live_now(self, sid: str) -> Session | None:
        """The cached session if it is live (no store read: for checks on every packet)."""
        return self._cache.live(sid)

    async def get(self, sid: str) -> Session | None:
        """The stored row, live or not."""
        return await self._store.get_session(sid)

    async def list(self) -> list[Session]:
        return await self._store.list_sessions()

    def count_live(self) -> int:
        return self._cache.count_live()

    def live_ids(self) -> set[str]:
        now = time.time()
        return {row.id for row in self._cache.all() if session_status(row, now) == "active"}

    async def paths(self, sid: str) -> list[dict]:
        """The links and scripts the session's earlier tool calls left (tool-call history)."""
        return await self._store.list_session_paths(sid)

    async def toolcall_memory(self, sid: str) -> tuple[list[dict], list[dict]]:
        """The session's recent tool-call events (stored and still queued in the audit writer), oldest first,
        then its path rows (gateway/sessions/memory.py: kept in memory when this process is the only writer)."""
        return await self._memory.get(sid)

    def toolcall_recorded(self, sid: str, row: Mapping[str, Any]) -> None:
        """A tool-call event of the session was recorded (queued for the audit writer)."""
        self._memory.record_event(sid, row)

    async def add_paths(self, sid: str, rows: list[dict]) -> None:
        if rows:
            await self._store.append_session_paths(rows)
            self._memory.record_paths(sid, rows)

    # -- source addresses (transparent capture) ----------------------------------------------------
    def source_holder(self, addr: str) -> str | None:
        """The live session bound to `addr` (a binding whose session has ended is dropped here)."""
        hit = self._sources.lookup(addr)
        if hit is None:
            return None
        if self._cache.live(hit[0]) is None:
            self._sources.unbind(hit[0])
            return None
        return hit[0]

    def bind_source(self, sid: str, addr: str, principal: Principal) -> None:
        """Bind a live session to a source address; SourceInUse when another live session holds it."""
        if self._cache.live(sid) is None:
            raise KeyError(sid)
        self.source_holder(addr)            # drops an ended holder's binding
        self._sources.bind(sid, addr, principal)
        self._audit.record("session.updated", session=sid, action="bind", detail={"source": addr})

    def by_source(self, addr: str) -> tuple[Session, Principal] | None:
        """The live session a connection from `addr` belongs to, with its token's principal (no store read)."""
        sid = self.source_holder(addr)
        hit = self._sources.lookup(addr) if sid is not None else None
        row = self._cache.live(sid) if sid is not None else None
        return (row, hit[1]) if row is not None and hit is not None else None

    def source_of(self, sid: str) -> str | None:
        return self._sources.address_of(sid)

    # -- per-session step and counters -------------------------------------------------------------
    def step(self, sid: str) -> int | None:
        return self._cache.steps.get(sid)

    def set_step(self, sid: str, step: int) -> None:
        self._cache.steps[sid] = step

    def count(self, sid: str, **deltas: int) -> None:
        self._cache.count(sid, **deltas)

    def ceiling(self, workload: str) -> int:
        """How long a session of `workload` may live from its creation (spec.lifetime_ceiling)."""
        return lifetime_ceiling(workload, *self.lifetimes)

    def budgets_of(self, row: Session) -> dict[str, int]:
        """The session's budgets: its own where set, else its workload's (0 = none)."""
        return budget_rules.effective(self._budgets.get(row.workload), row.budgets)

    def with_stats(self, row: Session, counted: str | None = None) -> dict:
        """The row with its counters (`stats`), its budgets (`budgets`, replacing the row's own) and the counted
        budgets it has spent (`budgets_spent`). `counted`: a counter that already includes the action being
        decided."""
        out = row.to_json() if isinstance(row, Record) else dict(row)
        out["stats"], out["budgets"], out["budgets_spent"] = self.counters(row, counted)
        return out

    def counters(self, row: Session, counted: str | None = None,
                 budgets: dict[str, int] | None = None) -> tuple[dict, dict[str, int], list[str]]:
        """(`stats`, `budgets`, `budgets_spent`) of with_stats(row, counted), without the row's JSON.
        `budgets`: budgets_of(row), when the caller kept it (it changes only with the row)."""
        stats = self._cache.stats_of(row["id"])
        if budgets is None:
            budgets = self.budgets_of(row)
        return stats, budgets, budget_rules.spent(budgets, stats, counted)

    async def check_denials(self, now: float | None = None) -> list[str]:
        """Freeze each live session whose denials within ten minutes passed its `denials_per_10m` (audited as an
        alert); the ids frozen. Called after each counter sync, so every replica's denials count."""
        now = time.time() if now is None else now
        frozen, watched = [], set()
        for row in self._cache.all():
            if session_status(row, now) != "active":
                continue
            limit = self.budgets_of(row)["denials_per_10m"]
            if not limit:
                continue
            watched.add(row.id)
            total = self._cache.stats_of(row.id)["denied"]
            n = self._denials.observe(row.id, now, total, float(row.created_at))
            if budget_rules.burst(limit, n) and not row.frozen:
                await self.patch(row.id, {"frozen": True}, "sandgate")
                self._denials.restart(row.id, now, total)      # a lifted freeze counts new denials only
                self._audit.record("session.alert", session=row.id, action="freeze", codes=["budget.denials"],
                                   reasons=[f"{n} denials within 10 minutes (more than denials_per_10m = {limit}): "
                                            "the session is frozen"], detail={"denials": n, "limit": limit})
                frozen.append(row.id)
        self._denials.retain(watched)
        return frozen

    async def sync_stats(self) -> None:
        """Add this process's counts to the shared totals and read back those of the live sessions (about once
        a second: a policy sees every replica's counts at most a sync or two late). One at a time: the last
        one, on stop, waits for one still in flight."""
        async with self._sync_lock:
            deltas = self._cache.take_counts()
            try:
                totals = await self._store.sync_stats(deltas, sorted(self.live_ids()))
            except BaseException:
                self._cache.settle({}, written=False)
                raise
            self._cache.settle(totals, written=True)

    # -- changes -----------------------------------------------------------------------------------
    async def create(self, spec: SessionSpec, placeholders: Mapping[str, str], by: str,
                     now: float | None = None, db_login: Mapping[str, Any] | None = None) -> Session:
        now = time.time() if now is None else now
        row = SessionRow(id=new_session_id(), workload=spec.workload, labels=spec.labels, allow=spec.allow,
                         budgets=dict(spec.budgets),
                         secrets=spec.secrets, placeholders=dict(placeholders), workspace=spec.workspace,
                         ca_path=spec.ca_path, frozen=False, created_at=now, expires_at=now + spec.ttl_s,
                         created_by=by, updated_at=now, databases=list(spec.databases), db_login=dict(db_login or {}))
        stored = await self._store.put_session(row)
        self._remember(stored)
        self._feed.publish(Change("session", stored.id, "created"))
        self._audit.record("session.created", session=stored.id, action="create",
                           detail={"workload": spec.workload, "by": by, "allow": spec.allow,
                                   "secrets": spec.secrets, "labels": spec.labels, "databases": spec.databases})
        return stored

    async def patch(self, sid: str, values: Mapping[str, Any], by: str) -> Session:
        updated = await self._store.update_session(sid, **values)
        if updated is None:
            raise KeyError(sid)
        self._remember(updated)
        self._feed.publish(Change("session", sid, "patched"))
        self._audit.record("session.updated", session=sid, action="patch", detail={**values, "by": by})
        return updated

    async def delete(self, row: Session, by: str) -> None:
        """End a session now: its token, placeholders and pending approvals die at once. Idempotent."""
        if row.deleted_at:
            return
        updated = await self._store.update_session(row.id, deleted_at=time.time())
        if updated is not None:
            self._remember(updated)
        self._feed.publish(Change("session", row.id, "deleted"))
        self._sources.unbind(row.id)
        await self._approvals.cancel_session(row.id, by=by)
        self._audit.record("session.deleted", session=row.id, action="delete", detail={"by": by})
