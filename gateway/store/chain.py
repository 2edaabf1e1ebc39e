"""The audit trail as one hash chain, as pure functions: what a row's hash covers, and how a trail is checked.

Every audit row (table `events`) carries `chain_n` (its place in the one chain over all rows, 1, 2, 3, ... in the
order of their database ids) and `hash` = SHA-256(previous row's hash || the row's canonical JSON) as hex, the
first row's "previous hash" being 32 zero bytes. The canonical JSON is the row's stored fields (chain_n included,
the database id not: ids may have gaps) in sorted key order, compact, ASCII; JSON columns as their stored text
(the writer stores canonical JSON text, and PostgreSQL's `json` type keeps text as given). Writers store each
value as its column will give it back (`stored_values`), so a verifier reading the row computes the same bytes on
SQLite and PostgreSQL. This format is frozen: a change is a new CHAIN_VERSION.

Signed checkpoints (Ed25519) name (count, last row id, hash) at some point of the chain: rows rewritten with
recomputed hashes, or a tail cut, cannot match them. `check_rows` walks a trail and names the first bad row.
"""
from __future__ import annotations

import hashlib
import json
import math
from json.encoder import encode_basestring_ascii
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

CHAIN_VERSION = 1
GENESIS_PREV = "0" * 64
FIELDS = ("chain_n", "seq", "ts", "session", "step", "kind", "action", "reasons", "codes", "request_id", "method",
          "host", "path", "http_status", "bytes_in", "bytes_out", "policy_rev", "detail")
INT_FIELDS = frozenset({"chain_n", "seq", "step", "http_status", "bytes_in", "bytes_out"})
TEXT_FIELDS = frozenset({"session", "kind", "action", "request_id", "method", "host", "path", "policy_rev"})
JSON_FIELDS = frozenset({"reasons", "codes", "detail"})


_JSON_TEXT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode   # built once


def json_text(value: Any) -> str:
    """A JSON column's stored text: canonical (sorted keys, compact, ASCII)."""
    return _JSON_TEXT(value)


class JSONText(str):
    """A JSON column's value given as its canonical text already (stored_values keeps it as it is): an audit row
    that crossed to the writer process as its stored values (gateway/store/offload.py)."""


_INTS = tuple(f for f in FIELDS if f in INT_FIELDS)
_TEXTS = tuple(f for f in FIELDS if f in TEXT_FIELDS)


def stored_values(row: dict) -> dict:
    """The row's fields as its columns give them back: ts a float, integral floats and booleans in integer
    columns as ints, text columns as text, JSON columns as their canonical text. What no column can hold is left
    for the database to refuse (the audit writer then escapes the batch: audit/rows.py)."""
    get = row.get
    out: dict[str, Any] = {field: get(field) for field in FIELDS}     # FIELDS' order, as before
    value = out["ts"]
    if value.__class__ is not float and isinstance(value, (int, float)) and not isinstance(value, bool):
        out["ts"] = float(value)
    for field in _INTS:
        value = out[field]
        if value is None or value.__class__ is int:
            continue
        if isinstance(value, bool) or (isinstance(value, float) and math.isfinite(value) and value.is_integer()):
            out[field] = int(value)
    for field in _TEXTS:
        value = out[field]
        if value is not None and value.__class__ is not str and not isinstance(value, str):
            out[field] = str(value)
    value = out["reasons"]
    if value.__class__ is not JSONText:
        out["reasons"] = _JSON_TEXT(value if value is not None else [])
    value = out["codes"]
    if value.__class__ is not JSONText:
        out["codes"] = _JSON_TEXT(value if value is not None else [])
    value = out["detail"]
    if value.__class__ is not JSONText:
        out["detail"] = _JSON_TEXT(value if value is not None else {})
    return out


_SORTED = tuple(sorted(FIELDS))
_KEYS = tuple(f'"{f}":' for f in _SORTED)


def _scalar(value: Any) -> str:
    """json.dumps(value, ensure_ascii=True) for a column's value, without its machinery for the common types."""
    if value is None:
        return "null"
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return json.dumps(value, ensure_ascii=True)


def canonical(values: dict) -> bytes:
    """The canonical JSON of a row given as `stored_values` (JSON columns as text): sorted keys, compact, ASCII."""
    parts = []
    for key, field in zip(_KEYS, _SORTED):
        value = values.get(field)
        parts.append(key + (value if field in JSON_FIELDS else _scalar(value)))
    return ("{" + ",".join(parts) + "}").encode("ascii")


def canonical_read(row: dict) -> bytes:
    """The canonical JSON of a row as read back from the store: JSON columns as their stored text, verbatim (the
    writer stored canonical text; a row from before the chain was hashed as it was stored), or as parsed values
    when a driver gives those (then in their canonical text)."""
    values = dict(row)
    for field in JSON_FIELDS:
        value = values.get(field)
        if not isinstance(value, str):
            values[field] = json_text(value)
    return canonical(values)


def link(prev: str, body: bytes) -> str:
    return hashlib.sha256(bytes.fromhex(prev) + body).hexdigest()


def checkpoint_message(count: int, last_id: int, chain_hash: str, ts: float, key_id: str) -> bytes:
    """What a checkpoint's signature covers."""
    return json.dumps({"v": CHAIN_VERSION, "count": count, "last_id": last_id, "hash": chain_hash, "ts": ts,
                       "key": key_id}, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Checkpoint:
    count: int
    last_id: int
    hash: str
    ts: float
    key_id: str
    signature: str           # base64; "" for the genesis checkpoint the migration wrote (it has no key)
    kind: str                # "genesis" or "signed"


@dataclass(frozen=True)
class Problem:
    row_id: int | None
    session: str | None
    seq: int | None
    what: str

    def line(self) -> str:
        where = f"row id {self.row_id} (session {self.session or '-'}, seq {self.seq})" if self.row_id is not None \
            else "the trail"
        return f"{where}: {self.what}"


@dataclass
class Walk:
    checked: int = 0
    last_id: int = 0
    last_n: int = 0
    last_hash: str = GENESIS_PREV
    last_session: str | None = None
    last_seq: int | None = None
    problem: Problem | None = None


def check_rows(rows: Iterable[dict], walk: Walk, checkpoints: dict[int, Checkpoint]) -> Walk:
    """Walk rows (id order, read back from the store) on from `walk`; stop at the first bad row.

    A row is bad when its chain place is not the next one (a gap: rows deleted before it, or, when the missing
    place comes right after it, two rows swapped; a place already passed: inserted or reordered; none: inserted
    outside sandgate), or its hash is not the chain's (edited: the next row still links to its stored hash), or a
    checkpoint at its place names another hash (rows rewritten with their hashes recomputed)."""
    it = iter(rows)
    row = next(it, None)
    while row is not None:
        after = next(it, None)
        n, stored = row.get("chain_n"), row.get("hash")
        if n is None or stored is None:
            walk.problem = _problem(row, "inserted outside sandgate (no chain hash)")
            return walk
        if n != walk.last_n + 1:
            if n > walk.last_n + 1 and after is not None and after.get("chain_n") == walk.last_n + 1:
                walk.problem = _problem(row, f"reordered: chain place {n} comes before {walk.last_n + 1} (rows "
                                             "swapped or moved)")
            elif n > walk.last_n + 1:
                missing = n - walk.last_n - 1
                walk.problem = _problem(row, f"{missing} row{'s' if missing > 1 else ''} before it deleted "
                                             f"(chain place {n} follows {walk.last_n})")
            else:
                walk.problem = _problem(row, f"out of order (chain place {n} after {walk.last_n}): inserted or "
                                             "reordered")
            return walk
        if link(walk.last_hash, canonical_read(row)) != stored:
            edited = after is None or after.get("hash") == link(stored, canonical_read(after))
            walk.problem = _problem(row, "edited: its content no longer matches its hash" if edited else
                                    "its hash does not link to the row before it (rows around it changed)")
            return walk
        point = checkpoints.get(n)
        if point is not None and point.hash != stored:
            walk.problem = _problem(row, f"the signed checkpoint at chain place {n} names another hash: rows up to "
                                         "here were rewritten")
            return walk
        walk.checked += 1
        walk.last_id, walk.last_n, walk.last_hash = int(row["id"]), n, stored
        walk.last_session, walk.last_seq = row.get("session"), row.get("seq")
        row = after
    return walk


def _problem(row: dict, what: str) -> Problem:
    return Problem(row.get("id"), row.get("session"), row.get("seq"), what)


def chained(rows: list[dict], count: int, prev: str) -> Iterator[tuple[dict, int, str]]:
    """(stored values, chain place, hash) for rows appended after `count` rows ending in hash `prev`."""
    for row in rows:
        count += 1
        values = stored_values({**row, "chain_n": count})
        prev = link(prev, canonical(values))
        yield values, count, prev
