"""history_entries: the session's last tool calls as `input.history`, each kept row's entry built once (EventRow)
(gateway/sessions/memory.py hands the same rows call after call); ages follow `now`."""
from __future__ import annotations

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
