"""Wire statements are decided by the tool-call gate in sandgate's own process, with `via = "postgres"`: the
policy sees the via, each statement has one audit row, of kind `sql`, that names that decision and says what its
`toolcall` row would have (DESIGN v3: no `toolcall` row for a wire statement), and an approved `sql` tool call never
lets the same statement through on the wire."""
from __future__ import annotations

import json
import threading
import time

import psycopg

from tests.gateway.postgres.conftest import db_session, decide, pending


def test_a_statement_is_decided_with_via_postgres_and_audited_once(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (10,)
        assert conn.execute("SELECT v FROM t WHERE id = 2").fetchone() == ("row2",)
    events = pg_gateway.events(sess["id"])
    assert [e for e in events if e["kind"] == "toolcall"] == []       # one row per statement: its `sql` row
    sql = [e for e in events if e["kind"] == "sql"]
    statements = [e["detail"]["statement"] for e in sql]
    assert statements.count("SELECT count(*) FROM t") == 1 and statements.count("SELECT v FROM t WHERE id = 2") == 1
    for row in sql:                    # each sql row names the gate decision that let it run, and says it
        if row["detail"]["statement"].startswith("SELECT"):
            d = row["detail"]
            assert row["request_id"].startswith("t_") and d["toolcall_id"] == row["request_id"]
            assert (row["action"], d["decision"], d["via"], d["tool"]) == ("allow", "allow", "postgres", "sql")
            assert d["summary"] == "postgres sql: " + d["statement"]
    again = pg_gateway.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": "sql",
                                                           "args": {"query": "SELECT 1", "database": "prod"}})
    assert again.status_code == 200, again.text
    admin = pg_gateway.token("admin", "pg-history")
    # the decision log's writer stores the row within its flush interval (0.1 s): asked until it is there
    deadline = time.monotonic() + 30
    while not (logged := pg_gateway.call("GET", f"/v1/decisions?request_id={again.json()['id']}",
                                         token=admin).json())["decisions"] and time.monotonic() < deadline:
        time.sleep(0.05)
    doc = logged["decisions"][0]["input"]         # the wire statements are in the session's history and counts
    summaries = [h["summary"] for h in doc["history"]]
    assert "postgres sql: SELECT count(*) FROM t" in summaries and "postgres sql: SELECT v FROM t WHERE id = 2" in summaries
    assert doc["session"]["stats"]["toolcalls"] >= 3


def test_an_approved_sql_tool_call_does_not_let_the_wire_statement_through(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    body = {"session": sess["id"], "tool": "sql", "args": {"query": "DELETE FROM t", "database": "prod"}}
    first = pg_gateway.call("POST", "/v1/toolcalls", json=body).json()
    assert first["decision"] == "ask"
    decide(pg_gateway, first["approval_id"], "approve")       # approved for the tool call, not for the wire

    out: dict = {}

    def delete() -> None:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DELETE FROM t", prepare=False)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
    th = threading.Thread(target=delete, daemon=True)
    th.start()
    items = pending(pg_gateway, sess["id"])                   # the wire statement asks for an approval of its own
    assert len(items) == 1 and items[0]["id"] != first["approval_id"]
    assert items[0]["action"].get("via") == "postgres"
    assert cluster.count() == 10
    decide(pg_gateway, items[0]["id"], "deny")
    th.join(30)
    assert isinstance(out.get("error"), psycopg.errors.InsufficientPrivilege)
    assert cluster.count() == 10
    again = pg_gateway.call("POST", "/v1/toolcalls", json=body).json()    # the tool call's approval is still its own
    assert again["decision"] == "allow" and "approval.approved" in again["codes"]


def test_every_run_of_a_prepared_statement_counts_and_is_decided(pg_gateway, cluster):
    """A statement prepared once and run many times is many statements: each run joins the session's counts, so
    a tool-call budget spent by the earlier runs makes the next run ask (the Parse's decision covers one run)."""
    sess, url = db_session(pg_gateway)
    admin = pg_gateway.token("admin", "pg-prepared-budget")
    resp = pg_gateway.call("PATCH", f"/v1/sessions/{sess['id']}", json={"budgets": {"toolcalls": 4}}, token=admin)
    assert resp.status_code == 200, resp.text
    out: dict = {"ran": 0}

    def run() -> None:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                for _ in range(8):
                    assert conn.execute("SELECT v FROM t WHERE id = 2", prepare=True).fetchone() == ("row2",)
                    out["ran"] += 1
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
    th = threading.Thread(target=run, daemon=True)
    th.start()
    items = pending(pg_gateway, sess["id"])          # past the budget, a run of the prepared statement asks
    assert len(items) == 1 and "budget.exceeded" in json.dumps(items[0]), items
    assert out["ran"] <= 4
    decide(pg_gateway, items[0]["id"], "deny")
    th.join(30)
    assert isinstance(out.get("error"), psycopg.errors.InsufficientPrivilege), out
    stats = pg_gateway.call("GET", f"/v1/sessions/{sess['id']}", token=admin).json()["stats"]
    assert stats["toolcalls"] >= 5, stats
