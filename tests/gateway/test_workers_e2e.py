"""`sandgate serve --workers N`: N processes share the proxy and API ports (SO_REUSEPORT) and agree through the
PostgreSQL store and its notifications; with SQLite more than one worker is refused."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG, need
from tests.support.gateway import Sandgate, write_toml
from tests.support.pg import PG_URL, pg_available
from tests.support.threads import background


TRANSPARENT = {"transparent_listen": "127.0.0.1:0", "dns_listen": "127.0.0.1:0"}


@pytest.mark.parametrize("config, workers, message", [
    ({}, "2", "--workers > 1 needs a PostgreSQL store"),
    ({"store": {"url": "sqlite:////tmp/x.db"}}, "3", "--workers > 1 needs a PostgreSQL store"),
    ({"store": {"url": PG_URL}, "proxy": TRANSPARENT}, "2", "--workers > 1 cannot run transparent capture"),
    ({"store": {"url": PG_URL}}, "0", "--workers must be 1 or more"),
])
def test_workers_refused_where_they_cannot_agree(tmp_path, config, workers, message):
    cfg = tmp_path / "sandgate.toml"
    write_toml(cfg, config)
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--data-dir",
                          str(tmp_path / "data"), "--workers", workers], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith(f"sandgate: {message}") and "Traceback" not in out.stderr


def test_workers_with_the_store_unreachable_exit_1_without_a_traceback(tmp_path):
    cfg = tmp_path / "sandgate.toml"
    write_toml(cfg, {"store": {"url": "postgresql+psycopg://sandgate:hunter2@127.0.0.1:1/nope"}})
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--data-dir",
                          str(tmp_path / "data"), "--workers", "2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "sandgate failed to start: OperationalError" in out.stderr
    assert "Traceback" not in out.stderr and "hunter2" not in out.stderr


def owners(pids: list[int], port: int) -> set[int]:
    """The worker pids holding established connections accepted on `port`."""
    out = subprocess.run(["ss", "-Htnp", "state", "established", f"( sport = :{port} )"], capture_output=True,
                         text=True, check=True).stdout
    return {pid for pid in pids if f"pid={pid}," in out}


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    cfg = {**LOOPBACK_CONFIG, "store": {"url": PG_URL},
           "egress": {**LOOPBACK_CONFIG["egress"], "hold_timeout_s": 30},
           # one session holds more than sessions.max_held (8) when its connections all land on one worker
           "sessions": {"max_held": 64}}
    with Sandgate(tmp_path_factory.mktemp("workers"), cfg, serve_args=("--workers", "2")) as sg:
        sg.pids = json.loads((sg.data_dir / "listen.json").read_text())["workers"]
        sg.approver = sg.token("approver", "alice")
        yield sg


def test_holds_and_approvals_work_across_workers(two_workers, upstream):
    sg = two_workers
    assert len(sg.pids) == 2
    sess = sg.session(allow=["allowed.test"])
    held = []

    def hold_more(k: int) -> list[dict]:
        for i in range(len(held), len(held) + k):
            held.append(background(lambda i=i: requests.delete(f"http://allowed.test:{upstream.port}/w/{i}",
                                                               proxies=sess["proxies"], timeout=30)))
        deadline = time.time() + 15
        while True:
            items = sg.call("GET", f"/v1/approvals?status=pending&session={sess['id']}", sg.approver).json()
            if len(items) == len(held):
                return items
            assert time.time() < deadline, f"{len(items)} of {len(held)} holds filed"
            time.sleep(0.05)
    items = hold_more(8)
    # the held connections sit on both workers (the kernel spreads connections over the SO_REUSEPORT sockets;
    # more are opened in the unlikely case that all landed on one)
    while owners(sg.pids, sg.proxy_port) != set(sg.pids):
        assert len(held) < 40, "every held connection went to one worker"
        items = hold_more(4)
    n = len(held)
    # each approval goes through a fresh API connection: some land on the worker not holding the request
    for item in items:
        resp = sg.call("POST", f"/v1/approvals/{item['id']}/approve", sg.approver, json={})
        assert resp.status_code == 200, resp.text
    for t, out in held:
        t.join(15)
        assert out["value"].status_code == 200
    assert len([r for r in upstream.recorder.requests if r.method == "DELETE" and r.path.startswith("/w/")]) == n


def test_a_session_deleted_through_one_worker_is_refused_by_all(two_workers, upstream):
    sg = two_workers
    for i in range(3):
        sess = sg.session(allow=["allowed.test"])
        url = f"http://allowed.test:{upstream.port}/wd/{i}"
        conns: list[requests.Session] = []       # keep-alive connections, until both workers hold some
        while len(conns) < 6 or owners(sg.pids, sg.proxy_port) != set(sg.pids):
            assert len(conns) < 40, "every connection went to one worker"
            conns.append(requests.Session())
            assert conns[-1].get(url, proxies=sess["proxies"], timeout=10).status_code == 200
        assert sg.call("DELETE", f"/v1/sessions/{sess['id']}").status_code == 204
        deleted = time.monotonic()
        pending = set(range(len(conns)))
        while pending:
            for k in list(pending):
                if conns[k].get(url, proxies=sess["proxies"], timeout=10).status_code == 407:
                    pending.discard(k)
            assert time.monotonic() - deleted < 1.5, "a worker kept serving a deleted session"
        for c in conns:
            c.close()


def allowed_egress(sg: Sandgate) -> float:
    """sandgate_decisions_total{kind="egress",action="allow"} as one scrape (a fresh connection) reports it."""
    text = requests.get(sg.api + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("sandgate_decisions_total{") and 'kind="egress"' in line and 'action="allow"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_count_every_worker(two_workers, upstream):
    sg = two_workers
    sess = sg.session(allow=["allowed.test"])
    before = allowed_egress(sg)
    conns: list[requests.Session] = []
    while len(conns) < 10 or owners(sg.pids, sg.proxy_port) != set(sg.pids):
        assert len(conns) < 40, "every connection went to one worker"
        conns.append(requests.Session())
        assert conns[-1].get(f"http://allowed.test:{upstream.port}/m/{len(conns)}", proxies=sess["proxies"],
                             timeout=10).status_code == 200
    scrapes = {allowed_egress(sg) for _ in range(8)}      # fresh connections: both workers answer some
    assert scrapes == {before + len(conns)}
    for c in conns:
        c.close()


def test_a_worker_that_dies_is_started_again(two_workers, upstream):
    sg = two_workers
    victim = sg.pids[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.time() + 60
    while True:
        pids = json.loads((sg.data_dir / "listen.json").read_text())["workers"]
        if victim not in pids:
            break
        assert time.time() < deadline, "the dead worker was not replaced"
        time.sleep(0.2)
    sg.pids = pids
    sess = sg.session(allow=["allowed.test"])
    conns: list[requests.Session] = []
    while owners(sg.pids, sg.proxy_port) != set(sg.pids):      # both workers, the new one included, serve
        assert len(conns) < 40, "every connection went to one worker"
        conns.append(requests.Session())
        assert conns[-1].get(f"http://allowed.test:{upstream.port}/again", proxies=sess["proxies"],
                             timeout=10).status_code == 200
    for c in conns:
        c.close()


def test_stop_stops_every_worker(two_workers):
    """Runs last (defined last): it stops the module's sandgate, whose workers served the tests above (one of them
    started again after a kill -9), rather than starting one more of its own."""
    sg = two_workers
    pids = json.loads((sg.data_dir / "listen.json").read_text())["workers"]
    assert len(pids) == 2
    assert sg.stop() == 0
    for pid in pids:
        deadline = time.time() + 30
        while True:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    state = fh.read().split()[2]
            except FileNotFoundError:
                break
            if state == "Z":
                break
            assert time.time() < deadline, f"worker {pid} still running"
            time.sleep(0.05)
