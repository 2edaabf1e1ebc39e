"""The PostgreSQL the tests use: this machine's server at 127.0.0.1:5432 (trust auth).

Each test process gets a database of its own, created on first import from the server's `test` database and
dropped when the process exits, so a run never meets what an earlier run (or an interrupted one, or a parallel
checkout) left in `test`: a leftover table with an older `alembic_version` made every later start fail.
Databases of processes that are gone are dropped on the way. `SANDGATE_TEST_PG_DB` names a database to use
instead (it is then neither created nor dropped).
"""
from __future__ import annotations

import atexit
import os
import re
import secrets

_ADMIN_DSN = "host=127.0.0.1 port=5432 dbname=test user=postgres"
_PREFIX = "sandgate_t_"


def _drop(name: str) -> None:
    try:
        import psycopg

        with psycopg.connect(_ADMIN_DSN, connect_timeout=3, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except Exception:  # noqa: BLE001 - the server may be gone at exit; nothing to clean then
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _own_database() -> str:
    """A fresh database for this process, or `test` when one cannot be made (the tests then need the server
    to be reachable anyway, and skip or fail on pg_available())."""
    try:
        import psycopg

        name = f"{_PREFIX}{os.getpid()}_{secrets.token_hex(3)}"
        with psycopg.connect(_ADMIN_DSN, connect_timeout=3, autocommit=True) as conn:
            for (old,) in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                       (_PREFIX + "%",)).fetchall():
                m = re.fullmatch(rf"{_PREFIX}(\d+)_[0-9a-f]+", old)
                if m and not _alive(int(m.group(1))):
                    conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception:  # noqa: BLE001 - no server, or no right to create: fall back to `test`
        return "test"
    atexit.register(_drop, name)
    return name


PG_DB = os.environ.get("SANDGATE_TEST_PG_DB") or _own_database()
PG_URL = f"postgresql+psycopg://postgres@127.0.0.1:5432/{PG_DB}"
PG_DSN = f"host=127.0.0.1 port=5432 dbname={PG_DB} user=postgres"


def pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            return True
    except Exception:  # noqa: BLE001 - any failure means "not here"
        return False
