"""The SQL tables are data a site extends (`sql_safe_functions`, `sql_safe_settings`), and the shipped function
table holds only what a real PostgreSQL marks immutable or stable (and the few harmless volatile ones listed)."""
from __future__ import annotations

import json
import shutil

from gateway.policy.evaluator import Evaluator
from gateway.policy.loader import load_policy_dir
from tests.gateway.toolcalls import corpus
from tests.gateway.toolcalls.corpus import SessionSim
from tests.support import sql_safe_functions as table


def _decide(ev, query: str) -> dict:
    return SessionSim(ev).call("sql", {"query": query})


def test_a_site_extends_the_tables(tmp_path):
    pol = tmp_path / "policies"
    shutil.copytree(corpus.POLICY_DIR, pol)
    shipped = Evaluator(load_policy_dir(pol))
    assert _decide(shipped, "SELECT app.score(id) FROM users WHERE id = 1")["codes"] == ["toolcall.sql_function"]
    assert _decide(shipped, "SET app.tenant = 'acme'")["codes"] == ["toolcall.sql_setting"]
    data = pol / "sandgate/config/toolcall/data.json"
    doc = json.loads(data.read_text())
    doc["sql_safe_functions"] = {"app.score": True}             # merged with the shipped table
    doc["sql_safe_settings"] = {"app.tenant": True}
    data.write_text(json.dumps(doc))
    site = Evaluator(load_policy_dir(pol))
    assert _decide(site, "SELECT app.score(id) FROM users WHERE id = 1")["action"] == "allow"
    assert _decide(site, "SET app.tenant = 'acme'")["action"] == "allow"
    assert _decide(site, "SELECT lower(email) FROM users WHERE id = 1")["action"] == "allow"    # shipped kept
    assert _decide(site, "SELECT pg_terminate_backend(1)")["action"] == "ask"


def test_reasons_name_what_is_not_known():
    ev = corpus.evaluator()
    got = _decide(ev, "SELECT dblink_exec('x', 'DROP TABLE t')")
    assert got["codes"] == ["toolcall.sql_function"] and "dblink_exec" in got["reasons"][0]
    got = _decide(ev, "ALTER TABLE users RENAME TO old")
    assert "toolcall.sql_unknown" in got["codes"] and any("ALTER ... RENAME" in r for r in got["reasons"])
    got = _decide(ev, "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE")
    assert "toolcall.delete" in got["codes"]


def test_shipped_functions_are_immutable_or_stable_on_a_real_server():
    import psycopg                                       # a test dependency

    from tests.conftest import need
    from tests.support.pg import PG_DSN, pg_available

    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    with psycopg.connect(PG_DSN, connect_timeout=3) as conn:
        volatile = {row[0] for row in conn.execute(table.VOLATILE).fetchall()}
        stable = {row[0] for row in conn.execute(table.QUERY).fetchall()}
    shipped = set(table.shipped())
    assert not (shipped & volatile) - set(table.EXTRA)
    assert len(stable - shipped) < 50          # a newer server adds a few; the table is regenerated from one
    for name in ("dblink_exec", "lo_unlink", "lo_import", "pg_terminate_backend", "pg_read_file", "query_to_xml",
                 "set_config", "pg_reload_conf", "ts_rewrite", "setval", "pg_sleep", "pg_sleep_for", "pg_sleep_until"):
        assert name not in shipped
