"""The facts of a wire statement are memoised by its shape only where no constant can change them: the simple
protocol's `WHERE aid = 1` and `WHERE aid = 2` share one facts object (the decision cache and the decision log
serialise it once), and a statement whose facts do depend on a constant (`WHERE 1=1` in a write, set_config's
name, COPY ... PROGRAM) always gets its own, exactly what the classifier says of it."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from gateway.approvals.rules import canonical_json
from gateway.gates.toolcall import ToolCallGate, wire_shape
from gateway.toolcalls.enrich import toolcall_base, toolcall_facts
from gateway.toolcalls.memo import FactsMemo

SESSION = {"id": "s1", "workload": "persistent", "created_at": 0.0, "labels": {}, "frozen": False,
           "allow": [], "workspace": "/workspace", "secrets": []}


def gate() -> ToolCallGate:
    engine = SimpleNamespace(rev="r1", data=None)      # the facts read only the revision and its tables
    return ToolCallGate(None, None, None, None, engine, FactsMemo())  # type: ignore[arg-type]


def facts_of(g: ToolCallGate, query: str, database: str = "prod") -> dict:
    args = {"query": query, "database": database}
    base = toolcall_base(session=SESSION, tool="sql", args=args, step=None, now=1.0)
    base["via"] = "postgres"
    facts, _ = asyncio.run(g._facts("s1", "sql", canonical_json(args), base, {}, {}, None, None))
    return facts


def fresh(query: str) -> dict:
    base = toolcall_base(session=SESSION, tool="sql", args={"query": query, "database": "prod"}, step=None, now=1.0)
    base["via"] = "postgres"
    return toolcall_facts(base, {}, {})[0]


def test_select_of_one_shape_shares_its_facts():
    g = gate()
    first = facts_of(g, "SELECT abalance FROM pgbench_accounts WHERE aid = 17;")
    second = facts_of(g, "SELECT abalance FROM pgbench_accounts WHERE aid = 99021;")
    assert second is first and second == fresh("SELECT abalance FROM pgbench_accounts WHERE aid = 99021;")
    quoted = facts_of(g, "SELECT v FROM t WHERE v = 'a'")
    assert facts_of(g, "SELECT v FROM t WHERE v = 'b'") is quoted        # a scanned shape too
    assert facts_of(g, "SELECT abalance FROM pgbench_accounts WHERE aid = 17;", "other") is not first


@pytest.mark.parametrize("first, second", [
    ("DELETE FROM t WHERE id = 1 OR 1 = 2", "DELETE FROM t WHERE id = 1 OR 1 = 1"),   # bounded, then not
    ("DELETE FROM t WHERE id = 1 OR 1 > 2", "DELETE FROM t WHERE id = 1 OR 2 > 1"),
    ("DELETE FROM t WHERE id = 1 OR 'a' = 'b'", "DELETE FROM t WHERE id = 1 OR 'a' = 'a'"),   # a scanned shape
    ("UPDATE t SET v = 1 WHERE id = 1 OR 1 = 2", "UPDATE t SET v = 1 WHERE id = 1 OR 1 = 1"),
    ("SELECT v FROM t WHERE 1=2", "SELECT v FROM t WHERE 1=1"),
    ("SELECT set_config('application_name', 'x', false)", "SELECT set_config('role', 'x', false)"),
    ("SELECT 'PROGRAM'", "SELECT 'COPY t TO PROGRAM ''rm -rf /'''"),
    ("COPY t TO PROGRAM 'true'", "COPY t TO PROGRAM 'rm -rf /'"),
    ("SELECT v FROM t WHERE v = E'a'", "SELECT v FROM t WHERE v = E'\\\\'"),
    ("SELECT lower('a') FROM t", "SELECT pg_sleep(1) FROM t"),
])
def test_facts_that_a_constant_changes_are_the_statements_own(first, second):
    g = gate()
    facts_of(g, first)
    assert facts_of(g, second) == fresh(second)
    if " OR " in first:
        assert fresh(second)["sql"]["unbounded"] and not fresh(first)["sql"]["unbounded"]   # the pair differs
    assert facts_of(g, first) == fresh(first)


def test_what_has_no_shape():
    assert wire_shape({"query": "SELECT 1 /* c */", "database": "prod"}) is None
    assert wire_shape({"query": "SELECT 'a\\'", "database": "prod"}) is None
    assert wire_shape({"query": "SELECT 1 FROM program", "database": "prod"}) is None
    assert wire_shape({"query": "SELECT 1", "database": "prod", "dialect": "mysql"}) is None
    assert wire_shape({"query": "SELECT 1", "database": "prod"}) != wire_shape({"query": "SELECT 1",
                                                                                  "database": "prod2"})
