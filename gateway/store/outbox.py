"""The notification outbox: one row per approval event waiting to be delivered to `notify.webhook_url`.

A row is written in the transaction that files or decides the approval (`Outbox.entry`, passed as `also=` to the
store's approval writes), so an event is never lost and the decision never waits on the receiver. Deliverers
(gateway/notify) take rows with a lease: one UPDATE that claims the oldest due, unleased rows (on PostgreSQL the
candidates are picked `FOR UPDATE SKIP LOCKED`, so replicas claim disjoint rows without waiting on each other;
on SQLite the UPDATE is atomic). A delivered row is deleted; a failed one is released with its next attempt
time; a lease a crashed replica left ends by itself after LEASE_S. `trim` bounds the table (oldest dropped).
"""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Optional

from sqlalchemy import Column, Text, insert
from sqlmodel import Field, SQLModel

from gateway.store.bulk import placeholder
from gateway.store.store import Store

LEASE_S = 60.0            # longer than a delivery may take (notify.timeout_s is at most 30)


class OutboxRow(SQLModel, table=True):
    __tablename__ = "notify_outbox"
    id: Optional[int] = Field(default=None, primary_key=True)
    delivery: str = Field(unique=True)       # the delivery id the receiver sees (the same on every retry)
    event: str                               # "approval.filed", "approval.approved", ...
    payload: str = Field(sa_column=Column(Text, nullable=False))     # JSON: the approval as it was at the event
    created_at: float
    attempts: int = 0
    next_at: float = 0.0
    lease_owner: str = ""
    lease_until: float = 0.0
    last_error: str = ""


_TABLE = OutboxRow.__table__
_COLS = ("id", "delivery", "event", "payload", "created_at", "attempts")


@dataclass(frozen=True)
class Claimed:
    id: int
    delivery: str
    event: str
    payload: dict
    created_at: float
    attempts: int


def new_delivery_id() -> str:
    return "d_" + secrets.token_hex(12)


class Outbox:
    def __init__(self, store: Store, owner: str | None = None):
        self.store = store
        self.owner = owner or secrets.token_hex(8)            # this process

    @property
    def _mark(self) -> str:
        return placeholder(self.store.engine.dialect.paramstyle)

    @staticmethod
    def entry(event: str, approval: dict, now: float | None = None) -> Any:
        """The INSERT of one event's row: run it in the transaction that makes the change."""
        now = time.time() if now is None else now
        return insert(_TABLE).values(delivery=new_delivery_id(), event=event, created_at=now, attempts=0,
                                     next_at=now, lease_owner="", lease_until=0.0, last_error="",
                                     payload=json.dumps(approval, sort_keys=True, default=str))

    # -- deliverers -----------------------------------------------------------------------------
    def _claim_sync(self, limit: int, now: float) -> list[Claimed]:
        m = self._mark
        lock = " FOR UPDATE SKIP LOCKED" if self.store.is_postgres else ""
        sql = (f"UPDATE notify_outbox SET lease_owner = {m}, lease_until = {m} WHERE id IN (SELECT id FROM "
               f"notify_outbox WHERE next_at <= {m} AND lease_until < {m} ORDER BY id LIMIT {int(limit)}{lock}) "
               f"AND lease_until < {m} RETURNING {', '.join(_COLS)}")

        def work(cur: Any) -> list[tuple]:
            cur.execute(sql, (self.owner, now + LEASE_S, now, now, now))
            return cur.fetchall()
        rows = self.store.driver(work, commit=True)
        claimed = [Claimed(int(r[0]), r[1], r[2], json.loads(r[3]), float(r[4]), int(r[5])) for r in rows]
        return sorted(claimed, key=lambda c: c.id)

    def _due_sync(self, now: float) -> bool:
        m = self._mark
        return bool(self.store.driver_rows(f"SELECT id FROM notify_outbox WHERE next_at <= {m} AND lease_until < {m} "
                                            f"LIMIT 1", (now, now)))

    async def claim(self, limit: int = 20, now: float | None = None) -> list[Claimed]:
        """Lease the oldest due rows nobody holds (oldest first). A read first: an idle outbox costs no write."""
        now = time.time() if now is None else now
        if not await self.store.read(self._due_sync, now):
            return []
        return await self.store.run(self._claim_sync, limit, now)

    def _exec(self, sql: str, params: tuple) -> int:
        def work(cur: Any) -> int:
            cur.execute(sql, params)
            return cur.rowcount
        return self.store.driver(work, commit=True)

    async def delivered(self, row_id: int) -> bool:
        """The row was delivered: it leaves the outbox. False when this process no longer held it."""
        m = self._mark
        return await self.store.run(self._exec, f"DELETE FROM notify_outbox WHERE id = {m} AND lease_owner = {m}",
                                    (row_id, self.owner)) == 1

    async def failed(self, row_id: int, next_at: float, error: str) -> None:
        """A delivery failed: count the attempt, release the row until `next_at`."""
        m = self._mark
        await self.store.run(self._exec, f"UPDATE notify_outbox SET attempts = attempts + 1, next_at = {m}, "
                             f"lease_owner = '', lease_until = 0, last_error = {m} WHERE id = {m} AND "
                             f"lease_owner = {m}", (next_at, error[:300], row_id, self.owner))

    async def release(self, ids: list[int]) -> None:
        """Give rows back untried (another replica, or the next round, takes them)."""
        m = self._mark
        for row_id in ids:
            await self.store.run(self._exec, f"UPDATE notify_outbox SET lease_owner = '', lease_until = 0 "
                                 f"WHERE id = {m} AND lease_owner = {m}", (row_id, self.owner))

    def _trim_sync(self, max_rows: int, oldest: float) -> list[tuple[str, str, str]]:
        """Delete rows past the cap (the oldest) and rows created before `oldest`: (delivery, event, why)."""
        m = self._mark

        def work(cur: Any) -> list[tuple[str, str, str]]:
            dropped: list[tuple[str, str, str]] = []
            cur.execute(f"DELETE FROM notify_outbox WHERE created_at < {m} RETURNING delivery, event", (oldest,))
            dropped += [(d, e, "too old") for d, e in cur.fetchall()]
            cur.execute("SELECT COUNT(*) FROM notify_outbox")
            excess = int(cur.fetchone()[0]) - max_rows
            if excess > 0:
                cur.execute(f"DELETE FROM notify_outbox WHERE id IN (SELECT id FROM notify_outbox ORDER BY id "
                            f"LIMIT {int(excess)}) RETURNING delivery, event")
                dropped += [(d, e, "outbox full") for d, e in cur.fetchall()]
            return dropped
        return self.store.driver(work, commit=True)

    async def trim(self, max_rows: int, max_age_s: float, now: float | None = None) -> list[tuple[str, str, str]]:
        now = time.time() if now is None else now
        return await self.store.run(self._trim_sync, max_rows, now - max_age_s)

    def _count_sync(self) -> int:
        rows = self.store.driver_rows("SELECT COUNT(*) FROM notify_outbox", ())
        return int(rows[0][0])

    async def count(self) -> int:
        return await self.store.read(self._count_sync)
