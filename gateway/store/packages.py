"""The package firewall's tables: malicious-package entries, site exceptions, and the revision that orders them.

Every write (a `packages load`, a `packages allow`) takes the next revision from `package_revisions` in its own
transaction (a row lock on PostgreSQL, the write lock on SQLite: loads never interleave) and stamps its rows with
it. A replica asks for the revision about once a second and reads only the rows past the one it has: a load of
200k records reaches every replica without a restart, and an unchanged store costs one tiny SELECT.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

from sqlalchemy import BigInteger, Column, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from gateway.store.bulk import insert_statements, placeholder
from gateway.store.store import Store


class PackageAdvisoryRow(SQLModel, table=True):
    __tablename__ = "package_advisories"
    __table_args__ = (UniqueConstraint("advisory", "ecosystem", "name", name="uq_package_advisories"),
                      Index("ix_package_advisories_rev", "rev"))
    id: Optional[int] = Field(default=None, primary_key=True)
    advisory: str
    ecosystem: str
    name: str
    affected: str = Field(sa_column=Column(Text, nullable=False))
    summary: str = ""
    modified: str = ""
    withdrawn: bool = False
    rev: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class PackageExceptionRow(SQLModel, table=True):
    __tablename__ = "package_exceptions"
    __table_args__ = (UniqueConstraint("ecosystem", "name", "version", name="uq_package_exceptions"),
                      Index("ix_package_exceptions_rev", "rev"))
    id: Optional[int] = Field(default=None, primary_key=True)
    ecosystem: str
    name: str
    version: str
    reason: str = ""
    added_by: str = ""
    added_at: float = 0.0
    removed: bool = False
    rev: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class PackageRevisionRow(SQLModel, table=True):
    """One row (id 1): the last revision given out."""
    __tablename__ = "package_revisions"
    id: int = Field(primary_key=True)
    rev: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


EntryTuple = tuple[str, str, str, str, str, str, bool]   # advisory, ecosystem, name, affected, summary, modified,
#                                                         withdrawn (gateway.packages.osv.Entry's fields)
_ADVISORY_COLS = ("advisory", "ecosystem", "name", "affected", "summary", "modified", "withdrawn", "rev")
_EXCEPTION_COLS = ("ecosystem", "name", "version", "reason", "added_by", "added_at", "removed", "rev")


class PackageStore:
    """Writes and incremental reads of the package tables, on the Store's threads."""

    def __init__(self, store: Store):
        self.store = store

    def _next_rev(self, cur: Any) -> int:
        cur.execute("UPDATE package_revisions SET rev = rev + 1 WHERE id = 1")
        cur.execute("SELECT rev FROM package_revisions WHERE id = 1")
        return int(cur.fetchone()[0])

    def put_entries_sync(self, entries: Iterable[EntryTuple]) -> tuple[int, int]:
        """Upsert entries, each (advisory, ecosystem, name, affected, summary, modified, withdrawn) (a later load of
        the same advisory and package replaces it); (revision, rows)."""
        rows = list({e[:3]: e for e in entries}.values())
        mark = placeholder(self.store.engine.dialect.paramstyle)
        suffix = (" ON CONFLICT (advisory, ecosystem, name) DO UPDATE SET affected = excluded.affected, "
                  "summary = excluded.summary, modified = excluded.modified, withdrawn = excluded.withdrawn, "
                  "rev = excluded.rev")

        def work(cur: Any) -> int:
            rev = self._next_rev(cur)
            values = [(*e, rev) for e in rows]
            for sql, params in insert_statements("package_advisories", _ADVISORY_COLS, values, mark, max_rows=500,
                                                 max_params=4000 if mark == "?" else 32000, suffix=suffix):
                cur.execute(sql, params)
            return rev
        return self.store.driver(work, commit=True), len(rows)

    def put_exception_sync(self, ecosystem: str, name: str, version: str, reason: str, by: str, now: float,
                           removed: bool = False) -> int:
        mark = placeholder(self.store.engine.dialect.paramstyle)
        suffix = (" ON CONFLICT (ecosystem, name, version) DO UPDATE SET reason = excluded.reason, "
                  "added_by = excluded.added_by, added_at = excluded.added_at, removed = excluded.removed, "
                  "rev = excluded.rev")

        def work(cur: Any) -> int:
            rev = self._next_rev(cur)
            for sql, params in insert_statements("package_exceptions", _EXCEPTION_COLS,
                                                 [(ecosystem, name, version, reason, by, now, removed, rev)], mark,
                                                 suffix=suffix):
                cur.execute(sql, params)
            return rev
        return self.store.driver(work, commit=True)

    def revision_sync(self) -> int:
        rows = self.store.driver_rows("SELECT rev FROM package_revisions WHERE id = 1", ())
        return int(rows[0][0]) if rows else 0

    def changes_sync(self, after: int) -> tuple[int, list[EntryTuple], list[tuple[str, str, str, bool]]]:
        """(revision, entries, exceptions) written after revision `after`, read in one transaction."""
        mark = placeholder(self.store.engine.dialect.paramstyle)

        def work(cur: Any) -> tuple[int, list[EntryTuple], list[tuple[str, str, str, bool]]]:
            cur.execute("SELECT rev FROM package_revisions WHERE id = 1")
            row = cur.fetchone()
            rev = int(row[0]) if row else 0
            if rev <= after:
                return rev, [], []
            cur.execute(f"SELECT advisory, ecosystem, name, affected, summary, modified, withdrawn FROM "
                        f"package_advisories WHERE rev > {mark} AND rev <= {mark} ORDER BY rev, id", (after, rev))
            entries = [(a, e, n, aff, s or "", m or "", bool(w)) for a, e, n, aff, s, m, w in cur.fetchall()]
            cur.execute(f"SELECT ecosystem, name, version, removed FROM package_exceptions WHERE rev > {mark} AND "
                        f"rev <= {mark} ORDER BY rev, id", (after, rev))
            exceptions = [(e, n, v, bool(r)) for e, n, v, r in cur.fetchall()]
            return rev, entries, exceptions
        # A read that must see one revision whole: a transaction (committed only to end it).
        return self.store.driver(work, commit=True)

    async def revision(self) -> int:
        return await self.store.read(self.revision_sync)

    async def changes(self, after: int) -> tuple[int, list[EntryTuple], list[tuple[str, str, str, bool]]]:
        return await self.store.read(self.changes_sync, after)
