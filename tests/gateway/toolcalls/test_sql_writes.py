"""SQL that changes or holds the database is not a read.

Before: `nextval` (advances a sequence) and `pg_sleep` (holds the connection, upstream and through the PostgreSQL
gateway, for as long as it asks) were in the shipped `sql_safe_functions`, so `SELECT nextval('s')` and
`SELECT pg_sleep(3600)` were reads (allowed in a frozen session, whose reads only run), and `setval` made no
write either; `pg_restore --clean` (DROP before each CREATE) was an ordinary write while `dropdb` and
`psql -c 'DROP ...'` asked. Now a statement calling nextval or setval is a write (in every dialect), pg_sleep is
a function the policy does not know (ask), and `pg_restore -c/--clean` asks as dropdb does.
Decided through the product's path: the facts sandgate builds and the shipped policy on the shipped engine.
"""
from __future__ import annotations

import pytest

from gateway.toolcalls.sql import describe_sql
from tests.gateway.toolcalls.corpus import SessionSim, evaluator


@pytest.fixture(scope="module")
def ev():
    return evaluator()


@pytest.mark.parametrize("query", [
    "SELECT nextval('orders_id_seq')",
    "SELECT pg_catalog.nextval('orders_id_seq')",
    "SELECT setval('orders_id_seq', 1)",
    "WITH n AS (SELECT nextval('s') AS id) SELECT id FROM n",
    "SELECT id FROM t WHERE id < nextval('s')",
])
@pytest.mark.parametrize("dialect", [None, "postgres", "mysql", "sqlite"])
def test_a_statement_calling_a_sequence_writer_is_a_write(query, dialect):
    facts = describe_sql(query, dialect)
    assert facts["parsed"] is True and facts["kind"] == "write", facts


@pytest.mark.parametrize("query", ["SELECT currval('s')", "SELECT lastval()", "SELECT now(), random()"])
def test_reading_a_sequence_stays_a_read(query):
    assert describe_sql(query)["kind"] == "read"


def test_nextval_is_a_write_the_policy_allows_but_a_frozen_session_asks(ev):
    sim = SessionSim(ev)
    assert sim.call("sql", {"query": "SELECT nextval('orders_id_seq')"})["action"] == "allow"
    assert sim.call("sql", {"query": "INSERT INTO orders VALUES (nextval('orders_id_seq'), 3)"})["action"] == "allow"
    frozen = sim.call("sql", {"query": "SELECT nextval('orders_id_seq')"}, frozen=True)
    assert frozen["action"] == "ask" and "toolcall.frozen" in frozen["codes"], frozen
    shell = sim.call("shell", {"command": "psql -c \"SELECT nextval('orders_id_seq')\""}, frozen=True)
    assert shell["action"] == "ask" and "toolcall.frozen" in shell["codes"], shell
    assert sim.call("sql", {"query": "SELECT currval('orders_id_seq')"}, frozen=True)["action"] == "allow"


def test_setval_asks(ev):
    got = SessionSim(ev).call("sql", {"query": "SELECT setval('orders_id_seq', 1)"})
    assert got["action"] == "ask" and got["codes"] == ["toolcall.sql_function"], got


@pytest.mark.parametrize("query", ["SELECT pg_sleep(3600)", "SELECT pg_sleep_for('1 hour')",
                                   "SELECT pg_sleep_until(now() + interval '1 hour')"])
def test_sleeping_is_not_a_safe_read(ev, query):
    got = SessionSim(ev).call("sql", {"query": query})
    assert got["action"] == "ask" and got["codes"] == ["toolcall.sql_function"], got


@pytest.mark.parametrize("command", [
    "pg_restore --clean -d app dump.tar",
    "pg_restore -c -d app dump.tar",
    "pg_restore -cd app dump.tar",
    "pg_restore --dbname=app --clean --if-exists dump.tar",
    "pg_restore -h db.internal -U app -d app -c -j 4 dump",
])
def test_pg_restore_clean_asks_like_dropdb(ev, command):
    got = SessionSim(ev).call("shell", {"command": command})
    assert got["action"] == "ask" and got["codes"] == ["toolcall.delete"], got
    assert SessionSim(ev).call("shell", {"command": "dropdb prod"})["codes"] == ["toolcall.delete"]
    assert SessionSim(ev).call("shell", {"command": "psql -c 'DROP TABLE users'"})["codes"] == ["toolcall.delete"]


def test_pg_restore_without_clean_stays_a_write(ev):
    assert SessionSim(ev).call("shell", {"command": "pg_restore -d app dump.tar"})["codes"] == ["toolcall.write"]
