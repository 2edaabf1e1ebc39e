"""alembic migrations on real SQLite and PostgreSQL: a wave-1 store with data in it upgrades in place, a fresh
store matches the models exactly, two replicas upgrading at once do not race, and `sandgate db upgrade`."""
from __future__ import annotations

import subprocess
import sys
import threading
import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlmodel import SQLModel

from gateway.store import Store, migrate
from tests.conftest import need
from tests.support.pg import PG_URL, pg_available

# The tables wave 1 created on open (SQLModel create_all at commit 5334889), as each database spelled them.
WAVE1_DDL = {
    "sqlite": """
CREATE TABLE sessions (id VARCHAR NOT NULL, workload VARCHAR NOT NULL, labels JSON NOT NULL, allow JSON NOT NULL,
  secrets JSON NOT NULL, placeholders JSON NOT NULL, workspace VARCHAR NOT NULL, ca_path VARCHAR NOT NULL,
  frozen BOOLEAN NOT NULL, created_at FLOAT NOT NULL, expires_at FLOAT NOT NULL, deleted_at FLOAT,
  created_by VARCHAR NOT NULL, updated_at FLOAT NOT NULL, PRIMARY KEY (id));
CREATE TABLE approvals (id VARCHAR NOT NULL, session VARCHAR NOT NULL, kind VARCHAR NOT NULL, status VARCHAR NOT NULL,
  binding VARCHAR NOT NULL, summary VARCHAR NOT NULL, action JSON NOT NULL, reasons JSON NOT NULL,
  created_at FLOAT NOT NULL, expires_at FLOAT NOT NULL, decided_at FLOAT, decided_by VARCHAR, reason VARCHAR,
  votes JSON NOT NULL, quorum INTEGER NOT NULL, used_at FLOAT, requested_by VARCHAR NOT NULL,
  version INTEGER NOT NULL, PRIMARY KEY (id));
CREATE INDEX ix_approvals_binding ON approvals (binding);
CREATE INDEX ix_approvals_session ON approvals (session);
CREATE INDEX ix_approvals_status ON approvals (status);
CREATE TABLE events (id INTEGER NOT NULL, seq INTEGER NOT NULL, ts FLOAT NOT NULL, session VARCHAR, step INTEGER,
  kind VARCHAR NOT NULL, action VARCHAR NOT NULL, reasons JSON NOT NULL, codes JSON NOT NULL, request_id VARCHAR,
  method VARCHAR, host VARCHAR, path VARCHAR, http_status INTEGER, bytes_in INTEGER, bytes_out INTEGER,
  policy_rev VARCHAR, detail JSON NOT NULL, PRIMARY KEY (id));
CREATE INDEX ix_events_session_seq ON events (session, seq);
""",
    "postgresql": """
CREATE TABLE sessions (id VARCHAR NOT NULL, workload VARCHAR NOT NULL, labels JSON NOT NULL, allow JSON NOT NULL,
  secrets JSON NOT NULL, placeholders JSON NOT NULL, workspace VARCHAR NOT NULL, ca_path VARCHAR NOT NULL,
  frozen BOOLEAN NOT NULL, created_at FLOAT NOT NULL, expires_at FLOAT NOT NULL, deleted_at FLOAT,
  created_by VARCHAR NOT NULL, updated_at FLOAT NOT NULL, PRIMARY KEY (id));
CREATE TABLE approvals (id VARCHAR NOT NULL, session VARCHAR NOT NULL, kind VARCHAR NOT NULL, status VARCHAR NOT NULL,
  binding VARCHAR NOT NULL, summary VARCHAR NOT NULL, action JSON NOT NULL, reasons JSON NOT NULL,
  created_at FLOAT NOT NULL, expires_at FLOAT NOT NULL, decided_at FLOAT, decided_by VARCHAR, reason VARCHAR,
  votes JSON NOT NULL, quorum INTEGER NOT NULL, used_at FLOAT, requested_by VARCHAR NOT NULL,
  version INTEGER NOT NULL, PRIMARY KEY (id));
CREATE INDEX ix_approvals_binding ON approvals (binding);
CREATE INDEX ix_approvals_session ON approvals (session);
CREATE INDEX ix_approvals_status ON approvals (status);
CREATE TABLE events (id SERIAL NOT NULL, seq INTEGER NOT NULL, ts FLOAT NOT NULL, session VARCHAR, step INTEGER,
  kind VARCHAR NOT NULL, action VARCHAR NOT NULL, reasons JSON NOT NULL, codes JSON NOT NULL, request_id VARCHAR,
  method VARCHAR, host VARCHAR, path VARCHAR, http_status INTEGER, bytes_in INTEGER, bytes_out INTEGER,
  policy_rev VARCHAR, detail JSON NOT NULL, PRIMARY KEY (id));
CREATE INDEX ix_events_session_seq ON events (session, seq);
""",
}

WAVE1_ROWS = """
INSERT INTO sessions VALUES ('s_old', 'persistent', '{"team": "a"}', '["pypi.org"]', '["github"]',
  '{"github": "SANDGATE_PH_x"}', '/workspace', '/etc/sandgate/ca.pem', false, 1.0, 9999999999.0, NULL, 'harness:h', 2.0);
INSERT INTO approvals VALUES ('a_old', 's_old', 'toolcall', 'pending', 'b1', 'deploy prod', '{"tool": "deploy"}',
  '["asks"]', 1.0, 9999999999.0, NULL, NULL, NULL, '[]', 1, NULL, 'harness:h', 0);
INSERT INTO events (seq, ts, session, kind, action, reasons, codes, detail) VALUES
  (1, 1.0, 's_old', 'session.created', 'create', '[]', '[]', '{}'),
  (2, 2.0, 's_old', 'egress', 'allow', '["ok"]', '["c"]', '{"k": 1}'),
  (1, 3.0, NULL, 'token.revoked', 'revoke', '[]', '[]', '{}');
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request, tmp_path):
    """The URL of an empty store: a SQLite file, or a fresh PostgreSQL schema (dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sandgate.db'}"
        return
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    schema = "mig_" + uuid.uuid4().hex[:10]
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def run_script(url: str, script: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for stmt in filter(str.strip, script.split(";")):
            conn.exec_driver_sql(stmt)
    engine.dispose()


async def test_upgrade_from_wave1_schema_keeps_its_data(empty_url):
    dialect = "sqlite" if empty_url.startswith("sqlite") else "postgresql"
    run_script(empty_url, WAVE1_DDL[dialect] + WAVE1_ROWS)
    store = Store(empty_url)
    await store.open()
    try:
        tables = set(inspect(store.engine).get_table_names())
        assert {"alembic_version", "revocations", "session_paths", "decisions", "policy_divergences",
                "audit_seqs"} <= tables
        with store.engine.connect() as conn:
            assert migrate.current(conn) == migrate.head()
        row = await store.get_session("s_old")
        assert row["labels"] == {"team": "a"} and row["placeholders"] == {"github": "SANDGATE_PH_x"}
        assert row["updated_at"] == 2.0 and row["workload"] == "persistent"
        assert (await store.get_approval("a_old"))["action"] == {"tool": "deploy"}
        # the old trails continue where they stopped: no second seq 3 for s_old, no second 2 for no session
        await store.append_events([{"session": "s_old", "kind": "egress", "action": "", "ts": 4.0, "reasons": [], "codes": [],
                                    "detail": {}}, {"session": None, "kind": "x", "action": "", "ts": 4.0, "reasons": [],
                                                    "codes": [], "detail": {}}])
        old = await store.list_events(session="s_old")
        assert [e["seq"] for e in old] == [1, 2, 3] and old[1]["detail"] == {"k": 1}
        # the new tables work
        await store.revoke("jti-1", "admin:root")
        assert [r["jti"] for r in await store.list_revocations()] == ["jti-1"]
        await store.append_session_paths([{"session": "s_old", "path": "/w/x", "kind": "file", "target": None,
                                           "content": "x", "ts": 1.0}])
        assert (await store.list_session_paths("s_old"))[0]["content"] == "x"
    finally:
        store.close()
    # opening again (every serve start) changes nothing
    again = Store(empty_url)
    await again.open()
    assert [e["seq"] for e in await again.list_events(session="s_old")] == [1, 2, 3]
    again.close()


def test_a_fresh_store_matches_the_models(empty_url):
    """A model changed without a migration fails here: add a revision under gateway/store/migrations/versions."""
    engine = create_engine(empty_url)
    assert migrate.upgrade(engine) == (None, migrate.head())
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    engine.dispose()
    assert diff == []


def test_the_newest_revision_read_from_the_files_is_alembics_head():
    """upgrade() answers a store already at migrate.newest() without loading alembic: it must be the head."""
    assert migrate.newest() == migrate.head() != ""


def test_replicas_upgrading_at_once_do_not_race(empty_url):
    results, errors = [], []

    def one():
        engine = create_engine(empty_url)
        try:
            results.append(migrate.upgrade(engine))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            engine.dispose()
    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    head = migrate.head()
    assert sorted(results, key=str) == sorted([(None, head)] + [(head, head)] * 3, key=str)


def test_db_upgrade_command(tmp_path):
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "gateway", "db", "upgrade", "--data-dir", str(data)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"sandgate: store upgraded from revision none to {migrate.head()}"
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert second.stdout.strip() == f"sandgate: store already at revision {migrate.head()}"
    current = subprocess.run([sys.executable, "-m", "gateway", "db", "current", "--data-dir", str(data)],
                             capture_output=True, text=True, timeout=60)
    assert current.stdout.strip() == f"store revision {migrate.head()} (newest {migrate.head()})"
    bad = subprocess.run([sys.executable, "-m", "gateway", "db", "upgrade", "--data-dir", str(data)],
                         capture_output=True, text=True, timeout=60,
                         env={"SANDGATE_STORE__URL": "postgresql+psycopg://nobody:secretpw@127.0.0.1:1/x",
                              "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "secretpw" not in bad.stderr
    assert bad.stderr.startswith("sandgate: db upgrade failed: ")
