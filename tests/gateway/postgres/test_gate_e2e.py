"""Wire statements are decided by the tool-call gate in sandgate's own process, with `via = "postgres"`: the
policy sees the via, the decision's `toolcall` row says it, each statement has one `sql` row that names that
decision, and an approved `sql` tool call never lets the same statement through on the wire."""
from __future__ import annotations

import threading

import psycopg

from tests.gateway.postgres.conftest import db_session, decide, pending


def test_a_statement_is_decided_with_via_postgres_and_audited_once(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (10,)
        assert conn.execute("SELECT v FROM t WHERE id = 2").fetchone() == ("row2",)
    events = pg_gateway.events(sess["id"])
    calls = [e for e in events if e["kind"] == "toolcall"]
    sql = [e for e in events if e["kind"] == "sql"]
    assert {c["detail"]["via"] for c in calls} == {"postgres"}
    assert all(c["detail"]["tool"] == "sql" and c["detail"]["summary"].startswith("postgres sql: ") for c in calls)
    statements = [e["detail"]["statement"] for e in sql]
    assert statements.count("SELECT count(*) FROM t") == 1 and statements.count("SELECT v FROM t WHERE id = 2") == 1
    by_id = {c["request_id"]: c for c in calls}
    for row in sql:                    # each sql row names the gate decision that let it run
        if row["detail"]["statement"].startswith("SELECT"):
            assert row["request_id"] in by_id and row["action"] == by_id[row["request_id"]]["action"] == "allow"


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
