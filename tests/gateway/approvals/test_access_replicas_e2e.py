"""Two replicas on one PostgreSQL (one pair for the module; each test has sessions and tokens of its own): an access
request filed through one, approved on the other, grants through both at once; a withdrawal on one ends it on the
other; a token revoked on one is refused by the other within a second; a persistent session's budget spent
through one is spent on the other (the pair's configuration carries the budget of tests/gateway/sessions/
test_budgets_e2e.py, which only persistent sessions have, and a short hold for its ask)."""
from __future__ import annotations

import time

import jwt
import pytest
import requests

from tests.conftest import need
from tests.gateway.sessions.test_budgets_e2e import BUDGET, DOWNLOAD, session_view, wait_for
from tests.gateway.test_replicas_pg_e2e import pg_config, start_pair, via
from tests.support.pg import pg_available


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    cfg = pg_config(budgets={"persistent": {"bytes_in": BUDGET}})
    cfg["egress"]["hold_timeout_s"] = 2          # the budget test's ask, not decided, ends in 2 s
    a, b = start_pair(tmp_path_factory.mktemp("replicas"), cfg)
    try:
        yield a, b
    finally:
        b.stop()
        a.stop()


def until(check, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_grant_works_through_the_second_replica(pair, upstream):
    a, b = pair
    sess = a.session(allow=[])
    url = f"http://allowed.test:{upstream.port}/v1/x"
    assert requests.get(url, proxies=via(sess, b), timeout=10).status_code == 403       # b decides it first
    filed = requests.post("http://sandgate.internal/v1/access-requests", proxies=via(sess, a), timeout=10,
                          json={"host": "allowed.test", "reason": "replicas", "methods": ["GET"]})
    assert filed.status_code == 202, filed.text
    aid = filed.json()["id"]
    resp = b.call("POST", f"/v1/approvals/{aid}/approve", b.approver, json={"grant": {"ttl_s": 120}})
    assert resp.status_code == 200 and resp.json()["status"] == "approved", resp.text
    for sg in (b, a):
        assert until(lambda: requests.get(url, proxies=via(sess, sg), timeout=10).status_code == 200), sg
    assert a.call("DELETE", f"/v1/sessions/{sess['id']}/grants/{aid}", a.approver).status_code == 200
    for sg in (a, b):
        assert until(lambda: requests.get(url, proxies=via(sess, sg), timeout=10).status_code == 403), sg


def test_revocation_reaches_another_replica_within_a_second(pair):
    a, b = pair
    admin = a.token("admin", "root")
    victim = a.token("harness", "victim")
    assert b.call("GET", "/v1/sessions", victim).status_code == 200      # cached on b
    assert a.call("POST", "/v1/revocations", admin, json={"jti": jwt.decode(victim, options={"verify_signature": False})["jti"]}).status_code == 201
    revoked_at = time.monotonic()
    while b.call("GET", "/v1/sessions", victim).status_code != 401:
        assert time.monotonic() - revoked_at < 1.0, "replica b still accepts a revoked token"
        time.sleep(0.02)


def test_replicas_on_postgresql_share_the_counters(pair, upstream):
    a, b = pair
    sess = a.session(workload="persistent", allow=["allowed.test"])
    base = f"http://allowed.test:{upstream.port}"
    r = requests.get(f"{base}/big/{DOWNLOAD}", proxies=via(sess, a), timeout=60)
    assert r.status_code == 200
    # Replica b sees a's counts within a counter sync or two, and asks.
    assert wait_for(lambda: session_view(b, sess["id"])["budgets_spent"] == ["bytes_in"])
    r = requests.get(f"{base}/x", proxies=via(sess, b), timeout=60)
    assert r.status_code == 403 and r.json()["code"] == "approval.timeout"
    # Raised on a, through on b.
    assert a.call("PATCH", f"/v1/sessions/{sess['id']}", json={"budgets": {"bytes_in": 0}}).status_code == 200
    # (b's proxy takes the change by notification: an ask still in flight may come first)
    assert wait_for(lambda: requests.get(f"{base}/x", proxies=via(sess, b), timeout=60).status_code == 200)
