"""The facts of read-only statements are kept by shape (gateway/toolcalls/sql.py ShapeMemo): statements that differ
only in constants share them, and only where no fact depends on a constant's value. Whatever the memo holds,
describe_sql answers exactly what the classifier answers for that very text."""
from __future__ import annotations

import itertools

import pytest

from gateway.toolcalls.sql import SHAPES, ShapeMemo, describe_sql
from gateway.toolcalls.sqlpg import classify_pg
from tests.gateway.toolcalls.test_corpus_benign import SQL_BENIGN
from tests.gateway.toolcalls.test_corpus_sql import SQL_DESTRUCTIVE

CONSTANTS = ["1", "2", "0", "-1", "1.5", "'a'", "'b'", "''", "'1'", "true", "false", "null", "x'ff'", "B'01'",
             "$$a$$", "E'z'", "'search_path'", "'application_name'", "'%'", "'a''b'", "12345678901", "1e5"]
# each `?` takes a constant: the first filling is kept, every later one must still get its own facts
TEMPLATES = [
    "SELECT abalance FROM pgbench_accounts WHERE aid = ?",
    "SELECT * FROM t WHERE ? = ?",
    "SELECT set_config(?, ?, false)",
    "SELECT pg_catalog.SET_CONFIG(?, ?, false)",
    'SELECT "set_config"(?, ?, ?)',
    'SELECT U&"\\0073et_config"(?, ?, false)',
    "SELECT U&\"!0073et_config\" UESCAPE '!' (?, ?, false)",
    "SELECT ?",
    "SELECT * FROM t LIMIT ?",
    "DELETE FROM t WHERE ? = ?",
    "DELETE FROM t WHERE id = ? OR ? = ?",
    "UPDATE t SET v = ? WHERE id = ? OR ?",
    "UPDATE t SET v = ? WHERE v LIKE ?",
    "INSERT INTO t SELECT * FROM t WHERE ? ON CONFLICT (id) DO UPDATE SET v = ?",
    "MERGE INTO t USING s ON ? = ? WHEN MATCHED THEN UPDATE SET v = ?",
    "SELECT 1; DELETE FROM t WHERE ? = ?",
    "WITH d AS (DELETE FROM t WHERE ? RETURNING *) SELECT * FROM d",
    "SELECT * FROM t WHERE id IN (?, ?) FOR UPDATE",
    "COPY (SELECT ?) TO STDOUT",
    "SET statement_timeout = ?",
    "EXPLAIN SELECT * FROM t WHERE id = ?",
]


def _fill(template: str, values: list[str]) -> str:
    out = template
    for v in values:
        out = out.replace("?", v, 1)
    return out


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_kept_shape_never_answers_for_another_texts_facts(template):
    """Every filling of every template, in turn (each one may find the memo warmed by the ones before): the
    facts are the classifier's own for that text."""
    for values in itertools.product(CONSTANTS, CONSTANTS, ("1", "''")):
        text = _fill(template, list(values))
        expected = classify_pg(text)
        got = describe_sql(text, "postgres")
        assert got == (expected or got), text
        if expected is not None and "\\" not in text:      # else read with sqlglot too (dialect not given)
            assert describe_sql(text) == got, text


@pytest.mark.parametrize("query", SQL_DESTRUCTIVE + SQL_BENIGN)
def test_the_corpus_reads_the_same_with_a_warm_memo(query):
    cold = classify_pg(query)
    describe_sql(query, "postgres")              # kept, if it may be
    assert describe_sql(query, "postgres") == (cold or describe_sql(query, "postgres"))


def test_only_constant_free_facts_are_kept():
    memo = ShapeMemo()
    kept = "SELECT abalance FROM pgbench_accounts WHERE aid = 7"
    for text in (kept, "SELECT set_config('search_path', 'x', false)", "DELETE FROM t WHERE id = 1",
                 "SELECT now()", "SELECT * FROM t FOR UPDATE", "EXPLAIN SELECT 1", "SELECT 1 /* c */",
                 "SELECT 'a\\' FROM t"):
        memo.put(memo.key(text), classify_pg(text))
    assert len(memo._items) == 1
    assert memo.get(memo.key("SELECT abalance FROM pgbench_accounts WHERE aid = 99")) == classify_pg(kept)
    assert memo.get(memo.key("SELECT abalance FROM pgbench_accounts WHERE bid = 99")) is None


def test_the_memo_is_bounded():
    memo = ShapeMemo(size=8)
    for i in range(50):
        text = f"SELECT c{i} FROM t WHERE id = 1"
        memo.put(memo.key(text), classify_pg(text))
    assert len(memo._items) == 8
    assert memo.key("SELECT 1 WHERE x = '" + "a" * ShapeMemo.MAX_TEXT + "'") is None


def test_pgbench_statements_are_one_shape():
    before = SHAPES.hits
    for aid in range(100):
        describe_sql(f"SELECT abalance FROM pgbench_accounts WHERE aid = {aid * 7919 % 100000};", "postgres")
    assert SHAPES.hits - before >= 99
    # plain text (words, integers, a few symbols) is keyed without a scan: only its short integers are blanked
    assert SHAPES.key("SELECT abalance FROM pgbench_accounts WHERE aid = 7;") == \
        SHAPES.key("SELECT abalance FROM pgbench_accounts WHERE aid = 123456789;")
    for other in ("SELECT abalance FROM pgbench_accounts WHERE aid = 1234567890;", "SELECT abalance FROM "
                  "pgbench_accounts WHERE aid = 7.5;", "SELECT abalance FROM pgbench_accounts WHERE aid = 7e1;",
                  "SELECT abalance FROM pgbench_accounts WHERE aid = a7;"):
        assert SHAPES.key(other) != SHAPES.key("SELECT abalance FROM pgbench_accounts WHERE aid = 7;"), other
