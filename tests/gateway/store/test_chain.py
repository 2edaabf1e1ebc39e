"""The audit chain's pure core: what a row's hash covers, and the walk that names the first bad row of a trail for
each kind of tampering (edited, deleted, inserted, reordered, renumbered, rewritten under a checkpoint)."""
from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, strategies as st

from gateway.store.chain import (FIELDS, GENESIS_PREV, Checkpoint, Walk, canonical, canonical_read, chained,
                                 check_rows, json_text, link, stored_values)


def rows(n: int, sessions: int = 3) -> list[dict]:
    """A trail as the store gives it back: ids with gaps, per-session seq, JSON columns as text (SQLite)."""
    out, seqs, rid = [], {}, 0
    made = [{"ts": 1000.5 + i, "session": f"s{i % sessions}", "kind": "egress", "action": "allow",
             "reasons": [f"r{i}"], "codes": ["egress.allowed"], "detail": {"n": i, "é": "ü"}, "step": i,
             "host": "example.com", "path": f"/{i}"} for i in range(n)]
    for r in made:
        seqs[r["session"]] = seqs.get(r["session"], 0) + 1
        r["seq"] = seqs[r["session"]]
    for values, place, h in chained(made, 0, GENESIS_PREV):
        rid += random.Random(place).choice([1, 1, 2])            # ids may have gaps
        out.append({**values, "id": rid, "chain_n": place, "hash": h})
    return out


def walk(trail: list[dict], points: dict | None = None) -> Walk:
    return check_rows(trail, Walk(), points or {})


def test_stored_values_are_what_the_columns_give_back():
    v = stored_values({"chain_n": 1, "seq": 2.0, "ts": 5, "step": True, "session": 7, "kind": "k", "action": "",
                       "reasons": ("a",), "codes": None, "detail": {"b": 1, "a": {2: "x"}}, "http_status": 200.0})
    assert v["ts"] == 5.0 and isinstance(v["ts"], float)
    assert v["seq"] == 2 and v["step"] == 1 and v["http_status"] == 200 and v["session"] == "7"
    assert v["reasons"] == '["a"]' and v["codes"] == "[]" and v["detail"] == '{"a":{"2":"x"},"b":1}'


def test_the_canonical_form_is_the_same_read_back_as_text_or_parsed():
    (values, _, _), = list(chained([{"ts": 1.25, "session": None, "kind": "x", "action": "a", "reasons": ["\ud800"],
                                     "codes": [], "detail": {"z": [1.5, None], "a": "\u00e9"}, "seq": 1}], 0,
                                    GENESIS_PREV))
    parsed = {**values, "reasons": json.loads(values["reasons"]), "detail": json.loads(values["detail"])}
    assert canonical_read(values) == canonical_read(parsed) == canonical(values)
    assert canonical(values).isascii()


def test_an_untouched_trail_verifies():
    trail = rows(50)
    w = walk(trail)
    assert w.problem is None and w.checked == 50 and w.last_n == 50 and w.last_hash == trail[-1]["hash"]
    assert w.last_id == trail[-1]["id"] and w.last_session == trail[-1]["session"]


def named(w: Walk) -> tuple:
    return (w.problem.row_id, w.problem.session, w.problem.seq)


def test_an_edited_row_is_named():
    trail = rows(30)
    trail[12] = {**trail[12], "detail": '{"n":999}'}
    w = walk(trail)
    assert named(w) == (trail[12]["id"], trail[12]["session"], trail[12]["seq"])
    assert "edited" in w.problem.what and w.checked == 12


def test_an_edit_of_the_last_row_is_named():
    trail = rows(5)
    trail[-1] = {**trail[-1], "action": "deny"}
    assert "edited" in walk(trail).problem.what and walk(trail).problem.row_id == trail[-1]["id"]


def test_a_deleted_row_names_the_row_after_the_gap():
    trail = rows(30)
    gone = trail.pop(7)
    w = walk(trail)
    assert named(w) == (trail[7]["id"], trail[7]["session"], trail[7]["seq"])
    assert w.problem.what.startswith("1 row before it deleted") and gone["chain_n"] == 8


def test_a_swapped_pair_is_named_as_reordered():
    trail = rows(30)
    trail[9], trail[10] = {**trail[10], "id": trail[9]["id"]}, {**trail[9], "id": trail[10]["id"]}
    w = walk(trail)
    assert w.problem.row_id == trail[9]["id"] and "reordered" in w.problem.what


def test_an_inserted_row_is_named():
    trail = rows(10)
    fake = {**trail[4], "id": trail[4]["id"] + 100, "chain_n": None, "hash": None}
    w = walk(trail[:5] + [fake] + trail[5:])
    assert w.problem.row_id == fake["id"] and "inserted" in w.problem.what
    copy = {**trail[4], "id": trail[4]["id"] + 200}                      # a copy with its chain columns
    w = walk(trail[:5] + [copy] + trail[5:])
    assert w.problem.row_id == copy["id"] and "out of order" in w.problem.what


def test_a_rewritten_trail_with_recomputed_hashes_fails_at_the_checkpoint():
    trail = rows(20)
    point = Checkpoint(15, trail[14]["id"], trail[14]["hash"], 0.0, "k", "sig", "signed")
    forged = [dict(r) for r in trail]
    forged[3]["action"] = "deny"
    prev = forged[2]["hash"]
    for r in forged[3:]:                                                  # the attacker recomputes every hash
        r["hash"] = prev = link(prev, canonical_read(r))
    assert walk(forged).problem is None                                   # the chain alone cannot tell
    w = walk(forged, {15: point})
    assert w.problem.row_id == forged[14]["id"] and "checkpoint" in w.problem.what


TAMPERS = ["edit", "delete", "swap", "insert", "renumber"]


@given(st.integers(3, 40), st.sampled_from(TAMPERS), st.data())
def test_every_tampering_is_found_at_or_before_the_row_it_touched(n, tamper, data):
    trail = rows(n)
    i = data.draw(st.integers(0, n - 2))
    if tamper == "edit":
        trail[i] = {**trail[i], "path": trail[i]["path"] + "x"}
    elif tamper == "delete":
        del trail[i]
    elif tamper == "swap":
        trail[i], trail[i + 1] = {**trail[i + 1], "id": trail[i]["id"]}, {**trail[i], "id": trail[i + 1]["id"]}
    elif tamper == "insert":
        trail.insert(i, {**trail[i], "hash": None})
    else:
        trail[i] = {**trail[i], "chain_n": trail[i]["chain_n"] + 1}
    w = walk(trail)
    assert w.problem is not None and w.checked <= i
    assert w.problem.row_id == trail[w.checked]["id"]


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True),
                    st.text(max_size=20))


@given(st.fixed_dictionaries({f: scalars for f in ("session", "kind", "action", "host", "path", "ts", "step")}),
       st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                    max_leaves=8))
def test_the_canonical_form_is_sorted_compact_ascii_json(row, detail):
    values = {**row, "detail": json_text(detail), "reasons": "[]", "codes": "[]"}
    expect = json.dumps({f: (json.loads(values[f]) if f in ("detail", "reasons", "codes") else values.get(f))
                         for f in FIELDS}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert canonical(values) == expect.encode()


def _stored_values_reference(row: dict) -> dict:
    """stored_values as first written (field by field): the faster one must give the same values, types and order."""
    out = {}
    for field in FIELDS:
        value = row.get(field)
        if field == "ts":
            value = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
        elif field in ("chain_n", "seq", "step", "http_status", "bytes_in", "bytes_out"):
            if isinstance(value, bool) or (isinstance(value, float) and math.isfinite(value) and value.is_integer()):
                value = int(value)
        elif field in ("reasons", "codes", "detail"):
            value = json.dumps(value if value is not None else ([] if field != "detail" else {}), sort_keys=True,
                               separators=(",", ":"), ensure_ascii=True)
        elif value is not None and not isinstance(value, str):
            value = str(value)
        out[field] = value
    return out


@given(st.dictionaries(st.sampled_from(FIELDS + ("id", "hash")), scalars | st.lists(scalars, max_size=3)
                       | st.dictionaries(st.text(max_size=4), scalars, max_size=3), max_size=len(FIELDS)))
def test_stored_values_match_the_field_by_field_reference(row):
    got, want = stored_values(row), _stored_values_reference(row)
    assert list(got) == list(want) and [type(v) for v in got.values()] == [type(v) for v in want.values()]
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)       # NaN-safe equality
