"""The approval queue through the API and CLI: races, expiry, restarts, roles, quorum."""
from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate, gateway_cli


def file_deploy(sg, sid, target="prod"):
    resp = sg.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "deploy", "args": {"target": target},
                                                  "step": 1})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["decision"] == "ask" and body["approval_id"], body
    return body["approval_id"]


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("queue"), LOOPBACK_CONFIG) as sg:
        sg.alice = sg.token("approver", "alice")
        sg.bob = sg.token("approver", "bob")
        yield sg


def test_approve_deny_race_exactly_one_wins(gw):
    sid = gw.session()["id"]
    aid = file_deploy(gw, sid, "race")
    barrier = threading.Barrier(2)
    results = {}

    def decide(who, verb, token):
        barrier.wait()
        results[who] = gw.call("POST", f"/v1/approvals/{aid}/{verb}", token, json={"reason": f"{who} says so"})
    threads = [threading.Thread(target=decide, args=("alice", "approve", gw.alice)),
               threading.Thread(target=decide, args=("bob", "deny", gw.bob))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in results.values())
    assert codes == [200, 409], {k: (v.status_code, v.text) for k, v in results.items()}
    events = [e for e in gw.events(sid) if e["kind"] in ("approval.approved", "approval.denied")
              and e["detail"].get("approval_id") == aid]
    assert len(events) == 1


def test_long_poll_returns_on_decision_and_roles(gw):
    sess = gw.session()
    aid = file_deploy(gw, sess["id"], "poll")
    out = {}

    def poll():
        # waits up to the cap (300 s): a poll not woken by the decision is still waiting when joined below
        out["resp"] = gw.call("GET", f"/v1/approvals/{aid}?wait=300", timeout=330)
    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)
    # Nobody but an approver decides: not the harness that filed it, not a session token.
    assert gw.call("POST", f"/v1/approvals/{aid}/approve", json={}).status_code == 403
    assert gw.call("POST", f"/v1/approvals/{aid}/approve", sess["token"], json={}).status_code == 403
    assert gw.call("POST", f"/v1/approvals/{aid}/approve", "garbage", json={}).status_code == 401
    assert gw.call("POST", f"/v1/approvals/{aid}/approve", gw.alice, json={"reason": "go"}).status_code == 200
    t.join(60)
    assert not t.is_alive(), "the long poll was not woken by the decision"
    assert out["resp"].json()["status"] == "approved"
    assert out["resp"].json()["used_at"] is not None, "the harness read uses the approval"


def test_admin_filing_cannot_decide_own(gw):
    admin = gw.token("admin", "root")
    sid = gw.call("POST", "/v1/sessions", admin, json={}).json()["id"]
    resp = gw.call("POST", "/v1/toolcalls", admin, json={"session": sid, "tool": "deploy", "args": {"target": "x"}})
    aid = resp.json()["approval_id"]
    assert gw.call("POST", f"/v1/approvals/{aid}/approve", admin, json={}).status_code == 403


def test_identical_toolcall_after_approval_allowed_once(gw):
    sid = gw.session()["id"]
    aid = file_deploy(gw, sid, "once")
    again = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "deploy", "args": {"target": "once"}})
    assert again.json()["approval_id"] == aid, "a retry while pending joins the same item"
    gw.call("POST", f"/v1/approvals/{aid}/approve", gw.alice, json={})
    first = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "deploy", "args": {"target": "once"}})
    assert first.json()["decision"] == "allow" and first.json()["approval_id"] == aid
    second = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "deploy", "args": {"target": "once"}})
    assert second.json()["decision"] == "ask" and second.json()["approval_id"] != aid
    other = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "deploy", "args": {"target": "twice"}})
    assert other.json()["decision"] == "ask"


def test_session_delete_cancels_pending(gw):
    sid = gw.session()["id"]
    aid = file_deploy(gw, sid, "cancel")
    assert gw.call("DELETE", f"/v1/sessions/{sid}").status_code == 204
    assert gw.call("GET", f"/v1/approvals/{aid}").json()["status"] == "cancelled"


def test_cli_ls_show_approve_deny(gw):
    sid = gw.session()["id"]
    a1, a2 = file_deploy(gw, sid, "cli-1"), file_deploy(gw, sid, "cli-2")

    def cli(*args):                 # real processes, forked from the zygote (tests/support/zygote.py)
        return gateway_cli("approvals", *args, "--api-url", gw.api, "--token", gw.alice, timeout=30)
    ls = cli("ls")
    assert ls.returncode == 0 and a1 in ls.stdout and a2 in ls.stdout and "deploy cli-1" in ls.stdout
    assert cli("show", a1).returncode == 0
    assert cli("approve", a1, "--reason", "fine").returncode == 0
    denied = cli("deny", a2, "--reason", "no")
    assert denied.returncode == 0
    again = cli("deny", a2, "--reason", "no")
    assert again.returncode == 1 and "409" in again.stderr
    statuses = {i: gw.call("GET", f"/v1/approvals/{i}", gw.alice).json()["status"] for i in (a1, a2)}
    assert statuses == {a1: "approved", a2: "denied"}


def test_expired_item_denies_waiting_side(tmp_path):
    cfg = {**LOOPBACK_CONFIG, "approvals": {"ttl_s": 1}}
    with Sandgate(tmp_path, cfg) as sg:
        sid = sg.session()["id"]
        aid = file_deploy(sg, sid)
        resp = sg.call("GET", f"/v1/approvals/{aid}?wait=10")
        assert resp.json()["status"] == "expired"
        late = sg.call("POST", f"/v1/approvals/{aid}/approve", sg.token("approver", "late"), json={})
        assert late.status_code == 409


def test_pending_items_survive_restart_and_stay_approvable(gw):
    sid = gw.session()["id"]
    aid = file_deploy(gw, sid, "restart")
    gw.stop()
    gw.start()
    item = gw.call("GET", f"/v1/approvals/{aid}").json()
    assert item["status"] == "pending"
    ok = gw.call("POST", f"/v1/approvals/{aid}/approve", gw.alice, json={"reason": "ok"})
    assert ok.status_code == 200 and ok.json()["status"] == "approved"


# test_quorum_needs_distinct_approvers (approvals.quorum = 2) is in test_access_e2e.py, on its quorum sandgate
