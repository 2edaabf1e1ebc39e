"""Multi-row INSERT statements: one statement (one step of the database) per chunk of rows, not one per row.

The sqlite3 module gives the GIL away around every step of a statement and takes it back after; `executemany`
steps once per row. Beside a busy event loop each take-back can wait up to the interpreter's switch interval
(5 ms), so a batch of N rows could wait N times: 250 decision-log rows took 0.9 s of wall time beside a thread
running Python, against 37 ms as three multi-row statements (measured on this machine). Pure: rows in,
statements out.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

MAX_PARAMS = 999                # SQLite's lowest limit on host parameters (builds before 3.32); PostgreSQL: 65535
MAX_ROWS = 100


def insert_statements(table: str, cols: Sequence[str], rows: Sequence[Sequence[Any]], mark: str,
                      max_rows: int = MAX_ROWS, max_params: int = MAX_PARAMS, suffix: str = ""
                      ) -> Iterator[tuple[str, tuple]]:
    """(sql, parameters) for INSERTs of `rows` (tuples in the order of `cols`), in order, each with at most
    `max_rows` rows and `max_params` parameters. `mark` is the driver's placeholder ("?" or "%s"); `suffix`
    ends each statement (an ON CONFLICT clause: then no two rows may share a key)."""
    if not cols:
        raise ValueError("no columns")
    per = max(1, min(max_rows, max_params // len(cols)))
    one = "(" + ", ".join([mark] * len(cols)) + ")"
    head = f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
    for start in range(0, len(rows), per):
        chunk = rows[start:start + per]
        for row in chunk:
            if len(row) != len(cols):
                raise ValueError(f"a row has {len(row)} values for {len(cols)} columns")
        yield head + ", ".join([one] * len(chunk)) + suffix, tuple(v for row in chunk for v in row)


def placeholder(paramstyle: str) -> str:
    """The driver's placeholder: "?" (sqlite3's qmark) or "%s" (psycopg's format/pyformat)."""
    return "?" if paramstyle == "qmark" else "%s"
