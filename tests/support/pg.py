"""The PostgreSQL the tests use: this machine's server at 127.0.0.1:5432 (trust auth), database `test`.

`SANDGATE_TEST_PG_DB` names another database on that server (parallel checkouts each use their own).
"""
from __future__ import annotations

import os

PG_DB = os.environ.get("SANDGATE_TEST_PG_DB", "test")
PG_URL = f"postgresql+psycopg://postgres@127.0.0.1:5432/{PG_DB}"
PG_DSN = f"host=127.0.0.1 port=5432 dbname={PG_DB} user=postgres"


def pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            return True
    except Exception:  # noqa: BLE001 - any failure means "not here"
        return False
