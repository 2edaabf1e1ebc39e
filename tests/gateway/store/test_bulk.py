"""Multi-row INSERT statements (gateway/store/bulk.py): pure, then on real SQLite and PostgreSQL."""
from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.store.bulk import insert_statements
from tests.conftest import need
from tests.support.pg import PG_URL, pg_available


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.integers(0, 700), st.integers(1, 150), st.integers(1, 1200))
def test_statements_cover_every_row_in_order_within_the_limits(ncols, nrows, max_rows, max_params):
    cols = [f"c{i}" for i in range(ncols)]
    rows = [tuple((r, c) for c in range(ncols)) for r in range(nrows)]
    out = list(insert_statements("t", cols, rows, "?", max_rows=max_rows, max_params=max_params))
    flat = [v for _, params in out for v in params]
    assert flat == [v for row in rows for v in row]
    for sql, params in out:
        assert sql.count("?") == len(params) > 0
        assert len(params) // ncols <= max_rows
        assert len(params) <= max(max_params, ncols)          # one row always fits, however wide
        assert sql.startswith(f"INSERT INTO t ({', '.join(cols)}) VALUES (")
    if nrows:
        assert len(out) == -(-nrows // max(1, min(max_rows, max_params // ncols)))
    else:
        assert out == []


def test_a_suffix_ends_every_statement():
    out = list(insert_statements("t", ["k", "n"], [(i, 1) for i in range(250)], "%s",
                                 suffix=" ON CONFLICT (k) DO NOTHING"))
    assert len(out) == 3 and all(sql.endswith(") ON CONFLICT (k) DO NOTHING") for sql, _ in out)


def test_a_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError):
        list(insert_statements("t", ["a", "b"], [(1, 2), (3,)], "?"))
    with pytest.raises(ValueError):
        list(insert_statements("t", [], [()], "?"))


def test_the_statements_insert_every_row_on_sqlite(tmp_path):
    conn = sqlite3.connect(tmp_path / "b.db")
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT, c REAL)")
    rows = [(i, f"v'{i}\"", i / 3) for i in range(1234)]
    for sql, params in insert_statements("t", ["a", "b", "c"], rows, "?"):
        conn.execute(sql, params)
    assert conn.execute("SELECT a, b, c FROM t ORDER BY rowid").fetchall() == rows


def test_the_statements_insert_every_row_on_postgresql():
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432 (database test)")
    import psycopg

    with psycopg.connect(PG_URL.replace("postgresql+psycopg://", "postgresql://")) as conn:
        conn.execute("CREATE TEMP TABLE bulk_t (a INTEGER, b TEXT, c DOUBLE PRECISION)")
        rows = [(i, f"v'{i}\"%s", i / 3) for i in range(1234)]
        for sql, params in insert_statements("bulk_t", ["a", "b", "c"], rows, "%s"):
            conn.execute(sql, params)
        assert conn.execute("SELECT a, b, c FROM bulk_t ORDER BY a").fetchall() == rows


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.integers(0, 700), st.integers(1, 150), st.integers(1, 1200))
def test_few_texts_cover_every_row_in_order_with_few_statement_texts(ncols, nrows, max_rows, max_params):
    """The batched writers' inserts: every row in order within the limits, and at most one text per power of two
    below the chunk size besides the full chunk's (a driver keeps each text with its last parameters bound)."""
    cols = [f"c{i}" for i in range(ncols)]
    rows = [tuple((r, c) for c in range(ncols)) for r in range(nrows)]
    out = list(insert_statements("t", cols, rows, "?", max_rows=max_rows, max_params=max_params, few_texts=True))
    assert [v for _, params in out for v in params] == [v for row in rows for v in row]
    per = max(1, min(max_rows, max_params // ncols))
    sizes = [len(params) // ncols for _, params in out]
    assert all(n == per or (n & (n - 1) == 0 and n < per) for n in sizes)
    assert len(set(sizes)) <= per.bit_length() + 1 and all(sql.count("?") == len(p) for sql, p in out)
