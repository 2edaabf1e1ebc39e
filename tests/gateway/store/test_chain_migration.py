"""Migration 0006 on real SQLite and PostgreSQL: rows written before the chain existed are chained in id order and
sealed by a genesis checkpoint; new rows continue the chain; an edit of an old row is named by verify."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, text

from gateway.audit.verify import verify_trail
from gateway.store import Store, migrate
from gateway.store.trail import TrailStore
from tests.conftest import need
from tests.support.pg import PG_URL, pg_available

OLD_ROWS = """
INSERT INTO events (seq, ts, session, kind, action, reasons, codes, detail, step, host) VALUES
  (1, 1.0, 's_old', 'session.created', 'create', '[]', '[]', '{"by": "harness:h"}', NULL, NULL),
  (2, 2.5, 's_old', 'egress', 'allow', '["ok"]', '["c"]', '{"k": 1, "a": [1, 2]}', 3, 'example.com'),
  (1, 3.0, NULL, 'token.revoked', 'revoke', '[]', '[]', '{}', NULL, NULL)
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sandgate.db'}"
        return
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    schema = "chain_" + uuid.uuid4().hex[:10]
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


async def test_rows_before_the_chain_are_sealed_and_new_rows_continue_it(url):
    engine = create_engine(url)
    migrate.upgrade(engine, "0005")
    with engine.begin() as conn:
        conn.execute(text(OLD_ROWS))
    assert migrate.upgrade(engine) == ("0005", migrate.head())
    with engine.connect() as conn:
        chained = conn.execute(text("SELECT chain_n, hash FROM events ORDER BY id")).all()
        head = conn.execute(text("SELECT count, hash FROM audit_chain")).one()
        genesis = conn.execute(text("SELECT count, hash, kind, signature FROM audit_checkpoints")).all()
    assert [n for n, _ in chained] == [1, 2, 3] and all(len(h) == 64 for _, h in chained)
    assert tuple(head) == (3, chained[-1][1])
    assert [tuple(g) for g in genesis] == [(3, chained[-1][1], "genesis", "")]
    store = Store(url)
    await store.open()
    try:
        await store.append_events([{"session": "s_old", "kind": "egress", "action": "allow", "ts": 4.0,
                                    "reasons": [], "codes": [], "detail": {}}])
        trail = TrailStore(store)
        verdict = await store.read(verify_trail, trail, [])
        assert verdict.ok and verdict.checked == 4 and verdict.signed == 0, verdict
        with engine.begin() as conn:
            conn.execute(text("UPDATE events SET action = 'deny' WHERE seq = 2 AND session = 's_old'"))
        verdict = await store.read(verify_trail, trail, [])
        assert not verdict.ok and verdict.problem.startswith("row id 2 (session s_old, seq 2): edited")
    finally:
        store.close()
        engine.dispose()
