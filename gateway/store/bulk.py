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
                      max_rows: int = MAX_ROWS, max_params: int = MAX_PARAMS, suffix: str = "",
                      few_texts: bool = False) -> Iterator[tuple[str, tuple]]:
    """(sql, parameters) for INSERTs of `rows` (tuples in the order of `cols`), in order, each with at most
    `max_rows` rows and `max_params` parameters. `mark` is the driver's placeholder ("?" or "%s"); `suffix`
    ends each statement (an ON CONFLICT clause: then no two rows may share a key).

    `few_texts` (the batched writers' rows, batches of any size): after the full chunks, the rest goes in chunks
    of powers of two, so at most ~8 statement texts are ever used instead of one per row count. The driver keeps
    each text prepared (sqlite3: 128 per connection) with its last parameters still bound (it never clears
    them): a text per row count kept ~100 statements with up to 99 rows each alive on every pooled connection
    (the decision log's ~5 KB inputs: tens of MiB each, the gateway's RSS growing for as long as it ran)."""
    if not cols:
        raise ValueError("no columns")
    per = max(1, min(max_rows, max_params // len(cols)))
    one = "(" + ", ".join([mark] * len(cols)) + ")"
    head = f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
    for start, end in _chunks(len(rows), per, few_texts):
        chunk = rows[start:end]
        for row in chunk:
            if len(row) != len(cols):
                raise ValueError(f"a row has {len(row)} values for {len(cols)} columns")
        yield head + ", ".join([one] * len(chunk)) + suffix, tuple(v for row in chunk for v in row)


def _chunks(count: int, per: int, few_texts: bool) -> Iterator[tuple[int, int]]:
    start = 0
    while count - start >= per or (start < count and not few_texts):
        yield start, min(start + per, count)
        start += per
    size = 1 << max(0, (per - 1).bit_length())
    while start < count:
        while size > count - start:
            size >>= 1
        yield start, start + size
        start += size


def placeholder(paramstyle: str) -> str:
    """The driver's placeholder: "?" (sqlite3's qmark) or "%s" (psycopg's format/pyformat)."""
    return "?" if paramstyle == "qmark" else "%s"
