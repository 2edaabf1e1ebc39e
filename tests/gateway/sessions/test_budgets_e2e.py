"""Budgets through a real sandgate: a download through the proxy spends a session's bytes_in budget, the next
request asks (budget.exceeded), the counters survive a restart, PATCH raises the budget and the request goes
through; a tool-call budget; a burst of denials freezes the session and audits an alert (two replicas on one
PostgreSQL share the counters: tests/gateway/approvals/test_access_replicas_e2e.py)."""
from __future__ import annotations

import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate

BUDGET = 100_000
DOWNLOAD = 300_000


def budget_config(**budgets) -> dict:
    return {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "hold_timeout_s": 2},
            "budgets": {"persistent": budgets}}


def session_view(sg: Sandgate, sid: str) -> dict:
    r = sg.call("GET", f"/v1/sessions/{sid}")
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(what, timeout: float = 20.0):
    deadline = time.time() + timeout
    while True:
        got = what()
        if got or time.time() > deadline:
            return got
        time.sleep(0.1)


def codes(sg: Sandgate, sid: str) -> list[str]:
    return [c for e in sg.events(sid) for c in e.get("codes") or []]


@pytest.fixture(scope="module")
def sg(tmp_path_factory):
    """One sandgate for the two single-replica tests (each with sessions of its own): the workload's bytes_in budget
    is the first's subject, its denials_per_10m the second's; neither test comes near the other's budget (the first
    has one denial, the second downloads a few hundred bytes)."""
    with Sandgate(tmp_path_factory.mktemp("budgets"), budget_config(bytes_in=BUDGET, denials_per_10m=3)) as running:
        yield running


def test_download_spends_the_budget_next_request_asks_patch_lets_it_through(sg, upstream):
    sess = sg.session(workload="persistent", allow=["allowed.test"])
    sid = sess["id"]
    base = f"http://allowed.test:{upstream.port}"
    view = session_view(sg, sid)
    assert view["budgets"]["bytes_in"] == BUDGET and view["budgets_spent"] == []
    r = requests.get(f"{base}/big/{DOWNLOAD}", proxies=sess["proxies"], timeout=60)
    assert r.status_code == 200 and len(r.content) == DOWNLOAD
    assert wait_for(lambda: session_view(sg, sid)["budgets_spent"] == ["bytes_in"])
    assert session_view(sg, sid)["stats"]["bytes_in"] >= DOWNLOAD
    # The next request asks: held for approval, and (nobody deciding) refused when the hold runs out.
    r = requests.get(f"{base}/after", proxies=sess["proxies"], timeout=60)
    assert r.status_code == 403 and r.json()["code"] == "approval.timeout", r.text
    asked = sg.call("GET", f"/v1/approvals?session={sid}", sg.token("approver", "alice")).json()
    assert asked and "the session spent its bytes_in budget" in asked[-1]["reasons"][0]
    filed = [e for e in sg.events(sid) if e["kind"] == "approval.filed"]
    assert filed and "budget" in filed[-1]["reasons"][0]
    # The counters survive a restart: the budget is still spent.
    sg.stop()
    sg.start()
    assert session_view(sg, sid)["budgets_spent"] == ["bytes_in"]
    # PATCH raises this session's budget: the request goes through.
    r = sg.call("PATCH", f"/v1/sessions/{sid}", json={"budgets": {"bytes_in": 10 * DOWNLOAD}})
    assert r.status_code == 200 and r.json()["budgets"]["bytes_in"] == 10 * DOWNLOAD, r.text
    assert r.json()["budgets_spent"] == []
    r = requests.get(f"{base}/after", proxies=sess["proxies"], timeout=60)
    assert r.status_code == 200 and r.text == "hello from upstream\n"
    # Bad budgets are refused; another session keeps the workload's budget.
    for bad in ({"bytes_inn": 1}, {"bytes_in": -1}, {"bytes_in": "1"}):
        assert sg.call("PATCH", f"/v1/sessions/{sid}", json={"budgets": bad}).status_code == 400
    other = sg.session(workload="persistent", allow=["allowed.test"])
    assert session_view(sg, other["id"])["budgets"]["bytes_in"] == BUDGET
    patched = [e for e in sg.events(sid) if e["kind"] == "session.updated" and e["action"] == "patch"]
    assert patched and patched[-1]["detail"]["budgets"] == {"bytes_in": 10 * DOWNLOAD}


def test_toolcall_budget_and_denial_burst(sg, upstream):
    # A session's own budget, given at creation: two tool calls, the third asks (a read too).
    sess = sg.session(workload="persistent", allow=["allowed.test"], budgets={"toolcalls": 2})
    sid = sess["id"]
    call = {"session": sid, "tool": "read_file", "args": {"path": "/workspace/a"}}
    for _ in range(2):
        assert sg.call("POST", "/v1/toolcalls", json=call).json()["decision"] == "allow"
    third = sg.call("POST", "/v1/toolcalls", json=call).json()
    assert third["decision"] == "ask" and "budget.exceeded" in third["codes"], third
    # Denials past denials_per_10m (3) freeze the session within about a second, with an alert.
    for i in range(4):
        r = requests.get(f"http://other.test:{upstream.port}/probe/{i}", proxies=sess["proxies"], timeout=30)
        assert r.status_code == 403
    assert wait_for(lambda: session_view(sg, sid)["frozen"]), session_view(sg, sid)
    alerts = wait_for(lambda: [e for e in sg.events(sid) if e["kind"] == "session.alert"])
    assert alerts and alerts[0]["codes"] == ["budget.denials"] and alerts[0]["detail"]["denials"] >= 4
    # Frozen: a write asks now (reads still pass).
    r = requests.post(f"http://allowed.test:{upstream.port}/w", data=b"x", proxies=sess["proxies"], timeout=30)
    assert r.status_code == 403 and r.json()["code"] == "approval.timeout"
    # The harness lifts the freeze: it stays lifted (the burst is not counted twice); a new burst freezes again.
    assert sg.call("PATCH", f"/v1/sessions/{sid}", json={"frozen": False}).status_code == 200
    time.sleep(2.5)
    assert not session_view(sg, sid)["frozen"]
    for i in range(4):
        requests.get(f"http://other.test:{upstream.port}/again/{i}", proxies=sess["proxies"], timeout=30)
    assert wait_for(lambda: session_view(sg, sid)["frozen"]), "not frozen again"
    # A session of the same workload that did not burst is untouched.
    calm = sg.session(workload="persistent", allow=["allowed.test"])
    assert not session_view(sg, calm["id"])["frozen"]


# test_replicas_on_postgresql_share_the_counters is in tests/gateway/approvals/test_access_replicas_e2e.py, on that
# module's pair of replicas (configured with this module's budget)
