"""Two replicas on one PostgreSQL: an access request filed through one, approved on the other, grants through
both at once; a withdrawal on one ends it on the other."""
from __future__ import annotations

import time

import requests

from tests.conftest import need
from tests.gateway.test_replicas_pg_e2e import pg_config, start_pair, via
from tests.support.pg import pg_available


def until(check, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_grant_works_through_the_second_replica(tmp_path, upstream):
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    a, b = start_pair(tmp_path, pg_config())
    try:
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
    finally:
        b.stop()
        a.stop()
