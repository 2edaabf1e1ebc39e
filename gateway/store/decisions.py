"""The decision log and the shadow policy's divergences: two tables and their queries.

Every policy decision is one row of `decisions` (input with secrets redacted, result, policy revision, engine,
latency); every decision on which the shadow policy disagreed with the live one is one row of
`policy_divergences`. Rows arrive in batches from gateway/policy/decisionlog.py.
"""
from __future__ import annotations

import json
from typing import Optional

from sqlalchemy import JSON, Column, Index, select
from sqlmodel import Field, Session, SQLModel

from gateway.store.bulk import insert_statements, placeholder
from gateway.store.models import row_dict
from gateway.store.store import Store


class DecisionRow(SQLModel, table=True):
    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_ts", "ts"), Index("ix_decisions_request_id", "request_id"),
                      Index("ix_decisions_session", "session"))
    seq: Optional[int] = Field(default=None, primary_key=True)
    id: str = Field(index=True)
    ts: float
    kind: str
    session: Optional[str] = None
    input: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    result: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    policy_rev: str = ""
    engine: str = ""
    latency_us: int = 0
    request_id: Optional[str] = None       # the proxy's request id (in every 403 body) or the tool call's id


class DivergenceRow(SQLModel, table=True):
    __tablename__ = "policy_divergences"
    __table_args__ = (Index("ix_policy_divergences_ts", "ts"),)
    seq: Optional[int] = Field(default=None, primary_key=True)
    decision_id: str
    ts: float
    kind: str
    session: Optional[str] = None
    input: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    live: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    shadow: dict = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    live_rev: str = ""
    shadow_rev: str = ""


class RawJSON(str):
    """A value already serialised as JSON text (the decision log's redacted input)."""


_DECISION_COLS = ("id", "ts", "kind", "session", "input", "result", "policy_rev", "engine", "latency_us",
                  "request_id")
_DIVERGENCE_COLS = ("decision_id", "ts", "kind", "session", "input", "live", "shadow", "live_rev", "shadow_rev")
_JSON_COLS = frozenset({"input", "result", "live", "shadow"})


class DecisionStore:
    """Batched inserts and time-ordered reads of the two tables, on the Store's threads."""

    def __init__(self, store: Store):
        self.store = store

    def _insert(self, table: str, cols: tuple[str, ...], rows: list[dict]) -> None:
        values = [tuple((v if v.__class__ is RawJSON else json.dumps(v)) if c in _JSON_COLS else v
                        for c, v in zip(cols, map(r.get, cols))) for r in rows]
        mark = placeholder(self.store.engine.dialect.paramstyle)
        with self.store.engine.begin() as conn:
            for sql, params in insert_statements(table, cols, values, mark, few_texts=True):
                conn.exec_driver_sql(sql, params)

    def append_decisions_sync(self, rows: list[dict]) -> None:
        if rows:
            self._insert("decisions", _DECISION_COLS, rows)

    def append_divergences_sync(self, rows: list[dict]) -> None:
        if rows:
            self._insert("policy_divergences", _DIVERGENCE_COLS, rows)

    def _list(self, model: type, since: float, until: Optional[float], kind: Optional[str],
              limit: int, match: Optional[dict] = None, after_seq: Optional[int] = None) -> list[dict]:
        q = select(model).where(model.ts >= since)
        if after_seq is not None:
            q = q.where(model.seq > after_seq)
        if until is not None:
            q = q.where(model.ts < until)
        if kind:
            q = q.where(model.kind == kind)
        for column, value in (match or {}).items():      # session, id, request_id: exact values
            if value:
                q = q.where(getattr(model, column) == value)
        q = q.order_by(model.seq).limit(limit)
        with Session(self.store.engine) as db:
            return [row_dict(r) for r in db.execute(q).scalars().all()]

    async def list_decisions(self, since: float = 0.0, until: Optional[float] = None,
                             kind: Optional[str] = None, limit: int = 1_000_000, session: Optional[str] = None,
                             id: Optional[str] = None, request_id: Optional[str] = None,
                             after_seq: Optional[int] = None) -> list[dict]:
        """Rows in the order written (`after_seq`: those past a row's `seq`, for paging); `session`, `id` (the
        decision's) and `request_id` narrow to exact values."""
        match = {"session": session, "id": id, "request_id": request_id}
        return await self.store.run(self._list, DecisionRow, since, until, kind, limit, match, after_seq)

    async def list_divergences(self, since: float = 0.0, until: Optional[float] = None,
                               kind: Optional[str] = None, limit: int = 1_000_000) -> list[dict]:
        return await self.store.run(self._list, DivergenceRow, since, until, kind, limit)
