"""The decision log and the shadow policy's divergences: three tables and their queries.

Every policy decision is one row of `decisions` (input with secrets redacted, result, policy revision, engine,
latency); every decision on which the shadow policy disagreed with the live one is one row of
`policy_divergences`. Rows arrive in batches from gateway/policy/decisionlog.py.

A tool call's input carries the session's last 20 tool calls (`input.history`), each of which is in the next
20 calls' inputs too: four fifths of a row were copies. So a row's `history` column holds references instead,
`[[KEY, AGE_S], ...]` (oldest first; NULL: the input holds its own `history`, or has none), and each entry's
redacted JSON, with `age_s` 0.0, is stored once in `decision_history` under KEY (column `ref`): the BLAKE2b-128
of that text in hex (content-addressed: an entry never changes, and the same entry is the same key).
`list_decisions` gives every row back whole: the entries put back into `input.history` with their ages, so
replay, export, the API and the advisor read what was decided.
"""
from __future__ import annotations

import json
from typing import Optional

from sqlalchemy import JSON, Column, Index, Text, select
from sqlmodel import Field, Session, SQLModel

from gateway.store.bulk import insert_statements, placeholder
from gateway.store.models import row_dict
from gateway.store.rowsql import DECISION_COLS, DIVERGENCE_COLS, ENTRY_COLS
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
    history: Optional[list] = Field(default=None, sa_column=Column(JSON, nullable=True))   # [[KEY, AGE_S], ...]


class HistoryEntryRow(SQLModel, table=True):
    """One history entry of the decision log's inputs (redacted JSON text, `age_s` 0.0), by content."""
    __tablename__ = "decision_history"
    ref: str = Field(primary_key=True)
    entry: str = Field(sa_column=Column(Text, nullable=False))


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


_DECISION_COLS, _ENTRY_COLS = DECISION_COLS, ENTRY_COLS
_READ_CHUNK = 500
_DIVERGENCE_COLS = DIVERGENCE_COLS
_JSON_COLS = frozenset({"input", "result", "live", "shadow", "history"})


class DecisionStore:
    """Batched inserts and time-ordered reads of the two tables, on the Store's threads."""

    def __init__(self, store: Store):
        self.store = store

    def _insert(self, table: str, cols: tuple[str, ...], rows: list[dict]) -> None:
        values = [tuple((v if v.__class__ is RawJSON or v is None else json.dumps(v)) if c in _JSON_COLS else v
                        for c, v in zip(cols, map(r.get, cols))) for r in rows]
        self._execute(table, cols, values)

    def _execute(self, table: str, cols: tuple[str, ...], values: list[tuple], suffix: str = "") -> None:
        mark = placeholder(self.store.engine.dialect.paramstyle)
        with self.store.engine.begin() as conn:
            for sql, params in insert_statements(table, cols, values, mark, few_texts=True, suffix=suffix):
                conn.exec_driver_sql(sql, params)

    def append_decisions_sync(self, rows: list[dict], entries: list[tuple[str, str]] = ()) -> None:
        """Insert decision rows, after the history entries they reference ((key, redacted JSON text); a key
        stored already is left as it is: the same key is the same text)."""
        if entries:
            self._execute("decision_history", _ENTRY_COLS, list(entries), " ON CONFLICT (ref) DO NOTHING")
        if rows:
            self._insert("decisions", _DECISION_COLS, rows)

    def _entries(self, db: Session, keys: set[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        ordered = sorted(keys)
        for start in range(0, len(ordered), _READ_CHUNK):
            chunk = ordered[start:start + _READ_CHUNK]
            q = select(HistoryEntryRow.ref, HistoryEntryRow.entry).where(HistoryEntryRow.ref.in_(chunk))
            found.update(db.execute(q).tuples().all())
        return found

    def _whole(self, db: Session, rows: list[dict]) -> list[dict]:
        """Rows with their history entries put back into `input.history` (see the module doc). An entry missing
        from `decision_history` is an error: a row replayed without its history could be decided otherwise."""
        keys = {ref[0] for row in rows for ref in (row.get("history") or ())}
        texts = self._entries(db, keys) if keys else {}
        parsed: dict[str, dict] = {}
        for row in rows:
            refs = row.pop("history", None)
            if refs is None:
                continue
            history = []
            for key, age in refs:
                if key not in texts:
                    raise LookupError(f"decision {row['id']}: history entry {key} is missing from decision_history")
                entry = parsed.get(key)
                if entry is None:
                    entry = parsed[key] = json.loads(texts[key])
                history.append({**entry, "age_s": age})
            row["input"] = {**row["input"], "history": history}
        return rows

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
            rows = [row_dict(r) for r in db.execute(q).scalars().all()]
            return self._whole(db, rows) if model is DecisionRow else rows

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
