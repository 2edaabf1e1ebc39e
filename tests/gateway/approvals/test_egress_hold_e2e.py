"""Held egress requests: released by an approval through the API, denied with a reason, cancelled on disconnect."""
from __future__ import annotations

import socket
import base64
import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.threads import background


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    cfg = {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "hold_timeout_s": 20}}
    with Sandgate(tmp_path_factory.mktemp("hold"), cfg) as sg:
        sg.approver = sg.token("approver", "alice")
        yield sg


def pending_for(sg, sid, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        items = sg.call("GET", f"/v1/approvals?status=pending&session={sid}", sg.approver).json()
        if items:
            return items
        time.sleep(0.05)
    raise AssertionError("no pending approval appeared")




def test_held_delete_released_by_approval_exactly_once(gw, upstream):
    sess = gw.session(allow=["allowed.test"])
    url = f"http://allowed.test:{upstream.port}/items/7"
    t, out = background(lambda: requests.delete(url, proxies=sess["proxies"], timeout=30))
    item = pending_for(gw, sess["id"])[0]
    assert item["kind"] == "egress" and item["summary"] == f"DELETE {url}"
    assert item["action"]["method"] == "DELETE" and "proxy-authorization" not in str(item["action"]).lower()
    assert not any(r.method == "DELETE" for r in upstream.recorder.requests), "held, not forwarded"
    # The session's own token and the harness token cannot decide.
    assert gw.call("POST", f"/v1/approvals/{item['id']}/approve", sess["token"], json={}).status_code in (401, 403)
    assert gw.call("POST", f"/v1/approvals/{item['id']}/approve", json={}).status_code == 403
    resp = gw.call("POST", f"/v1/approvals/{item['id']}/approve", gw.approver, json={"reason": "ok"})
    assert resp.status_code == 200 and resp.json()["status"] == "approved"
    t.join(10)
    assert out["value"].status_code == 200
    deletes = [r for r in upstream.recorder.requests if r.method == "DELETE"]
    assert len(deletes) == 1 and deletes[0].path == "/items/7"
    final = gw.call("GET", f"/v1/approvals/{item['id']}", gw.approver).json()
    assert final["used_at"] is not None and final["decided_by"] == "approver:alice"
    # Used once: the same DELETE again asks again.
    t2, out2 = background(lambda: requests.delete(url, proxies=sess["proxies"], timeout=30))
    again = pending_for(gw, sess["id"])[0]
    assert again["id"] != item["id"]
    gw.call("POST", f"/v1/approvals/{again['id']}/deny", gw.approver, json={"reason": "not twice"})
    t2.join(10)
    assert out2["value"].status_code == 403
    assert "not twice" in out2["value"].json()["reason"]
    assert len([r for r in upstream.recorder.requests if r.method == "DELETE"]) == 1


def test_deny_needs_reason_and_second_decision_409(gw, upstream):
    sess = gw.session(allow=["allowed.test"])
    t, out = background(lambda: requests.delete(f"http://allowed.test:{upstream.port}/x", proxies=sess["proxies"],
                                                 timeout=30))
    item = pending_for(gw, sess["id"])[0]
    assert gw.call("POST", f"/v1/approvals/{item['id']}/deny", gw.approver, json={}).status_code == 400
    assert gw.call("POST", f"/v1/approvals/{item['id']}/deny", gw.approver,
                   json={"reason": "no deletes today"}).status_code == 200
    assert gw.call("POST", f"/v1/approvals/{item['id']}/approve", gw.approver, json={}).status_code == 409
    t.join(10)
    assert out["value"].status_code == 403 and "no deletes today" in out["value"].json()["reason"]


def test_client_disconnect_cancels_item(gw, upstream):
    sess = gw.session(allow=["allowed.test"])
    cred = base64.b64encode(f"x:{sess['token']}".encode()).decode()
    sock = socket.create_connection(("127.0.0.1", gw.proxy_port), timeout=10)
    sock.sendall((f"DELETE http://allowed.test:{upstream.port}/gone HTTP/1.1\r\nHost: allowed.test:{upstream.port}"
                  f"\r\nProxy-Authorization: Basic {cred}\r\nContent-Length: 0\r\n\r\n").encode())
    item = pending_for(gw, sess["id"])[0]
    sock.close()
    deadline = time.time() + 10
    while time.time() < deadline:
        status = gw.call("GET", f"/v1/approvals/{item['id']}", gw.approver).json()["status"]
        if status != "pending":
            break
        time.sleep(0.05)
    assert status == "cancelled"
    assert not any(r.path == "/gone" for r in upstream.recorder.requests)


@pytest.fixture(scope="module")
def brief(tmp_path_factory):
    """A sandgate whose holds time out at once (1 s) and whose approvals cover the same action again for 4 s: the
    reuse tests' (the restart test restarts it)."""
    cfg = {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "hold_timeout_s": 1},
           "approvals": {"reuse_window_s": 4}}
    with Sandgate(tmp_path_factory.mktemp("brief"), cfg) as sg:
        yield sg


def test_identical_retry_after_restart_is_let_through_once(brief, upstream):
    sg = brief
    sess = sg.session(allow=["allowed.test"])
    url = f"http://allowed.test:{upstream.port}/retry/1"
    first = requests.delete(url, proxies=sess["proxies"], timeout=30)
    assert first.status_code == 403 and first.json()["code"] == "approval.timeout"
    item = sg.call("GET", f"/v1/approvals?status=pending&session={sess['id']}", sg.token("approver", "a")).json()[0]
    sg.stop()
    sg.start()
    approver = sg.token("approver", "alice")
    assert sg.call("GET", f"/v1/approvals/{item['id']}", approver).json()["status"] == "pending"
    assert sg.call("POST", f"/v1/approvals/{item['id']}/approve", approver, json={}).status_code == 200
    retry = requests.delete(url, proxies=sess["proxies"], timeout=30)
    assert retry.status_code == 200
    assert len([r for r in upstream.recorder.requests if r.path == "/retry/1"]) == 1
    again = requests.delete(url, proxies=sess["proxies"], timeout=30)
    assert again.status_code == 403, "used once"
    assert len([r for r in upstream.recorder.requests if r.path == "/retry/1"]) == 1


def test_reuse_is_bound_to_headers_and_limited_by_window_and_freeze(brief, upstream):
    """An approved but unused egress item lets the identical request through once: not one whose meaningful
    headers differ, not after approvals.reuse_window_s, not after the session is frozen."""
    sg = brief
    approver = sg.token("approver", "alice")
    sess = sg.session(allow=["allowed.test"])
    url = f"http://allowed.test:{upstream.port}/bind/1"

    def delete(target, **headers):
        return requests.delete(url, proxies=sess["proxies"], timeout=30, headers={"X-Target": target, **headers})

    def approve_pending():
        items = sg.call("GET", f"/v1/approvals?status=pending&session={sess['id']}", approver).json()
        assert items, "nothing pending"
        for item in items:
            assert sg.call("POST", f"/v1/approvals/{item['id']}/approve", approver, json={}).status_code == 200
        return items

    def forwarded():
        return len([r for r in upstream.recorder.requests if r.path == "/bind/1"])

    assert delete("prod").json()["code"] == "approval.timeout"
    approve_pending()
    assert delete("staging").json()["code"] == "approval.timeout"    # another action: not the approved one
    assert forwarded() == 0
    # Date and hop-by-hop headers do not take part: the approved item is used, once.
    assert delete("prod", Date="Mon, 30 Nov 2026 10:00:00 GMT", Connection="close").status_code == 200
    assert forwarded() == 1
    assert delete("prod").json()["code"] == "approval.timeout"
    # Past the reuse window, an approved item is no longer usable.
    approve_pending()
    time.sleep(4.5)
    assert delete("staging").json()["code"] == "approval.timeout"
    assert forwarded() == 1
    # Never after a freeze.
    approve_pending()
    assert sg.call("PATCH", f"/v1/sessions/{sess['id']}", json={"frozen": True}).status_code == 200
    assert delete("staging").json()["code"] == "approval.timeout"
    assert forwarded() == 1
