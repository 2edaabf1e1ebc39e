"""The batched writers' SQL on a DB-API cursor: audit rows with their hash chain, decision-log rows with their
history entries. One definition for the store's writer thread (store.py, decisions.py) and for the writer
process (offload.py), which imports no SQLAlchemy: only the driver (sqlite3 or psycopg), chain.py and bulk.py.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from gateway.store.bulk import insert_statements
from gateway.store.chain import chained

EVENT_COLS = ("seq", "ts", "session", "step", "kind", "action", "reasons", "codes", "request_id", "method",
              "host", "path", "http_status", "bytes_in", "bytes_out", "policy_rev", "detail")
DECISION_COLS = ("id", "ts", "kind", "session", "input", "result", "policy_rev", "engine", "latency_us",
                 "request_id", "history")
ENTRY_COLS = ("ref", "entry")
DIVERGENCE_COLS = ("decision_id", "ts", "kind", "session", "input", "live", "shadow", "live_rev", "shadow_rev")

_CHAIN_LOCK = "UPDATE audit_chain SET count = count WHERE id = 1"
_CHAIN_HEAD = "SELECT count, hash FROM audit_chain WHERE id = 1"


def _seq_init(mark: str) -> str:
    return (f"INSERT INTO audit_seqs (session, last) SELECT CAST({mark} AS VARCHAR), COALESCE(MAX(seq), 0) "
            f"FROM events WHERE session = {mark} ON CONFLICT (session) DO NOTHING")


_SEQ_INIT_NONE = ("INSERT INTO audit_seqs (session, last) SELECT '', COALESCE(MAX(seq), 0) FROM events "
                  "WHERE session IS NULL ON CONFLICT (session) DO NOTHING")


def _seq_take(mark: str, count: int) -> str:
    """One statement taking the next numbers of `count` sessions: an upsert that adds, returning the new last
    numbers (the rows stay locked until the batch commits)."""
    values = ", ".join([f"({mark}, {mark})"] * count)
    return (f"INSERT INTO audit_seqs (session, last) VALUES {values} ON CONFLICT (session) DO UPDATE "
            "SET last = audit_seqs.last + excluded.last RETURNING session, last")


def _chain_move(mark: str) -> str:
    return f"UPDATE audit_chain SET count = {mark}, last_id = (SELECT MAX(id) FROM events), hash = {mark} WHERE id = 1"


def append_events(cur: Any, mark: str, rows: list[dict], seq_known: set[str]) -> set[str]:
    """Inside one transaction (the caller commits): lock the chain head (one chain over all rows, in id order,
    across replicas: chain.py), take every session's next sequence numbers from `audit_seqs` in one upsert
    (sessions in sorted order, so two writers never wait on each other in a cycle), chain the rows (their place
    and hash), then multi-row INSERTs and the head moved on. Returns the sessions written (their `audit_seqs`
    rows exist once the transaction commits: the caller adds them to `seq_known`)."""
    counts = Counter(r.get("session") for r in rows)
    order = sorted(counts, key=lambda s: s or "")
    cur.execute(_CHAIN_LOCK)            # first: the head's row lock (the write lock on SQLite) orders writers
    cur.execute(_CHAIN_HEAD)
    count, prev = cur.fetchone()
    for sid in order:                   # a session this process has not written yet: continue its trail
        if (sid or "") not in seq_known:
            if sid is None:
                cur.execute(_SEQ_INIT_NONE)
            else:
                cur.execute(_seq_init(mark), (sid, sid))
    params: list[Any] = []
    for sid in order:
        params += (sid or "", counts[sid])
    cur.execute(_seq_take(mark, len(order)), tuple(params))
    last = {key: int(n) for key, n in cur.fetchall()}
    nxt = {sid: last[sid or ""] - counts[sid] for sid in order}
    numbered = []
    for r in rows:
        sid = r.get("session")
        nxt[sid] += 1
        numbered.append({**r, "seq": nxt[sid]})
    values = [tuple(v[c] for c in EVENT_COLS) + (n, h) for v, n, h in chained(numbered, int(count), prev)]
    for sql, chunk in insert_statements("events", EVENT_COLS + ("chain_n", "hash"), values, mark, few_texts=True):
        cur.execute(sql, chunk)
    cur.execute(_chain_move(mark), (values[-1][-2], values[-1][-1]))
    return {s or "" for s in counts}


def insert_rows(cur: Any, mark: str, table: str, cols: tuple[str, ...], values: list[tuple],
                suffix: str = "") -> None:
    for sql, params in insert_statements(table, cols, values, mark, few_texts=True, suffix=suffix):
        cur.execute(sql, params)


def append_decisions(cur: Any, mark: str, rows: list[tuple], entries: list[tuple[str, str]],
                     divergences: list[tuple]) -> None:
    """Decision rows (tuples in DECISION_COLS' order, JSON columns as text) after the history entries they
    reference ((key, redacted JSON text); a key stored already is left as it is: the same key is the same text),
    and divergences (DIVERGENCE_COLS), inside the caller's transaction."""
    if entries:
        insert_rows(cur, mark, "decision_history", ENTRY_COLS, list(entries), " ON CONFLICT (ref) DO NOTHING")
    if rows:
        insert_rows(cur, mark, "decisions", DECISION_COLS, rows)
    if divergences:
        insert_rows(cur, mark, "policy_divergences", DIVERGENCE_COLS, divergences)
