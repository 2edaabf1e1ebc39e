"""Schema migrations: alembic revisions shipped in the package (gateway/store/migrations).

`upgrade(engine)` brings a store to the newest revision. It runs at every `sandgate serve` start and as
`sandgate db upgrade`, behind a lock so two replicas starting together never race: a PostgreSQL transaction-level
advisory lock (the whole upgrade is one transaction: DDL is transactional there), a file lock beside a SQLite
file. A store written by wave 1 (tables, no `alembic_version`) upgrades from the baseline revision, which leaves
the tables it finds (see migrations/versions/0001_wave1.py).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

MIGRATIONS = Path(__file__).with_name("migrations")
LOCK_KEY = 0x53414E44_47415445 & 0x7FFFFFFFFFFFFFFF      # "SANDGATE", a signed bigint
_REVISION_LINE = re.compile(r"^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(.*?)\s*$", re.M)


def alembic_config(conn: Connection | None = None) -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if conn is not None:
        cfg.attributes["connection"] = conn
    return cfg


def head() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head() or ""


@functools.cache
def newest() -> str | None:
    """`head()` read from the revision files' `revision = "..."` and `down_revision = "..."` lines, without
    loading alembic (whose import costs more than the rest of a start that finds the schema up to date); None
    unless they name exactly one revision that none revises (tests/gateway/store/test_migrations.py checks
    that it is alembic's head)."""
    revisions, revised = set(), set()
    for path in (MIGRATIONS / "versions").glob("[0-9]*.py"):
        lines = dict(_REVISION_LINE.findall(path.read_text(encoding="utf-8")))
        if "revision" not in lines or "down_revision" not in lines:
            return None
        revisions.add(lines["revision"].strip("\"'"))
        revised.add(lines["down_revision"].strip("\"'"))
    heads = revisions - revised
    return next(iter(heads)) if len(heads) == 1 else None


def stamped(conn: Connection) -> str | None:
    """The store's revision as alembic stamps it (its one-row table), read with plain SQL; None when unstamped
    or when the table holds other than one row (left to alembic)."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    return rows[0][0] if len(rows) == 1 else None


def current(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


@contextlib.contextmanager
def _file_lock(engine: Engine) -> Iterator[None]:
    db = engine.url.database
    if engine.dialect.name != "sqlite" or not db or db == ":memory:":
        yield
        return
    with open(f"{db}.migrate.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def upgrade(engine: Engine, target: str = "head") -> tuple[str | None, str | None]:
    """Upgrade the store to `target`; (revision before, revision after). Raises on any failure (nothing of a
    failed upgrade stays on PostgreSQL: one transaction). A store already at the newest revision is answered
    from one read, without alembic (revisions only go forward: nothing is left to do whoever else upgrades)."""
    if target == "head" and (revision := newest()) is not None:
        with engine.connect() as conn:
            if stamped(conn) == revision:
                return revision, revision
    from alembic import command

    with _file_lock(engine), engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
        before = current(conn)
        command.upgrade(alembic_config(conn), target)
        return before, current(conn)
