"""The gateway's reading of SQL text (pglast): splitting, parameters, bound statements. Pure."""
from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, strategies as st
from pglast import parser

from gateway.postgres import statements as s


@pytest.mark.parametrize("query, parts", [
    ("SELECT 1", ["SELECT 1"]),
    ("SELECT 1; SELECT 2", ["SELECT 1", "SELECT 2"]),
    ("SELECT ';'; DELETE FROM t", ["SELECT ';'", "DELETE FROM t"]),
    ("SELECT $$a;b$$; DROP TABLE t;", ["SELECT $$a;b$$", "DROP TABLE t"]),
    ("SELECT 1 /* ; */; -- ;\nTRUNCATE t", ["SELECT 1 /* ; */", "-- ;\nTRUNCATE t"]),
    ("SELECT E'\\';'; DROP TABLE t", ["SELECT E'\\';'", "DROP TABLE t"]),
    ("CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql; DELETE FROM t",
     ["CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql", "DELETE FROM t"]),
    ("", []),
    (" ; ;", []),
    ("SELEC 1; DROP TABLE t", ["SELEC 1; DROP TABLE t"]),     # does not parse: decided whole (it asks)
    ('SELECT "a;b" FROM t; DELETE FROM t', ['SELECT "a;b" FROM t', "DELETE FROM t"]),
])
def test_split_statements(query, parts):
    assert s.split_statements(query) == parts


@given(st.text(max_size=200))
def test_split_never_raises_and_loses_no_statement(text):
    parts = s.split_statements(text)
    assert all(p.strip() for p in parts)
    try:
        whole = parser.parse_sql(text)
    except Exception:  # noqa: BLE001
        return
    assert len(parts) == len(whole) or len(parts) == 1


@pytest.mark.parametrize("stmt, positions", [
    ("SELECT $1", [(7, 9, 1)]),
    ("DELETE FROM t WHERE id = $1 OR $2", [(25, 27, 1), (31, 33, 2)]),
    ("SELECT '$1', \"$2\", $$ $3 $$", []),
    ("SELECT 1", []),
    ("SELECT $10", [(7, 10, 10)]),
])
def test_param_positions(stmt, positions):
    assert s.param_positions(stmt) == positions


@pytest.mark.parametrize("value, fmt, oid, out", [
    (None, 0, 0, "NULL"),
    (b"true", 0, 16, "E'true'"),
    (b"it's \\ odd", 0, 25, "E'it''s \\\\ odd'"),
    (struct.pack("!i", -5), 1, 23, "-5"),
    (struct.pack("!q", 2 ** 40), 1, 20, str(2 ** 40)),
    (struct.pack("!h", 7), 1, 21, "7"),
    (b"\x01", 1, 16, "true"),
    (b"\x00", 1, 16, "false"),
    (struct.pack("!d", 1.5), 1, 701, "1.5::float8"),
    (b"abc", 1, 25, "E'abc'"),
    (b"\x01{\"a\": 1}", 1, 3802, "E'{\"a\": 1}'::jsonb"),
    (b"\x00\xff", 1, 17, "'\\x00ff'::bytea"),
    (uuid.UUID(int=1).bytes, 1, 2950, f"'{uuid.UUID(int=1)}'::uuid"),
    (struct.pack("!i", 1), 1, 1082, "'2000-01-02'::date"),
    (struct.pack("!q", 1_500_000), 1, 1114, "'2000-01-01T00:00:01.500000'::timestamp"),
    (struct.pack("!hhHh", 2, 0, 0x4000, 2) + struct.pack("!hh", 12, 3400), 1, 1700, "-12.34::numeric"),
    (struct.pack("!hhHh", 0, 0, 0, 0), 1, 1700, "0::numeric"),
    (struct.pack("!iiIii", 1, 0, 23, 2, 1) + struct.pack("!ii", 4, 7) + struct.pack("!i", -1), 1, 1007,
     "ARRAY[7, NULL]"),
    (struct.pack("!iiIii", 1, 0, 25, 1, 1) + struct.pack("!i", 3) + b"a'b", 1, 1009, "ARRAY[E'a''b']"),
    (struct.pack("!iiIii", 2, 0, 23, 1, 1), 1, 1007, None),                # two dimensions: not written
    (b"\x00\x00\x00", 1, 1083, None),       # time in binary: not written, so the statement is unreadable
    (b"\xff", 0, 25, None),                   # not UTF-8
    (b"\x01", 1, 0, None),                    # binary of a type the client did not state: the server infers it
    (b"abc", 0, 0, "E'abc'"),                 # text of an unstated type: a literal the server types the same way
    (b"\x01\x02", 1, 23, None),               # wrong length for int4
])
def test_render_param(value, fmt, oid, out):
    assert s.render_param(value, fmt, oid) == out


def test_bind_statement_writes_values_in():
    assert s.bind_statement("DELETE FROM t WHERE id = $1 OR $2", ["1", "true"]) == \
        "DELETE FROM t WHERE id = (1) OR (true)"
    assert s.bind_statement("SELECT $1 - $2", ["1", "-5"]) == "SELECT (1) - (-5)"       # never `--5`
    assert s.bind_statement("SELECT '$1', $1", ["E'x'"]) == "SELECT '$1', (E'x')"


def test_a_missing_or_unreadable_value_makes_the_statement_unparseable():
    for values in ([], [None], ["1"]):
        bound = s.bind_statement("SELECT $1, $2", values)
        with pytest.raises(Exception):
            parser.parse_sql(bound)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=50))
def test_a_quoted_text_value_is_one_constant(text):
    """Whatever a text parameter holds, written in it is one string constant: it never adds SQL."""
    bound = s.bind_statement("SELECT $1", [s.quote_literal(text)])
    stmt = parser.parse_sql(bound)[0].stmt
    target = stmt.targetList[0].val
    assert type(target).__name__ == "A_Const" and target.val.sval == text


@given(st.decimals(allow_nan=False, allow_infinity=False, places=None, min_value=-10 ** 20, max_value=10 ** 20))
def test_binary_numeric_is_written_as_its_value(number):
    """psycopg's own binary form of a Decimal (what a client sends) is written back as the same number."""
    import decimal

    from psycopg.adapt import Transformer
    from psycopg.adapt import PyFormat as Format
    dumper = Transformer().get_dumper(number, Format.BINARY)
    text = s.render_param(bytes(dumper.dump(number)), 1, 1700)
    assert text is not None and decimal.Decimal(text.removesuffix("::numeric")) == number


@given(st.datetimes(min_value=__import__("datetime").datetime(1, 1, 2), max_value=__import__("datetime").datetime(9999, 12, 30)))
def test_binary_timestamps_and_dates_are_written_as_their_value(stamp):
    from psycopg.adapt import Transformer
    from psycopg.adapt import PyFormat as Format
    tx = Transformer()
    ts = s.render_param(bytes(tx.get_dumper(stamp, Format.BINARY).dump(stamp)), 1, 1114)
    assert ts == f"'{stamp.isoformat(timespec='microseconds')}'::timestamp"
    day = stamp.date()
    assert s.render_param(bytes(tx.get_dumper(day, Format.BINARY).dump(day)), 1, 1082) == f"'{day.isoformat()}'::date"


@pytest.mark.parametrize("stmt, dropped", [
    ("DEALLOCATE s1", ["s1"]), ("deallocate prepare \"Odd Name\"", ["Odd Name"]), ("DEALLOCATE ALL", None),
    ("DISCARD ALL", None), ("DISCARD PLANS", []), ("SELECT 'deallocate'", []), ("SELECT 1", []),
])
def test_deallocated(stmt, dropped):
    assert s.deallocated(stmt) == dropped


@pytest.mark.parametrize("stmt, matter", [
    ("SELECT abalance FROM pgbench_accounts WHERE aid = $1", False),
    ("SELECT * FROM t WHERE $1 = id", False),
    ("INSERT INTO t VALUES ($1, $2::text), ($3, $4)", False),
    ("INSERT INTO t SELECT $1, $2", False),
    ("UPDATE t SET v = $1 WHERE id = $2", False),
    ("SELECT * FROM t WHERE id = ANY($1) LIMIT $2 OFFSET $3", False),
    ("DELETE FROM t WHERE id IN ($1, $2)", False),
    ("DELETE FROM t WHERE id BETWEEN $1 AND $2", False),
    ("SELECT * FROM t WHERE v NOT LIKE $1", False),
    ("UPDATE t SET v = 'x' WHERE v LIKE $1", True),              # bound '%': every row
    ("UPDATE t SET v = 'x' WHERE v ILIKE $1", True),
    ("UPDATE t SET v = 'x' WHERE id = $1 OR id <> $2", True),   # bound 5, 5: every row
    ("UPDATE t SET v = 'x' WHERE id < $1 OR id >= $2", True),
    ("UPDATE t SET v = 'x' WHERE NOT (id <> $1)", True),
    ("SELECT $1", False),
    ("SELECT 1", False),
    ("DELETE FROM t WHERE id = $1 OR $2", True),
    ("DELETE FROM t WHERE $1", True),
    ("SELECT count(*) FROM t WHERE 1 = $1", True),
    ("SELECT f($1)", True),
    ("DELETE FROM t WHERE id = $1 + 0", True),
    ("UPDATE t SET v = v || $1", True),
    ("UPDATE t SET v = 'x' WHERE (SELECT $1)", True),
    ("DELETE FROM t WHERE id IN (SELECT id FROM t LIMIT $1)", True),
    ("SELECT * FROM t WHERE id = $1 AND $2", True),
    ("SELECT $1::regclass", False),
    ("SELEC $1", True),
    ("UPDATE t SET v = 'x' WHERE (id = $1) IS NOT FALSE", True),     # bound NULL: every row
    ("UPDATE t SET v = 'x' WHERE (id IN ($1, $2)) IS UNKNOWN", True),
    ("UPDATE t SET v = 'x' WHERE coalesce(id = $1, true)", True),
    ("UPDATE t SET v = 'x' WHERE CASE WHEN id = $1 THEN false ELSE true END", True),
    ("UPDATE t SET v = 'x' WHERE id = $1 AND v = $2", False),
    ("SELECT * FROM t JOIN u ON u.id = $1 GROUP BY t.id HAVING t.id = $2", False),
    ("UPDATE t SET v = 'x' WHERE id IN (SELECT id FROM u WHERE u.x = $1)", False),
])
def test_params_matter(stmt, matter):
    assert s.params_matter(stmt) is matter


PLAIN_TOKENS = ["SELECT ", "abalance", " FROM ", "pgbench_accounts", " WHERE ", "aid", " = ", "=", "1", "42", ", ",
                "(", ")", "*", "+", "t.a", ";", " ", "\n", "<>", "1.5"]


@given(st.lists(st.sampled_from(PLAIN_TOKENS), max_size=14).map("".join))
def test_plain_text_is_split_as_the_grammar_splits_it(text):
    """Text of words, numbers and a few symbols is split without the parser (pgbench's statements): where the
    grammar reads it, the same statements as pglast's split."""
    try:
        slices = parser.split(text, with_parser=True, only_slices=True)
    except Exception:  # noqa: BLE001 - does not parse: decided whole either way (asks)
        return
    assert s.split_statements(text) == [text[sl] for sl in slices if text[sl].strip()]
