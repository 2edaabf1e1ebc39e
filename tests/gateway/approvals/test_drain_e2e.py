"""Stopping with requests held for approval (SIGTERM, as the kubelet sends it after the preStop sleep): sandgate
refuses new proxy connections and reports not ready, lets what is held be decided for `egress.drain_s`, answers
what is still held 503 `sandgate.stopping` with its approval left pending, and exits cleanly. The restarted
sandgate still holds that approval: approved, the client's retry goes through once."""
from __future__ import annotations

import json
import signal
import socket
import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.gateway.approvals.test_egress_hold_e2e import pending_for
from tests.support.gateway import Sandgate
from tests.support.threads import background

pytestmark = pytest.mark.e2e

DRAIN_S = 6


def wait_until(check, timeout: float = 20.0, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def running(pid: int) -> bool:
    """Whether the process runs (a worker that has exited stays a zombie until its supervisor reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def readyz(sg) -> int | None:
    try:
        return requests.get(sg.api + "/readyz", timeout=2).status_code
    except requests.RequestException:
        return None


def test_sigterm_drains_held_requests_then_answers_the_rest_503(tmp_path, upstream):
    cfg = {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "hold_timeout_s": 120, "drain_s": DRAIN_S}}
    sg = Sandgate(tmp_path, cfg).start()
    try:
        approver = sg.approver = sg.token("approver", "alice")
        sess = sg.session(allow=["allowed.test"])
        base = f"http://allowed.test:{upstream.port}"
        t1, out1 = background(lambda: requests.delete(base + "/one", proxies=sess["proxies"], timeout=60))
        first = pending_for(sg, sess["id"])[0]
        t2, out2 = background(lambda: requests.delete(base + "/two", proxies=sess["proxies"], timeout=60))
        second = wait_until(lambda: [i for i in pending_for(sg, sess["id"]) if i["id"] != first["id"]],
                            what="the second approval")[0]
        assert readyz(sg) == 200

        sg.proc.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        wait_until(lambda: readyz(sg) == 503, what="/readyz 503 while draining")
        assert requests.get(sg.api + "/readyz", timeout=5).json()["draining"] is True
        with pytest.raises(OSError):                       # no new proxy connection
            socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=5).close()
        assert sg.proc.poll() is None                      # still there: it waits for what it holds

        # An approver decides the first one during the drain: it goes through, as usual.
        r = sg.call("POST", f"/v1/approvals/{first['id']}/approve", approver, json={"reason": "before the stop"})
        assert r.status_code == 200, r.text
        t1.join(30)
        assert out1["value"].status_code == 200
        assert [r.path for r in upstream.recorder.requests if r.method == "DELETE"] == ["/one"]

        # Nobody decides the second: after drain_s it is answered 503, clearly, and sandgate exits 0.
        t2.join(DRAIN_S + 30)
        resp = out2["value"]
        assert resp.status_code == 503, resp.text
        assert resp.json()["code"] == "sandgate.stopping" and "stays pending" in resp.json()["reason"]
        assert sg.proc.wait(30) == 0
        assert DRAIN_S - 1 <= time.monotonic() - stopped_at < DRAIN_S + 30
        assert [r.path for r in upstream.recorder.requests if r.method == "DELETE"] == ["/one"]
    finally:
        sg.stop()

    # The restarted sandgate has the second approval pending still; approved, the client's retry passes once.
    with Sandgate(tmp_path, cfg) as again:
        item = again.call("GET", f"/v1/approvals/{second['id']}", approver).json()
        assert item["status"] == "pending"
        assert again.call("POST", f"/v1/approvals/{second['id']}/approve", approver, json={}).status_code == 200
        proxy = sess["proxy_url"].replace(f":{sg.proxy_port}", f":{again.proxy_port}")    # its new port
        r = requests.delete(base + "/two", proxies={"http": proxy}, timeout=30)
        assert r.status_code == 200
        assert [r.path for r in upstream.recorder.requests if r.method == "DELETE"] == ["/one", "/two"]


def test_a_second_signal_ends_the_drain_and_a_new_ask_is_refused_meanwhile(tmp_path, upstream):
    cfg = {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "hold_timeout_s": 120, "drain_s": 120}}
    sg = Sandgate(tmp_path, cfg).start()
    try:
        sg.approver = sg.token("approver", "alice")
        sess = sg.session(allow=["allowed.test"])
        base = f"http://allowed.test:{upstream.port}"
        keep = requests.Session()                          # a kept-alive connection, opened before the stop
        assert keep.get(base + "/warm", proxies=sess["proxies"], timeout=30).status_code == 200
        t1, out1 = background(lambda: requests.delete(base + "/held", proxies=sess["proxies"], timeout=60))
        pending_for(sg, sess["id"])
        sg.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: readyz(sg) == 503, what="draining")
        # On the connection it already has, a read still passes and a new ask is refused at once.
        assert keep.get(base + "/read", proxies=sess["proxies"], timeout=30).status_code == 200
        r = keep.delete(base + "/new", proxies=sess["proxies"], timeout=30)
        assert r.status_code == 503 and r.json()["code"] == "sandgate.stopping"
        sg.proc.send_signal(signal.SIGTERM)                # the second signal: stop now
        t1.join(30)
        # the held request ended by the stop itself (not by its 120 s hold timeout), and the process exits
        assert out1["value"].status_code == 503 and out1["value"].json()["code"] == "sandgate.stopping"
        assert sg.proc.wait(30) == 0
        paths = [r.path for r in upstream.recorder.requests]
        assert "/held" not in paths and "/new" not in paths and "/read" in paths
    finally:
        sg.stop()


def test_serve_workers_drain_each_worker_on_sigterm(tmp_path, upstream):
    """`serve --workers 2` (PostgreSQL): the supervisor's SIGTERM reaches every worker, each drains what it holds
    (the one holding nothing stops at once, the other waits); an approval given during the drain (on the API of the
    worker still there) releases the held request."""
    from tests.conftest import need
    from tests.support.pg import PG_URL, pg_available

    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    cfg = {**LOOPBACK_CONFIG, "store": {"url": PG_URL},
           "egress": {**LOOPBACK_CONFIG["egress"], "hold_timeout_s": 120, "drain_s": 60}}
    sg = Sandgate(tmp_path, cfg, serve_args=("--workers", "2")).start()
    try:
        sg.approver = sg.token("approver", "alice")
        sess = sg.session(allow=["allowed.test"])
        url = f"http://allowed.test:{upstream.port}/workers-drain"
        t, out = background(lambda: requests.delete(url, proxies=sess["proxies"], timeout=90))
        item = pending_for(sg, sess["id"])[0]
        workers = json.loads((sg.data_dir / "listen.json").read_text())["workers"]
        assert len(workers) == 2 and all(running(pid) for pid in workers)
        sg.proc.send_signal(signal.SIGTERM)
        # The worker holding nothing stops: then every API connection reaches the one that drains (one that met the
        # other's listener as it closed would be reset). Two workers and their supervisor on a loaded machine: 20 s
        # was not always enough (drain_s is 60).
        wait_until(lambda: sum(map(running, workers)) == 1, timeout=45.0, what="the idle worker stopping")
        wait_until(lambda: readyz(sg) == 503, timeout=45.0, what="the holding worker draining")
        assert sg.proc.poll() is None and sum(map(running, workers)) == 1
        r = sg.call("POST", f"/v1/approvals/{item['id']}/approve", sg.approver, json={})
        assert r.status_code == 200, r.text
        t.join(60)
        assert out["value"].status_code == 200
        assert sg.proc.wait(60) == 0                      # nothing held any more: the workers stop, then it does
    finally:
        sg.stop()
    assert [r.path for r in upstream.recorder.requests if r.method == "DELETE"] == ["/workers-drain"]
