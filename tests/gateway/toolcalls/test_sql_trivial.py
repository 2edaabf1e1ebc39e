"""The trivially-true WHERE detector (PostgreSQL's grammar, gateway/toolcalls/sqlpg.py; sqlglot's for other
dialects, gateway/toolcalls/sql.py), by property.

- sound: a predicate over a column it calls trivially true holds for every non-null value of that column;
- closed: `P OR T` and `T AND T` are trivially true for any predicate P and trivially true T, `E = E` for any E;
- it bounds: `x = c`, and `P AND x = c`, never are.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.sql import describe_sql
from gateway.toolcalls.sqlpg import classify_pg

OPS = {"=": lambda a, b: a == b, "<>": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
       ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
TRIVIAL = ["true", "1 = 1", "x = x", "x IS NULL OR x IS NOT NULL", "'a' = 'a'", "NOT false", "x >= x",
           "x < 3 OR x >= 3", "(x = 2) OR NOT (x = 2)", "name LIKE '%'", "x <= x", "NOT (x <> x)",
           "CASE WHEN x > 0 THEN true ELSE true END", "x BETWEEN x AND x", "x IS NOT DISTINCT FROM x", "'t'",
           "x > 1 OR x < 1 OR x = 1", "2 > 1"]

operand = st.one_of(st.just("x"), st.integers(-2, 2))
atom = st.one_of(
    st.tuples(st.just("cmp"), operand, st.sampled_from(sorted(OPS)), operand),
    st.tuples(st.just("const"), st.booleans()),
    st.tuples(st.just("notnull"), st.booleans()),
)
predicate = st.recursive(atom, lambda inner: st.one_of(
    st.tuples(st.just("and"), inner, inner), st.tuples(st.just("or"), inner, inner), st.tuples(st.just("not"), inner)),
    max_leaves=6)


def render(p) -> str:
    kind = p[0]
    if kind == "cmp":
        return f"{p[1]} {p[2]} {p[3]}"
    if kind == "const":
        return "true" if p[1] else "false"
    if kind == "notnull":
        return "x IS NOT NULL" if p[1] else "x IS NULL"
    if kind == "not":
        return f"NOT ({render(p[1])})"
    return f"({render(p[1])}) {kind.upper()} ({render(p[2])})"


def holds(p, x: int) -> bool:
    kind = p[0]
    if kind == "cmp":
        a, b = (x if v == "x" else v for v in (p[1], p[3]))
        return OPS[p[2]](a, b)
    if kind == "const":
        return p[1]
    if kind == "notnull":
        return p[1]              # x is never null here
    if kind == "not":
        return not holds(p[1], x)
    if kind == "and":
        return holds(p[1], x) and holds(p[2], x)
    return holds(p[1], x) or holds(p[2], x)


def unbounded_pg(where: str) -> bool:
    facts = classify_pg(f"UPDATE t SET y = 1 WHERE {where}")
    assert facts is not None, where
    return "UPDATE" in facts["unbounded"]


def unbounded_glot(where: str) -> bool:
    facts = describe_sql(f"UPDATE t SET y = 1 WHERE {where}", "mysql")
    assert facts["parsed"], where
    return "UPDATE" in facts["unbounded"]


DETECTORS = [pytest.param(unbounded_pg, id="pglast"), pytest.param(unbounded_glot, id="sqlglot")]


@pytest.mark.parametrize("unbounded", DETECTORS)
@settings(max_examples=200, deadline=None)
@given(p=predicate)
def test_sound(unbounded, p):
    where = render(p)
    if "x" in where and unbounded(where):
        assert all(holds(p, x) for x in range(-5, 6)), where


@pytest.mark.parametrize("unbounded", DETECTORS)
@settings(max_examples=200, deadline=None)
@given(p=predicate, t=st.sampled_from(TRIVIAL), u=st.sampled_from(TRIVIAL), left=st.booleans())
def test_or_true_and_true_and_true(unbounded, p, t, u, left):
    if unbounded is unbounded_glot and ("BETWEEN" in t or "DISTINCT" in t or t == "'t'"):
        return                     # PostgreSQL spellings the sqlglot reading leaves to PostgreSQL's grammar
    arms = [f"({render(p)})", f"({t})"]
    assert unbounded(" OR ".join(arms if left else arms[::-1]))
    if unbounded is unbounded_glot and ("BETWEEN" in u or "DISTINCT" in u or u == "'t'"):
        return
    assert unbounded(f"({t}) AND ({u})")


EXPRESSIONS = ["x", "x + 1", "lower(name)", "coalesce(x, 0)", "t.x", "abs(x - 3) * 2", "name || 'a'",
               "(x)::text", "date_trunc('day', created_at)"]


@pytest.mark.parametrize("unbounded", DETECTORS)
@settings(max_examples=100, deadline=None)
@given(e=st.sampled_from(EXPRESSIONS), op=st.sampled_from(["=", "<=", ">="]), spaces=st.sampled_from(["", " ", "  "]))
def test_an_expression_compared_with_itself(unbounded, e, op, spaces):
    if unbounded is unbounded_glot and "::" in e:
        return
    assert unbounded(f"{e}{spaces}{op}{spaces}{e}")


@pytest.mark.parametrize("unbounded", DETECTORS)
@settings(max_examples=200, deadline=None)
@given(p=predicate, c=st.integers(-1000, 1000), col=st.sampled_from(["id", "x", "t.id", "email"]),
       op=st.sampled_from(["=", "<", ">", "<>", "<=", ">="]))
def test_a_column_compared_with_a_constant_bounds(unbounded, p, c, col, op):
    assert not unbounded(f"{col} {op} {c}")
    assert not unbounded(f"({render(p)}) AND {col} {op} {c}")
    assert not unbounded(f"{col} {op} {c} OR {col} {op} {c + 1}") or op in ("<>",)


def test_no_where_and_constant_where():
    for where in ("false", "1 = 2", "NULL", "EXISTS (SELECT 1)", "now() > '2000-01-01'"):
        assert unbounded_pg(where), where
    assert "UPDATE" in classify_pg("UPDATE t SET y = 1")["unbounded"]
    assert "DELETE" in classify_pg("DELETE FROM t")["unbounded"]
    assert classify_pg("UPDATE t SET y = 1 WHERE CURRENT OF c")["unbounded"] == []


def test_own_table_qualifier_only():
    assert unbounded_pg("t.id = id")
    assert not classify_pg("UPDATE t SET y = 1 FROM u WHERE t.id = u.id")["unbounded"]
    assert classify_pg("UPDATE t AS a SET y = 1 WHERE a.id = id")["unbounded"] == ["UPDATE"]


def test_half_lines_that_meet():
    for where in ("id > 0 OR id < 10", "id >= 5 OR id <= 5", "10 > id OR id > 2", "x > 0.5 OR x < 1"):
        assert unbounded_pg(where), where
    for where in ("id > 5 OR id < 5", "id > 5 OR id < 3", "id > 1 OR x < 10", "id >= 5 OR id < 5 AND x = 1"):
        assert not unbounded_pg(where), where


def test_the_own_table_joined_to_itself_or_fully_qualified():
    """Each row meets itself: a join of the table with itself on one column bounds nothing; `public.t.id` and
    `x COLLATE "C"` are the same expression as `id` and `x`."""
    for stmt in ("UPDATE t SET v = 'x' FROM t AS u WHERE t.id = u.id",
                 "MERGE INTO t USING t AS u ON t.id = u.id WHEN MATCHED THEN UPDATE SET v = 'x'",
                 "UPDATE t SET v = 'x' WHERE public.t.id = t.id", "UPDATE public.t SET v = 'x' WHERE app.public.t.id = id",
                 "UPDATE t SET v = 'x' WHERE v = v COLLATE \"C\""):
        assert classify_pg(stmt)["unbounded"] == ["UPDATE"], stmt
    for stmt in ("UPDATE t SET v = 'x' FROM u WHERE t.id = u.id",
                 "UPDATE t SET v = 'x' FROM t AS u WHERE t.id = u.parent",
                 "MERGE INTO t USING u ON t.id = u.id WHEN MATCHED THEN UPDATE SET v = 'x'"):
        assert classify_pg(stmt)["unbounded"] == [], stmt


def test_an_upsert_reading_its_own_table_anywhere_updates_every_row():
    for stmt in ("INSERT INTO t SELECT * FROM (SELECT * FROM t) s ON CONFLICT (id) DO UPDATE SET v = 'x'",
                 "WITH s AS (SELECT * FROM t) INSERT INTO t SELECT * FROM s ON CONFLICT (id) DO UPDATE SET v = 'x'",
                 "INSERT INTO t SELECT * FROM u UNION SELECT * FROM t ON CONFLICT (id) DO UPDATE SET v = 'x'",
                 "INSERT INTO t TABLE t ON CONFLICT (id) DO UPDATE SET v = 'x'"):
        assert classify_pg(stmt)["unbounded"] == ["UPDATE"], stmt
    for stmt in ("INSERT INTO t VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET v = 'x'",
                 "INSERT INTO t SELECT * FROM u ON CONFLICT (id) DO UPDATE SET v = 'x'"):
        assert classify_pg(stmt)["unbounded"] == [], stmt


def test_an_update_of_pg_settings_is_a_setting_change():
    """pg_settings' update rule calls set_config: `UPDATE pg_settings SET setting = ...` changes a setting with no
    SET for sql_safe_settings to read."""
    for stmt in ("UPDATE pg_settings SET setting = 'replica' WHERE name = 'session_replication_role'",
                 "update PG_CATALOG.PG_SETTINGS set setting = 'off' where name = 'row_security'",
                 "WITH s AS (UPDATE pg_settings SET setting = '0' WHERE name = 'x' RETURNING 1) SELECT 1"):
        facts = classify_pg(stmt)
        assert facts["kind"] == "other" and "UPDATE pg_settings" in facts["unsafe"], stmt
    assert classify_pg("UPDATE settings SET setting = 'x' WHERE name = 'y'")["kind"] == "write"


def test_a_negated_conjunction_of_exclusive_arms_and_in_of_itself():
    for where in ("NOT (id < 5 AND id >= 5)", "NOT (id < 5 AND id > 5)", "NOT (v IS NULL AND v IS NOT NULL)",
                  "NOT (id = 1 AND id <> 1)", "id IN (1, id)"):
        assert unbounded_pg(where), where
    for where in ("NOT (id < 5 AND id > 3)", "NOT (id < 5 AND v = 1)", "id IN (1, 2)", "NOT (id = 1)"):
        assert not unbounded_pg(where), where


def test_a_comparison_with_null_under_a_test_that_takes_null_for_true():
    """A comparison with NULL is NULL for every row: `IS NOT FALSE`, `IS NOT TRUE`, `IS UNKNOWN` and a coalesce
    that falls through to true make it hold everywhere."""
    for where in ("(id = NULL) IS NOT FALSE", "(id = NULL) IS NOT TRUE", "(id < NULL::int) IS UNKNOWN",
                  "coalesce(id = NULL, true)", "coalesce(NULL::bool, id = NULL, id = id)",
                  "(NOT (v LIKE NULL)) IS NOT FALSE", "((id = id) IS TRUE) IS NOT FALSE"):
        assert unbounded_pg(where), where
    for where in ("(id = 5) IS NOT FALSE", "(id = 5) IS NOT TRUE", "(id = 5) IS UNKNOWN", "coalesce(id = 5, true)",
                  "coalesce(id = NULL, id = 5)", "(id = NULL) IS TRUE", "(id = NULL) IS NOT UNKNOWN"):
        assert not unbounded_pg(where), where


def test_each_row_meeting_itself_in_a_subquery_of_its_own_table():
    for stmt in ("UPDATE t SET v = 'x' WHERE id IN (SELECT id FROM t)",
                 "UPDATE t SET v = 'x' WHERE id = ANY (SELECT u.id FROM t AS u)",
                 "UPDATE t SET v = 'x' WHERE EXISTS (SELECT 1 FROM t AS u WHERE u.id = t.id)",
                 "UPDATE t SET v = 'x' WHERE id IN (SELECT id FROM public.t WHERE true)",
                 "MERGE INTO t USING u ON t.id IN (SELECT id FROM t) WHEN MATCHED THEN UPDATE SET v = 'x'"):
        assert classify_pg(stmt)["unbounded"] == ["UPDATE"], stmt
    for stmt in ("UPDATE t SET v = 'x' WHERE id IN (SELECT id FROM u)",
                 "UPDATE t SET v = 'x' WHERE id IN (SELECT id FROM t WHERE id < 3)",
                 "UPDATE t SET v = 'x' WHERE id IN (SELECT id + 1 FROM t)",
                 "UPDATE t SET v = 'x' WHERE id IN (SELECT id FROM t LIMIT 1)",
                 "UPDATE t SET v = 'x' WHERE id NOT IN (SELECT id FROM t)",
                 "UPDATE t SET v = 'x' WHERE EXISTS (SELECT 1 FROM t AS u WHERE u.id = t.id + 1)"):
        assert classify_pg(stmt)["unbounded"] == [], stmt


def test_a_test_compared_with_a_boolean_a_cast_of_itself_an_array_holding_itself():
    for where in ("(id = id) = true", "true = (id = id)", "(id = id) <> false", "(id <> id) = false",
                  "id = id::int", "CAST(id AS bigint) = id", "id::text = id::text", "id = ANY (ARRAY[-1, id])",
                  "v SIMILAR TO '%'", "v SIMILAR TO '%%'"):
        assert unbounded_pg(where), where
    for where in ("(id = 5) = true", "(id = id) = false", "(id = 5) <> false", "id = ANY (ARRAY[1, 2])",
                  "v SIMILAR TO 'a%'", "v NOT SIMILAR TO '%'", "id::int = 5"):
        assert not unbounded_pg(where), where


def test_a_where_that_reads_no_column_of_the_row_bounds_nothing():
    """True or false for all rows at once: a WHERE whose columns are another table's (a FROM item, a subquery's
    own, one that reuses the table's name) never picks rows."""
    for stmt in ("UPDATE t SET v = 'x' FROM pg_class AS c WHERE c.relname = 't'",
                 "UPDATE t SET v = 'x' WHERE EXISTS (SELECT 1 FROM pg_class AS c WHERE c.relname = 't')",
                 "UPDATE t SET v = 'x' WHERE EXISTS (SELECT 1 FROM pg_class WHERE relname = 't')",
                 "UPDATE t SET v = 'x' WHERE EXISTS (SELECT 1 FROM t WHERE t.id = 5)",
                 "UPDATE t SET v = 'x' WHERE 5 IN (SELECT u.id FROM t AS u)",
                 "UPDATE t SET v = 'x' WHERE (SELECT count(*) FROM u WHERE u.x = 1) > 0",
                 "MERGE INTO t USING u ON u.x = 1 WHEN MATCHED THEN UPDATE SET v = 'x'"):
        assert classify_pg(stmt)["unbounded"] == ["UPDATE"], stmt
    for stmt in ("UPDATE t SET v = 'x' FROM u WHERE u.tid = t.id", "UPDATE t SET v = 'x' FROM u WHERE tid = id",
                 "UPDATE t SET v = 'x' WHERE EXISTS (SELECT 1 FROM u WHERE u.tid = t.id)",
                 "UPDATE t AS x SET v = 'x' WHERE EXISTS (SELECT 1 FROM u WHERE u.tid = x.id)",
                 "UPDATE t SET v = 'x' WHERE id IN (SELECT tid FROM u WHERE flag)",
                 "UPDATE public.t SET v = 'x' WHERE public.t.id = 3", "UPDATE t SET v = 'x' WHERE CURRENT OF c",
                 "MERGE INTO t USING u ON u.id = t.id WHEN MATCHED THEN UPDATE SET v = 'x'"):
        assert classify_pg(stmt)["unbounded"] == [], stmt


def test_is_not_null_holds_for_every_row():
    """Columns are taken as non-null (a key is): `id IS NOT NULL` picks every row, `id IS NULL` none."""
    for where in ("id IS NOT NULL", "NOT (id ISNULL)", "id NOTNULL", "id IS NOT NULL OR id = 5"):
        assert unbounded_pg(where), where
    for where in ("id IS NULL", "id IS NOT NULL AND id = 5", "deleted_at IS NULL AND id = 5"):
        assert not unbounded_pg(where), where
