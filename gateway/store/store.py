"""The store: sessions, approvals and audit in SQL (SQLite by default, PostgreSQL for several replicas).

SQLAlchemy is synchronous, so every call runs on a small thread pool and is awaited: the event loop never
blocks on the database. SQLite gets one thread (one writer); PostgreSQL a few.
"""
from __future__ import annotations

import asyncio
import functools
import json
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar

from sqlalchemy import JSON, event, select, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

from gateway.store import migrate
from gateway.store.bulk import insert_statements, placeholder
from gateway.store.groupcommit import GroupCommit
from gateway.store.presence import Presence
from gateway.store.writer import PriorityWriter

from gateway.store import records, rowsql
from gateway.store.models import (ApprovalRow, AuditEventRow, RevocationRow, SessionPathRow, SessionRow,
                                  SessionStatsRow, row_dict)
from gateway.store.records import Approval, AuditEvent, Revocation, ToolCallRecord

T = TypeVar("T")

_SESSIONS, _APPROVALS, _EVENTS, _PATHS = (m.__table__ for m in (SessionRow, ApprovalRow, AuditEventRow,
                                                                  SessionPathRow))
_PATH_COLS = ("session", "path", "kind", "target", "content", "ts")
# A session's counters: the session_stats table's columns (gateway/sessions/spec.py names the same, STAT_KEYS).
STAT_KEYS = tuple(c.name for c in SessionStatsRow.__table__.columns if c.name != "session")
MAX_PATHS = 5000                     # distinct paths a session's tool-call memory keeps (callers pass their own)


class PathRows(list):
    """A session's path rows (oldest first), and whether some were left out (`truncated`: the session left more
    distinct paths than are kept, so a path missing here may still have been written or linked)."""

    def __init__(self, rows: Iterable[Mapping[str, Any]] = (), truncated: bool = False):
        super().__init__(rows)
        self.truncated = truncated


class StoreError(Exception):
    """The database is unreachable or refused the operation (callers fail closed)."""


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # pragma: no cover - trivial
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


class Store:
    def __init__(self, url: str):
        self.url = url
        self.engine = _make_engine(url)
        if url.startswith("sqlite"):
            # One writer thread; interactive writes go before queued batches of audit and decision-log rows.
            self._writer: PriorityWriter | None = PriorityWriter()
            self._pool: Executor = self._writer.interactive
            self._bulk_pool: Executor = self._writer.bulk
        else:
            self._writer = None
            self._pool = self._bulk_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sandgate-store")
        # Hot reads on their own threads, so that they never queue behind a batch of writes (SQLite in WAL
        # mode: one writer, readers beside it; PostgreSQL: its own connections).
        self._read_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sandgate-store-read")
        self._seq_known: set[str] = set()      # sessions whose audit_seqs row exists
        self._paths_commit = GroupCommit(self._write_paths,
                                         stopped=lambda: StoreError("store unavailable: shutting down"))
        self._decoded: dict[tuple, tuple] = {}       # (id, session, seq, request_id) -> (codes, detail)
        self._presence = Presence()
        self._sqlite = self.engine.dialect.name == "sqlite"
        self._alone = self._sqlite

    # -- plumbing -------------------------------------------------------------------------------
    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._on(self._pool, fn, *args)

    async def run_bulk(self, fn: Callable[..., T], *args: Any) -> T:
        """`run` for a batch nobody waits on (audit and decision-log rows): after the interactive writes."""
        return await self._on(self._bulk_pool, fn, *args)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """`run` for a read-only call on the readers' threads."""
        return await self._on(self._read_pool, fn, *args)

    async def _on(self, pool: Executor, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(pool, functools.partial(fn, *args))
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - any DB failure is a StoreError for callers
            if exc.__class__.__module__.startswith("sqlalchemy"):
                raise StoreError(f"store unavailable: {exc.__class__.__name__}") from exc
            raise

    def migrate(self) -> tuple[Optional[str], Optional[str]]:
        """Bring the schema to the newest revision (alembic, behind a lock; see migrate.py)."""
        return migrate.upgrade(self.engine)

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    def libpq_url(self) -> str:
        """The store's PostgreSQL URL for a plain psycopg connection (change notifications)."""
        return self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    # Hot reads and writes go through SQLAlchemy Core on the tables (no ORM identity map, no instances): a
    # tenth of the cost of a Session query per call.
    def _core_all(self, q: Any) -> list[dict]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def _core_one(self, q: Any) -> Optional[dict]:
        rows = self._core_all(q)
        return rows[0] if rows else None

    async def open(self) -> None:
        await self.run(self.migrate)

    def join_writers(self) -> bool:
        """A `serve` process that writes this store: other processes on the same SQLite file see it from now on
        (presence.py). Before the first write. Whether another process has the file open already."""
        database = self.engine.url.database
        if self._sqlite and database and database != ":memory:" and not database.startswith("file:"):
            self._presence.join(database)
        return not self.check_writers()

    def check_writers(self) -> bool:
        """Ask again whether this process is the store's only writer (a system call that gives up the GIL: a
        background task asks every PRESENCE_POLL_S, never a request)."""
        self._alone = self._sqlite and self._presence.alone()
        return self._alone

    def sole_writer(self) -> bool:
        """Whether this process is the store's only writer, as last asked: a SQLite file no other sandgate process
        has joined (never PostgreSQL, which replicas share)."""
        return self._alone

    def close(self) -> None:
        self._presence.close()
        self._read_pool.shutdown(wait=True)
        if self._writer is not None:
            self._writer.shutdown(wait=True)
        else:
            self._pool.shutdown(wait=True)
        self.engine.dispose()

    # -- sessions -------------------------------------------------------------------------------
    def _put_session(self, row: SessionRow) -> records.Session:
        with Session(self.engine) as db:
            db.add(row)
            db.commit()
            db.refresh(row)
            return records.Session.from_row(row_dict(row))

    async def put_session(self, row: SessionRow) -> records.Session:
        return await self.run(self._put_session, row)

    def _get_session(self, sid: str) -> Optional[records.Session]:
        row = self._core_one(select(_SESSIONS).where(_SESSIONS.c.id == sid))
        return None if row is None else records.Session.from_row(row)

    async def get_session(self, sid: str) -> Optional[records.Session]:
        return await self.run(self._get_session, sid)

    def _list_sessions(self) -> list[records.Session]:
        with Session(self.engine) as db:
            rows = db.execute(select(SessionRow).order_by(SessionRow.created_at)).scalars().all()
            return [records.Session.from_row(row_dict(r)) for r in rows]

    async def list_sessions(self) -> list[records.Session]:
        return await self.run(self._list_sessions)

    def _update_session(self, sid: str, values: dict) -> Optional[records.Session]:
        with Session(self.engine) as db:
            db.execute(update(SessionRow).where(SessionRow.id == sid).values(**values))
            db.commit()
            row = db.get(SessionRow, sid)
            return records.Session.from_row(row_dict(row)) if row else None

    async def update_session(self, sid: str, **values: Any) -> Optional[records.Session]:
        return await self.run(self._update_session, sid, {**values, "updated_at": time.time()})

    # -- session counters summed over replicas ------------------------------------------------------
    def _sync_stats(self, deltas: dict[str, dict[str, int]], read: list[str]) -> dict[str, dict[str, int]]:
        """Add this replica's counts (sessions in sorted order: no lock cycles between replicas), then read
        the totals of the sessions in `read`. Driver-level: it runs every second with every live session."""
        mark = placeholder(self.engine.dialect.paramstyle)
        cols = ", ".join(STAT_KEYS)
        upserts = list(insert_statements(
            "session_stats", ("session", *STAT_KEYS),
            [(sid, *(int(deltas[sid].get(k, 0)) for k in STAT_KEYS)) for sid in sorted(deltas)], mark,
            suffix=" ON CONFLICT (session) DO UPDATE SET "
                   + ", ".join(f"{k} = session_stats.{k} + excluded.{k}" for k in STAT_KEYS)))
        totals: dict[str, dict[str, int]] = {}

        def work(cur: Any) -> None:
            for sql, params in upserts:            # multi-row (bulk.py); sessions in sorted order still
                cur.execute(sql, params)
            for i in range(0, len(read), 500):
                chunk = read[i:i + 500]
                cur.execute(f"SELECT session, {cols} FROM session_stats WHERE session IN "
                            f"({', '.join([mark] * len(chunk))})", tuple(chunk))
                for row in cur.fetchall():
                    totals[row[0]] = {k: int(v) for k, v in zip(STAT_KEYS, row[1:])}
        self.driver(work, commit=True)
        return totals

    async def sync_stats(self, deltas: dict[str, dict[str, int]], read: list[str]) -> dict[str, dict[str, int]]:
        return await self.run(self._sync_stats, deltas, read)

    # -- approvals ------------------------------------------------------------------------------
    def _put_approval(self, row: ApprovalRow, also: Sequence[Any]) -> Approval:
        with Session(self.engine) as db:
            db.add(row)
            for statement in also:
                db.execute(statement)
            db.commit()
            db.refresh(row)
            return Approval.from_row(row_dict(row))

    async def put_approval(self, row: ApprovalRow, also: Sequence[Any] = ()) -> Approval:
        """Insert an approval; `also` (statements, e.g. its notification's outbox row) in the same transaction."""
        return await self.run(self._put_approval, row, also)

    def _get_approval(self, aid: str) -> Optional[Approval]:
        with Session(self.engine) as db:
            row = db.get(ApprovalRow, aid)
            return Approval.from_row(row_dict(row)) if row else None

    async def get_approval(self, aid: str) -> Optional[Approval]:
        return await self.run(self._get_approval, aid)

    _APPROVAL_COLS = tuple(c.name for c in _APPROVALS.columns)
    _APPROVAL_JSON = frozenset(c.name for c in _APPROVALS.columns if isinstance(c.type, JSON))

    def _list_approvals(self, status: Optional[str], session: Optional[str], kind: Optional[str],
                        binding: Optional[str], limit: int) -> list[Approval]:
        """Driver-level (every "ask" looks its binding up): through SQLAlchemy Core this cost 0.2-0.4 ms of
        CPU per lookup, most of it building and caching the statement."""
        mark = placeholder(self.engine.dialect.paramstyle)
        where, params = [], []
        for col, value in (("status", status), ("session", session), ("kind", kind), ("binding", binding)):
            if value:
                where.append(f"{col} = {mark}")
                params.append(value)
        cols = self._APPROVAL_COLS
        fetched = self.driver_rows(
            f"SELECT {', '.join(cols)} FROM approvals{' WHERE ' + ' AND '.join(where) if where else ''} "
            f"ORDER BY created_at, id LIMIT {int(limit)}", tuple(params))
        rows = []
        for values in fetched:
            row = dict(zip(cols, values))
            for col in self._APPROVAL_JSON:          # SQLite gives the JSON text; psycopg decodes json itself
                if isinstance(row[col], str):
                    row[col] = json.loads(row[col])
            rows.append(Approval.from_row(row))
        return rows

    async def list_approvals(self, status: Optional[str] = None, session: Optional[str] = None,
                             kind: Optional[str] = None, binding: Optional[str] = None,
                             limit: int = 1000) -> list[Approval]:
        return await self.read(self._list_approvals, status, session, kind, binding, limit)

    def _count_pending(self, session: str) -> int:
        mark = placeholder(self.engine.dialect.paramstyle)
        rows = self.driver_rows(f"SELECT COUNT(*) FROM approvals WHERE status = 'pending' AND session = {mark}",
                                 (session,))
        return int(rows[0][0]) if rows else 0

    async def count_pending(self, session: str) -> int:
        """How many approvals of `session` are pending (every replica's)."""
        return await self.read(self._count_pending, session)

    def _cas_approval(self, aid: str, expect_status: str, expect_version: Optional[int], values: dict,
                      also: Sequence[Any]) -> bool:
        q = update(ApprovalRow).where(ApprovalRow.id == aid, ApprovalRow.status == expect_status)
        if expect_version is not None:
            q = q.where(ApprovalRow.version == expect_version)
        q = q.values(version=ApprovalRow.version + 1, **values)
        with Session(self.engine) as db:
            result = db.execute(q)
            if result.rowcount == 1:
                for statement in also:
                    db.execute(statement)
            db.commit()
            return result.rowcount == 1

    async def cas_approval(self, aid: str, expect_status: str, values: dict,
                           expect_version: Optional[int] = None, also: Sequence[Any] = ()) -> bool:
        """Compare-and-set: change the row only if it is still in `expect_status` (and version); `also`
        (statements) runs in the same transaction when it does."""
        return await self.run(self._cas_approval, aid, expect_status, expect_version, values, also)

    def _mark_used(self, aid: str, now: float) -> bool:
        q = (update(ApprovalRow)
             .where(ApprovalRow.id == aid, ApprovalRow.status == "approved", ApprovalRow.used_at.is_(None))
             .values(used_at=now, version=ApprovalRow.version + 1))
        with Session(self.engine) as db:
            result = db.execute(q)
            db.commit()
            return result.rowcount == 1

    async def mark_used(self, aid: str, now: Optional[float] = None) -> bool:
        return await self.run(self._mark_used, aid, time.time() if now is None else now)

    # -- token revocations ----------------------------------------------------------------------
    def _revoke(self, jti: str, by: str, now: float) -> Revocation:
        with Session(self.engine) as db:
            existing = db.execute(select(RevocationRow).where(RevocationRow.jti == jti)).scalars().first()
            if existing is not None:
                return Revocation.from_row(row_dict(existing))
            row = RevocationRow(jti=jti, revoked_at=now, revoked_by=by)
            db.add(row)
            try:
                db.commit()
            except Exception:  # noqa: BLE001 - another replica revoked the same jti first
                db.rollback()
                existing = db.execute(select(RevocationRow).where(RevocationRow.jti == jti)).scalars().first()
                if existing is None:
                    raise
                return Revocation.from_row(row_dict(existing))
            db.refresh(row)
            return Revocation.from_row(row_dict(row))

    async def revoke(self, jti: str, by: str, now: Optional[float] = None) -> Revocation:
        """Record a revoked token id (idempotent: revoking twice returns the first record)."""
        return await self.run(self._revoke, jti, by, time.time() if now is None else now)

    def _list_revocations(self, after_id: int) -> list[Revocation]:
        q = select(RevocationRow).where(RevocationRow.id > after_id).order_by(RevocationRow.id)
        with Session(self.engine) as db:
            return [Revocation.from_row(row_dict(r)) for r in db.execute(q).scalars().all()]

    async def list_revocations(self, after_id: int = 0) -> list[Revocation]:
        return await self.run(self._list_revocations, after_id)

    # -- audit ----------------------------------------------------------------------------------
    _EVENT_COLS = rowsql.EVENT_COLS
    _JSON_COLS = frozenset({"reasons", "codes", "detail"})

    def _append_events(self, rows: list[dict]) -> None:
        """One transaction per batch: the chain head locked, sequence numbers taken, the rows chained and
        inserted (rowsql.append_events: the writer process runs the same)."""
        mark = placeholder(self.engine.dialect.paramstyle)
        written = self.driver(lambda cur: rowsql.append_events(cur, mark, rows, self._seq_known), commit=True)
        self._seq_known.update(written)

    async def append_events(self, rows: list[dict]) -> None:
        if rows:
            await self.run_bulk(self._append_events, rows)

    _EVENT_READ_COLS = ("id",) + _EVENT_COLS

    def _list_events(self, session: Optional[str], kind: Optional[str], limit: int,
                     newest: bool, after_seq: Optional[int] = None) -> list[AuditEvent]:
        """Driver-level SELECT (this runs for every tool call: the session's recent history)."""
        mark = placeholder(self.engine.dialect.paramstyle)
        where, params = [], []
        if session:
            where.append(f"session = {mark}")
            params.append(session)
        if after_seq is not None:
            where.append(f"seq > {mark}")
            params.append(after_seq)
        if kind:
            where.append(f"kind = {mark}")
            params.append(kind)
        # Within a session, seq is the order (and the index): ordering by id would sort every row of the session.
        order = "seq" if session else "id"
        sql = (f"SELECT {', '.join(self._EVENT_READ_COLS)} FROM events"
               + (f" WHERE {' AND '.join(where)}" if where else "")
               + f" ORDER BY {order}{' DESC' if newest else ''} LIMIT {int(limit)}")
        with self.engine.connect() as conn:
            fetched = conn.exec_driver_sql(sql, tuple(params)).fetchall()
        rows = []
        for values in fetched:
            row = dict(zip(self._EVENT_READ_COLS, values))
            for col in self._JSON_COLS:
                if isinstance(row[col], str):
                    row[col] = json.loads(row[col])
            rows.append(AuditEvent.from_row(row))
        return list(reversed(rows)) if newest else rows

    async def list_events(self, session: Optional[str] = None, kind: Optional[str] = None,
                          limit: int = 10000, newest: bool = False, after_seq: Optional[int] = None) -> list[AuditEvent]:
        """Events in order; `after_seq` (with `session`) keeps only those past that sequence number."""
        return await self.run(self._list_events, session, kind, limit, newest, after_seq)


    # -- session paths (links and files left by tool calls) -----------------------------------------
    def _append_session_paths(self, rows: list[dict]) -> None:
        self._driver_write("session_paths", _PATH_COLS, [tuple(row.get(c) for c in _PATH_COLS) for row in rows])

    async def append_session_paths(self, rows: list[dict]) -> None:
        """Returns once the rows are committed. Concurrent callers' rows share one transaction
        (groupcommit.py): one writer, and every tool call that writes a file leaves a row."""
        if rows:
            await self._paths_commit.add(rows)

    async def _write_paths(self, rows: list[dict]) -> None:
        await self.run(self._append_session_paths, rows)

    def _list_session_paths(self, session: str, limit: int) -> list[dict]:
        mark = placeholder(self.engine.dialect.paramstyle)
        cols = ("id",) + _PATH_COLS
        sql = (f"SELECT {', '.join(cols)} FROM session_paths WHERE session = {mark} ORDER BY id DESC "
               f"LIMIT {int(limit)}")
        with self.engine.connect() as conn:                 # driver-level: this runs for every tool call
            fetched = conn.exec_driver_sql(sql, (session,)).fetchall()
        return [dict(zip(cols, values)) for values in reversed(fetched)]

    _RECENT_COLS = ("id", "seq", "ts", "session", "step", "kind", "action", "codes", "request_id", "detail")

    def driver(self, work: Callable[[Any], T], commit: bool) -> T:
        """`work(cursor)` on a pooled DBAPI connection, nothing between it and the driver (hot paths only);
        with `commit`, in one transaction (rolled back on any error). The driver's errors are StoreErrors."""
        try:
            conn = self.engine.raw_connection()
            try:
                cur = conn.cursor()
                try:
                    result = work(cur)
                finally:
                    cur.close()
                if commit:
                    conn.commit()
                return result
            except BaseException:
                if commit:
                    conn.rollback()
                raise
            finally:
                conn.close()
        except self.engine.dialect.dbapi.Error as exc:       # the driver's own errors: the store is unavailable
            raise StoreError(f"store unavailable: {exc.__class__.__name__}") from exc

    def driver_rows(self, sql: str, params: tuple) -> list[tuple]:
        """A SELECT: the rows as the driver gives them."""
        def work(cur: Any) -> list[tuple]:
            cur.execute(sql, params)
            return cur.fetchall()
        return self.driver(work, commit=False)

    def _driver_write(self, table: str, cols: tuple[str, ...], rows: list[tuple]) -> None:
        """An INSERT of many rows in one transaction (multi-row statements: bulk.py)."""
        statements = list(insert_statements(table, cols, rows, placeholder(self.engine.dialect.paramstyle)))

        def work(cur: Any) -> None:
            for sql, params in statements:
                cur.execute(sql, params)
        self.driver(work, commit=True)

    def _toolcall_memory(self, session: str, events: int, paths: int,
                         max_paths: int = MAX_PATHS) -> tuple[list[ToolCallRecord], PathRows]:
        mark = placeholder(self.engine.dialect.paramstyle)
        # Tool calls' rows, and wire statements' `sql` rows that name their decision (history.in_history): a
        # prepared statement run again repeats its decision's id, so read further back until `events` distinct
        # decisions are found (or the session's rows end).
        limit = int(events)
        while True:
            fetched = self.driver_rows(
                f"SELECT {', '.join(self._RECENT_COLS)} FROM events WHERE session = {mark} AND (kind = {mark} OR "
                f"(kind = {mark} AND request_id <> {mark})) ORDER BY seq DESC LIMIT {limit}",
                (session, "toolcall", "sql", ""))
            if len(fetched) < limit or limit >= 64 * int(events) or \
                    len({values[8] for values in fetched}) >= int(events):
                break
            limit *= 4
        recent = []
        for values in reversed(fetched):
            row = dict(zip(self._RECENT_COLS, values))
            # Stored events never change: their JSON is decoded once (each call re-reads the last ones).
            key = (row["id"], row["session"], row["seq"], row["request_id"])
            decoded = self._decoded.get(key)
            if decoded is None:
                decoded = tuple(json.loads(v) if isinstance(v, str) else v for v in (row["codes"], row["detail"]))
                if len(self._decoded) >= 16384:
                    self._decoded.clear()
                self._decoded[key] = decoded
            row["codes"], row["detail"] = decoded
            recent.append(ToolCallRecord(**row))
        # Of the newest `paths` rows, the last one for each path, with its content: all that
        # history.paths_from_rows keeps of them (a later row for a path replaces the earlier ones), without
        # reading the replaced contents.
        cols = ("id",) + _PATH_COLS
        newest = self.driver_rows(
            f"SELECT {', '.join(cols)} FROM session_paths WHERE id IN (SELECT max(id) FROM (SELECT id, path "
            f"FROM session_paths WHERE session = {mark} ORDER BY id DESC LIMIT {int(paths)}) AS recent "
            f"GROUP BY path) ORDER BY id", (session,))
        # Every other path the session left (up to max_paths), its last row without content: a file written
        # before the window is still written (content not seen), a link made before it still followed.
        bare = tuple(c for c in cols if c != "content")
        every = self.driver_rows(
            f"SELECT {', '.join(bare)} FROM session_paths WHERE id IN (SELECT max(id) FROM session_paths WHERE "
            f"session = {mark} GROUP BY path) ORDER BY id DESC LIMIT {int(max_paths) + 1}", (session,))
        truncated = len(every) > max_paths
        kept = {values[2] for values in every[:max_paths]}
        seen = {values[2] for values in newest}
        older = [dict(zip(bare, values), content=None) for values in reversed(every[:max_paths])
                 if values[2] not in seen]
        return recent, PathRows(older + [dict(zip(cols, values)) for values in newest if values[2] in kept],
                                truncated)

    async def toolcall_memory(self, session: str, events: int, paths: int = 500,
                              max_paths: int = MAX_PATHS) -> tuple[list[ToolCallRecord], PathRows]:
        """A session's newest `events` tool-call events and its path rows (both oldest first), in one trip to the
        store's thread: a tool call needs both. The last row of each path the session left, the content only
        of those among the newest `paths` rows; `truncated` past `max_paths` distinct paths."""
        return await self.read(self._toolcall_memory, session, events, paths, max_paths)

    async def list_session_paths(self, session: str, limit: int = 500) -> list[dict]:
        """The session's newest `limit` path rows, oldest first."""
        return await self.run(self._list_session_paths, session, limit)
