"""View-model helpers (pure): what the page shows, formatted and with invisible characters revealed."""
from __future__ import annotations

import pytest

from gateway.web import views
from gateway.web.login import MAX_SESSION_S, session_ttl


def test_session_ttl_is_capped_by_token_and_12h():
    assert session_ttl(None, 1000.0) == MAX_SESSION_S
    assert session_ttl(1060, 1000.0) == 60
    assert session_ttl(1000 + 10 * MAX_SESSION_S, 1000.0) == MAX_SESSION_S
    assert session_ttl(999, 1000.0) < 0


@pytest.mark.parametrize("text, want", [
    ("plain <b>", "plain <b>"), ("a\u202eb", "a\\u{202E}b"), ("zero\u200bwidth", "zero\\u{200B}width"),
    ("keep\nnew\tlines", "keep\nnew\tlines"), ("bell\x07", "bell\\u{0007}"), (None, ""), ("ünïcode", "ünïcode"),
])
def test_reveal(text, want):
    assert views.reveal(text) == want


@pytest.mark.parametrize("seconds, want", [
    (-5, "0s"), (0, "0s"), (59.9, "59s"), (60, "1m 00s"), (3599, "59m 59s"), (3600, "1h 00m"),
    (86399, "23h 59m"), (90000, "1d 1h"),
])
def test_duration(seconds, want):
    assert views.duration(seconds) == want


def test_pending_items_oldest_first_without_overdue():
    base = {"status": "pending", "kind": "toolcall", "session": "s", "quorum": 1, "votes": []}
    rows = [{**base, "id": "b", "summary": "second", "created_at": 20.0, "expires_at": 200.0},
            {**base, "id": "a", "summary": "first", "created_at": 10.0, "expires_at": 200.0},
            {**base, "id": "c", "summary": "overdue", "created_at": 5.0, "expires_at": 50.0},
            {**base, "id": "d", "summary": "done", "status": "approved", "created_at": 1.0, "expires_at": 200.0}]
    items = views.pending_items(rows, now=100.0)
    assert [i["summary"] for i in items] == ["first", "second"]
    assert items[0]["age"] == "1m 30s" and items[0]["left"] == "1m 40s"


def test_progress_counts_distinct_approvers():
    row = {"quorum": 3, "votes": [{"by": "a", "verdict": "approve"}, {"by": "a", "verdict": "approve"},
                                  {"by": "b", "verdict": "deny"}]}
    assert views.progress(row) == "1 of 3 approvals"
    assert views.progress({"quorum": 1, "votes": []}) == ""


def test_pretty_json_is_sorted_indented_and_revealed():
    assert views.pretty_json({"b": "x\u202e", "a": [1]}) == '{\n  "a": [\n    1\n  ],\n  "b": "x\\u{202E}"\n}'


def test_hold_note_for_held_egress_requests():
    row = {"kind": "egress", "status": "pending", "created_at": 100.0}
    assert views.hold_note(row, 300, now=160.0) == "The request is held open for 4m 00s more."
    assert "already timed out" in views.hold_note(row, 300, now=500.0)
    assert views.hold_note({**row, "kind": "toolcall"}, 300, now=160.0) == ""
    assert views.hold_note({**row, "status": "approved"}, 300, now=160.0) == ""
