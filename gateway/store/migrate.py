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
from pathlib import Path
from typing import Iterator

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

MIGRATIONS = Path(__file__).with_name("migrations")
LOCK_KEY = 0x53414E44_47415445 & 0x7FFFFFFFFFFFFFFF      # "SANDGATE", a signed bigint


def alembic_config(conn: Connection | None = None) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if conn is not None:
        cfg.attributes["connection"] = conn
    return cfg


def head() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head() or ""


def current(conn: Connection) -> str | None:
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
    failed upgrade stays on PostgreSQL: one transaction)."""
    with _file_lock(engine), engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
        before = current(conn)
        command.upgrade(alembic_config(conn), target)
        return before, current(conn)
