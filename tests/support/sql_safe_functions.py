"""The shipped `data.sandgate.config.toolcall.sql_safe_functions`: PostgreSQL's built-in functions (pg_catalog)
whose every overload is immutable or stable (pg_proc.provolatile in ('i', 's')), read from a real server, and
EXTRA: volatile built-ins that change nothing but a sequence or return fresh values (random, gen_random_uuid,
clock_timestamp, nextval, ...), so `INSERT ... VALUES (nextval('s'), gen_random_uuid(), now())` stays a write
(a statement calling nextval is a write, never a read: gateway/toolcalls/sqlconst.py's SEQUENCE_WRITES).
Not pg_sleep, pg_sleep_for, pg_sleep_until: a sleep holds a connection (upstream and through the PostgreSQL
gateway) for as long as it asks, so it is not a safe read; a site that wants it lists it.

Regenerate: `.venv/bin/python -m tests.support.sql_safe_functions [DSN]` (default: the tests' server).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "policies/sandgate/config/toolcall/sql_safe_functions/data.json"
QUERY = """SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = 'pg_catalog' GROUP BY proname
           HAVING bool_and(provolatile IN ('i', 's')) ORDER BY proname"""
VOLATILE = """SELECT DISTINCT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'pg_catalog' AND provolatile = 'v'"""
EXTRA = ("random", "random_normal", "gen_random_uuid", "clock_timestamp", "timeofday", "nextval", "currval",
         "lastval")


def shipped() -> dict[str, bool]:
    return json.loads(DATA.read_text())


def generate(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        names = sorted({row[0] for row in conn.execute(QUERY).fetchall()} | set(EXTRA))
    DATA.write_text(json.dumps(dict.fromkeys(names, True), indent=0, sort_keys=True) + "\n")
    print(f"{len(names)} functions -> {DATA}")


if __name__ == "__main__":
    generate(sys.argv[1] if len(sys.argv) > 1 else "host=127.0.0.1 port=5432 dbname=test user=postgres")
