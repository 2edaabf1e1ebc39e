"""history_entries: the session's last tool calls as `input.history`, each kept row's entry built once (EventRow)
(gateway/sessions/memory.py hands the same rows call after call); ages follow `now`."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.history import HISTORY_SIZE, history_entries


def row(rid: str, ts: float, action: str = "allow", **detail) -> dict:
    return {"request_id": rid, "step": 1, "ts": ts, "action": action, "codes": ["c"],
            "detail": {"tool": "shell", "summary": f"shell: {rid}", **detail}}


def test_entries_ages_and_duplicates():
    rows = [row("a", 10.0), row("b", 12.0, "deny", frozen=True, writes=["/w/x"]), row("a", 10.0)]
    first = history_entries(rows, 20.0)
    assert first == [
        {"id": "a", "step": 1, "age_s": 10.0, "tool": "shell", "summary": "shell: a", "decision": "allow",
         "codes": ["c"], "frozen": False, "writes": []},
        {"id": "b", "step": 1, "age_s": 8.0, "tool": "shell", "summary": "shell: b", "decision": "deny",
         "codes": ["c"], "frozen": True, "writes": ["/w/x"]}]
    later = history_entries(rows, 30.0)                       # the same rows again: only the ages move
    assert [e["age_s"] for e in later] == [20.0, 18.0]
    assert [{**e, "age_s": 0} for e in later] == [{**e, "age_s": 0} for e in first]
    assert later[0] is not first[0]                            # each call gets its own entries


def test_another_row_with_the_same_id_is_read_afresh():
    assert history_entries([row("a", 1.0, "allow")], 2.0)[0]["decision"] == "allow"
    assert history_entries([row("a", 1.0, "deny")], 2.0)[0]["decision"] == "deny"


def test_only_the_last_calls():
    rows = [row(f"r{i}", float(i)) for i in range(HISTORY_SIZE + 5)]
    assert [e["id"] for e in history_entries(rows, 100.0)] == [f"r{i}" for i in range(5, HISTORY_SIZE + 5)]


def test_a_kept_row_builds_its_entry_once_and_keeps_it():
    from gateway.toolcalls.history import EventRow
    kept = EventRow(row("a", 1.0))
    one, two = history_entries([kept], 2.0)[0], history_entries([kept], 3.0)[0]
    assert one.base is two.base is kept.entry[0] and (one["age_s"], two["age_s"]) == (1.0, 2.0)
    plain = row("a", 1.0)
    assert history_entries([plain], 2.0)[0].base is not history_entries([plain], 2.0)[0].base


def test_duplicates_among_kept_rows_and_plain_ones_keep_the_first():
    from gateway.toolcalls.history import EventRow
    kept = [EventRow(row("a", 1.0)), EventRow(row("b", 2.0))]
    history_entries(kept, 3.0)                                  # their entries are built and kept
    rows = [*kept, row("a", 1.5, "deny"), EventRow(row("c", 2.5)), row("b", 9.0)]
    got = history_entries(iter(rows), 3.0)                      # any iterable
    assert [(e["id"], e["decision"], e["age_s"]) for e in got] == [("a", "allow", 2.0), ("b", "allow", 1.0),
                                                                   ("c", "allow", 0.5)]
    anonymous = [{**row("", 1.0), "request_id": None} for _ in range(2)]   # no id: each row its own call
    assert len(history_entries(anonymous + anonymous, 3.0)) == 2


@given(st.floats(min_value=0.0, exclude_min=True, allow_infinity=True, allow_nan=False))
@settings(max_examples=2000, deadline=None)
def test_round_ms_is_round(x):
    from gateway.toolcalls.history import round_ms
    assert round_ms(x) == round(x, 3)


def test_round_ms_is_round_at_and_beside_every_half():
    import math
    import random

    from gateway.toolcalls.history import round_ms
    rnd = random.Random(7)
    for k in [*range(0, 3000), *(rnd.randrange(0, 10 ** 9) for _ in range(20000))]:
        tie = (k + 0.5) / 1000.0
        for x in (tie, math.nextafter(tie, 0.0), math.nextafter(tie, math.inf), tie * (1 + 2e-16), tie * (1 - 2e-16)):
            if x > 0.0:
                assert round_ms(x) == round(x, 3), x
    for _ in range(50000):
        x = rnd.random() * 10 ** rnd.randint(-5, 7)
        if x > 0.0:
            assert round_ms(x) == round(x, 3), x
