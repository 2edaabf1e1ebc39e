"""View-model helpers (pure): what the page shows, formatted and with invisible characters revealed."""
from __future__ import annotations

import pytest

from gateway.store.records import Approval, AuditEvent, Session
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
    base = {"status": "pending", "kind": "toolcall", "session": "s", "quorum": 1, "votes": [], "binding": "x"}
    rows = [Approval(**{**base, "id": "b", "summary": "second", "created_at": 20.0, "expires_at": 200.0}),
            Approval(**{**base, "id": "a", "summary": "first", "created_at": 10.0, "expires_at": 200.0}),
            Approval(**{**base, "id": "c", "summary": "overdue", "created_at": 5.0, "expires_at": 50.0}),
            Approval(**{**base, "id": "d", "summary": "done", "status": "approved", "created_at": 1.0,
                        "expires_at": 200.0})]
    items = views.pending_items(rows, now=100.0)
    assert [i["summary"] for i in items] == ["first", "second"]
    assert items[0]["age"] == "1m 30s" and items[0]["left"] == "1m 40s"


def test_progress_counts_distinct_approvers():
    row = _approval(quorum=3, votes=[{"by": "a", "verdict": "approve"}, {"by": "a", "verdict": "approve"},
                                     {"by": "b", "verdict": "deny"}])
    assert views.progress(row) == "1 of 3 approvals"
    assert views.progress(_approval(quorum=1, votes=[])) == ""


def test_pretty_json_is_sorted_indented_and_revealed():
    assert views.pretty_json({"b": "x\u202e", "a": [1]}) == '{\n  "a": [\n    1\n  ],\n  "b": "x\\u{202E}"\n}'


def test_hold_note_for_held_egress_requests():
    row = _approval(kind="egress", status="pending", created_at=100.0)
    assert views.hold_note(row, 300, now=160.0) == "The request is held open for 4m 00s more."
    assert "already timed out" in views.hold_note(row, 300, now=500.0)
    assert views.hold_note(row.replace(kind="toolcall"), 300, now=160.0) == ""
    assert views.hold_note(row.replace(status="approved"), 300, now=160.0) == ""


# -- the approver's view --------------------------------------------------------------------------------------

def _approval(**kw):
    row = {"id": "a1", "status": "pending", "kind": "toolcall", "summary": "shell: rm -rf b && make",
           "session": "s1", "created_at": 100.0, "expires_at": 3700.0, "requested_by": "harness:ci",
           "reasons": ["deleting needs approval: rm -rf /w/b"], "votes": [], "quorum": 1, "binding": "b1",
           "action": {"tool": "shell", "args": {"command": "rm -rf b && make"}, "codes": ["toolcall.delete"],
                      "effects": ["deletes /w/b"]}}
    row.update(kw)
    return Approval(**row)


def test_reasons_carry_their_codes_and_a_repeated_reason_is_shown_once():
    row = _approval(reasons=["deleting needs approval: rm x", "deleting needs approval: rm x", "frozen"],
                    action={"codes": ["toolcall.delete", "toolcall.delete", "toolcall.frozen"]})
    assert views.reason_items(row) == [{"reason": "deleting needs approval: rm x", "code": "toolcall.delete"},
                                       {"reason": "frozen", "code": "toolcall.frozen"}]
    # one code stands beside every reason (each item of the policy's sets has a code); an approval's own code is
    # left out; one reason given by two rules carries both codes
    odd = _approval(reasons=["a", "b"], action={"codes": ["x.one", "approval.approved"]})
    assert views.reason_items(odd) == [{"reason": "a", "code": "x.one"}, {"reason": "b", "code": "x.one"}]
    assert views.unpaired_codes(odd) == ""
    shared = _approval(reasons=["same"], action={"codes": ["x.a", "x.b"]})
    assert views.reason_items(shared) == [{"reason": "same", "code": "x.a, x.b"}]
    # a code with several reasons: which code is whose is not known, so none is put beside the wrong reason
    many = _approval(reasons=["deleting needs approval: rm a", "deleting needs approval: rm b", "the session is frozen"],
                     action={"codes": ["toolcall.delete", "toolcall.frozen"]})
    assert [i["code"] for i in views.reason_items(many)] == ["", "", ""]
    assert views.unpaired_codes(many) == "toolcall.delete, toolcall.frozen"
    assert views.detail_view(many, None, "unknown", [], 160.0)["unpaired_codes"] == "toolcall.delete, toolcall.frozen"
    assert views.reason_items(_approval(action="not an object")) == [
        {"reason": "deleting needs approval: rm -rf /w/b", "code": ""}]


def test_the_queue_item_has_reasons_labels_and_requester():
    [item] = views.pending_items([_approval()], now=160.0, labels={"s1": {"team": "pay", "env": "prod"}})
    assert (item["reasons"], item["labels"], item["requested_by"]) == (
        "deleting needs approval: rm -rf /w/b", "env=prod, team=pay", "harness:ci")
    [bare] = views.pending_items([_approval(requested_by=None)], now=160.0)
    assert (bare["labels"], bare["requested_by"]) == ("", "")


def test_the_detail_says_what_approving_does_and_what_the_two_clocks_mean():
    session = Session(id="s1", workload="ephemeral", created_at=50.0, expires_at=3650.0, labels={"team": "pay"},
                      allow=["pypi.org"], workspace="/w", secrets=["github"])
    view = views.detail_view(_approval(), session, "active", [], 160.0, hold_s=None, reuse_s=600)
    assert view["requested_by"] == "harness:ci" and view["effects"] == ["deletes /w/b"]
    assert view["approve_note"] == ("Approving lets this exact call through once. An identical retry within "
                                    "10m 00s also passes. A compound command is approved as a unit: all of it, "
                                    "exactly as shown.")
    assert view["clocks_note"].startswith("This item expires 1970-01-01 01:01:40 UTC")
    assert (view["session"]["allow"], view["session"]["workspace"], view["session"]["secrets"]) == (
        ["pypi.org"], "/w", ["github"])
    egress = views.detail_view(_approval(kind="egress", action={"method": "DELETE", "url": "https://x/"}),
                               None, "unknown", [], 160.0, hold_s=30, reuse_s=0)
    assert egress["approve_note"] == "Approving lets this exact request through once."
    assert "The held request waits 30s at most" in egress["clocks_note"]


def test_recent_steps_are_newest_first_and_each_ask_appears_once():
    events = [
        AuditEvent(ts=1.0, seq=1, kind="toolcall", action="allow", detail={"summary": "shell: ls"}),
        AuditEvent(ts=2.0, seq=2, kind="approval.filed", action="ask", detail={"approval_id": "a1"}),
        AuditEvent(ts=2.0, seq=3, kind="toolcall", action="ask",
                   detail={"summary": "shell: rm -rf b", "approval_id": "a1"}),
        AuditEvent(ts=3.0, seq=4, kind="approval.filed", action="ask", detail={"approval_id": "a9"}),
    ]
    steps = views.recent_steps(events)
    assert [s["what"] for s in steps] == ["a9", "shell: rm -rf b", "shell: ls"]
