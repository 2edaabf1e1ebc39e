"""Hot reload, request smuggling, streaming memory, restart durability (sessions, audit, counters) and clean
shutdown."""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import sqlite3
import time
from pathlib import Path

import h11
import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import ROOT, Sandgate


def get(sess, url, **kw):
    return requests.get(url, proxies=sess["proxies"], timeout=30, **kw)


def wait_for(predicate, timeout=15.0, interval=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not reached in time")


def test_h11_refuses_the_malformed_chunk():
    """CVE-2025-43859: h11 < 0.16 took `5\\r\\nhelloXX0` for a chunk; mitmproxy 12.3 pins h11 0.16 (refuses it)."""
    assert tuple(int(x) for x in h11.__version__.split(".")[:2]) >= (0, 16)


@pytest.fixture(scope="module")
def policy_gw(tmp_path_factory):
    """A sandgate deciding with a copy of the shipped policies that a test may edit, plus a site rule: a budget of
    3 requests a session, for paths under /budget/ only (the shipped files stay as they are)."""
    tmp = tmp_path_factory.mktemp("policy-gw")
    pol = tmp / "policies"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (pol / "site").mkdir()
    (pol / "site" / "budget.rego").write_text(
        "package sandgate.egress\nimport rego.v1\n"
        'deny contains {"code": "egress.budget", "reason": "request budget spent"} if {\n'
        '\tstartswith(input.request.path, "/budget/")\n'
        "\tinput.session.stats.requests >= 3\n}\n")
    with Sandgate(tmp / "gw", {**LOOPBACK_CONFIG, "policy": {"dir": str(pol)}}) as sg:
        sg.policy_dir = pol
        yield sg


def test_policy_hot_reload_and_bad_edit_keeps_last_good(policy_gw, upstream):
    sg, pol = policy_gw, policy_gw.policy_dir
    sess = sg.session(workload="persistent", allow=["allowed.test"])
    url = f"http://other.test:{upstream.port}/"
    assert get(sess, url).status_code == 403
    rev0 = sg.call("GET", "/healthz").json()["policy_rev"]
    data_file = pol / "sandgate" / "config" / "data.json"
    data = json.loads(data_file.read_text())
    data["egress"]["base_allow"].append("other.test")
    data_file.write_text(json.dumps(data))
    rev1 = wait_for(lambda: (r := sg.call("GET", "/healthz").json()["policy_rev"]) != rev0 and r)
    assert get(sess, url).status_code == 200
    # A broken edit: logged, rejected, and the last good policy keeps deciding.
    egress = pol / "sandgate" / "egress.rego"
    good = egress.read_text()
    egress.write_text("package sandgate.egress\nimport rego.v1\ndecision := {\n")
    try:
        wait_for(lambda: "policy reload rejected" in sg.log(), timeout=20)
        health = sg.call("GET", "/healthz").json()
        assert health["policy_rev"] == rev1 and health["policy_error"] is True
        assert get(sess, url).status_code == 200
        assert get(sess, f"http://evil.test:{upstream.port}/").status_code == 403
    finally:
        # the module's sandgate serves other tests: the shipped policy back, and loaded
        data["egress"]["base_allow"].remove("other.test")
        data_file.write_text(json.dumps(data))
        egress.write_text(good)
        wait_for(lambda: sg.call("GET", "/healthz").json()["policy_error"] is False, timeout=60)


def test_malformed_chunk_never_reaches_upstream(loopback_gateway, upstream):
    assert_malformed_chunk_refused(loopback_gateway, upstream)


def assert_malformed_chunk_refused(sg: Sandgate, upstream) -> None:
    """Request smuggling with CVE-2025-43859's malformed chunk: neither request reaches the upstream."""
    sess = sg.session(allow=["allowed.test"])
    cred = base64.b64encode(f"sandbox:{sess['token']}".encode()).decode()
    raw = (f"POST http://allowed.test:{upstream.port}/smuggle HTTP/1.1\r\n"
           f"Host: allowed.test:{upstream.port}\r\nProxy-Authorization: Basic {cred}\r\n"
           "Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n"
           f"GET http://allowed.test:{upstream.port}/second HTTP/1.1\r\n"
           f"Host: allowed.test:{upstream.port}\r\nProxy-Authorization: Basic {cred}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=10) as sock:
        sock.sendall(raw)
        sock.settimeout(3)
        reply = b""
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    time.sleep(0.3)
    assert not any(r.path.startswith("/smuggle") for r in upstream.recorder.requests)
    assert not any(r.body.startswith(b"hello") for r in upstream.recorder.requests)
    assert b" 200 " not in reply.split(b"\r\n", 1)[0]


def test_large_download_streams_with_bounded_memory(loopback_gateway, upstream):
    size = 512 * 1024 * 1024
    sess = loopback_gateway.session(allow=["allowed.test"])
    get(sess, f"http://allowed.test:{upstream.port}/big/{1024 * 1024}")   # warm up
    before = loopback_gateway.rss_kb()
    got = 0
    peak = before
    with get(sess, f"http://allowed.test:{upstream.port}/big/{size}", stream=True) as resp:
        assert resp.status_code == 200
        for i, chunk in enumerate(resp.iter_content(1 << 20)):
            got += len(chunk)
            if i % 16 == 0:
                peak = max(peak, loopback_gateway.rss_kb())
    peak = max(peak, loopback_gateway.rss_kb())
    assert got == size
    grew_mb = (peak - before) / 1024
    assert grew_mb < 100, f"RSS grew by {grew_mb:.0f} MB while streaming {size >> 20} MiB"


def test_sessions_survive_restart_and_sigterm_is_prompt(loopback_gateway, upstream):
    sg = loopback_gateway                      # restarted here: the tests after this one use the new process
    sess = sg.session(allow=["allowed.test"])
    assert get(sess, f"http://allowed.test:{upstream.port}/one").status_code == 200
    denied = get(sess, f"http://other.test:{upstream.port}/")
    assert sg.stop() == 0                      # exits 0 on SIGTERM alone (stop() kills and raises after its wait)
    sg.start()
    assert get(sess, f"http://allowed.test:{upstream.port}/two").status_code == 200
    events = sg.events(sess["id"])
    assert any(e["request_id"] == denied.json()["request_id"] for e in events), "audit flushed on SIGTERM"
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_session_stats_reach_the_policy(policy_gw, upstream):
    """A policy can budget a session: input.session.stats counts its requests (and is never cached stale)."""
    sess = policy_gw.session(allow=["allowed.test"])
    codes = [get(sess, f"http://allowed.test:{upstream.port}/budget/same").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 403, 403]


def children_of(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_policy_workers_fork_from_a_forker_and_start_anew_without_it(policy_gw, upstream):
    """serve forks a forker before its loop starts (gateway/policy/forker.py); each policy worker is a child of it
    holding only its stdin, stdout and stderr. A worker killed is replaced by a forked one; once the forker is gone,
    workers start as new processes of serve's. The last test of policy_gw: its forker ends killed."""
    sg = policy_gw
    sess = sg.session(allow=["allowed.test"])
    hosts = iter(range(10**6))

    def decided() -> dict:                   # a new host each time: a decision of a worker, never of the cache
        resp = get(sess, f"http://h{next(hosts)}.other.test:{upstream.port}/")
        assert resp.status_code == 403
        return resp.json()

    (forker,) = children_of(sg.proc.pid)
    # a reload's retired workers may still be closing
    workers = wait_for(lambda: len(children_of(forker)) == 2 and children_of(forker), timeout=30)
    for pid in workers:
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd")) == [0, 1, 2]
    assert decided()["code"] != "policy.error"
    os.kill(workers[0], signal.SIGKILL)
    wait_for(lambda: decided() and workers[0] not in (now := children_of(forker)) and len(now) == 2, timeout=60)
    assert decided()["code"] != "policy.error"
    worker = children_of(forker)[0]          # read first: a killed forker's workers are no longer its children
    os.kill(forker, signal.SIGKILL)
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: decided() and any(p != forker for p in children_of(sg.proc.pid)), timeout=60)
    assert forker not in children_of(sg.proc.pid)           # reaped
    wait_for(lambda: decided()["code"] != "policy.error", timeout=60)
    assert "the policy worker forker exited; policy workers start as new processes" in sg.log()


def test_large_upload_to_denied_host_does_not_fill_memory(loopback_gateway, upstream):
    """Regression: mitmproxy buffered a refused request's whole body before answering (memory exhaustion)."""
    sess = loopback_gateway.session(allow=["allowed.test"])
    before = loopback_gateway.rss_kb()

    def body():
        chunk = b"x" * (1 << 20)
        for _ in range(200):
            yield chunk
    try:
        # sandgate stops reading the refused body and closes the connection: the client gets a reset (or the 403)
        resp = requests.post(f"http://other.test:{upstream.port}/upload", data=body(), proxies=sess["proxies"],
                             timeout=15)
        assert resp.status_code == 403
    except requests.exceptions.ConnectionError:
        pass    # the body is not drained: the connection is closed
    grew_mb = (loopback_gateway.rss_kb() - before) / 1024
    assert grew_mb < 50, f"RSS grew by {grew_mb:.0f} MB for a refused 200 MiB upload"
    assert not any(r.path == "/upload" for r in upstream.recorder.requests)
    denied = [e for e in loopback_gateway.events(sess["id"]) if e["path"] == "/upload"]
    assert denied and denied[0]["action"] == "deny" and denied[0]["codes"] == ["egress.not_allowlisted"]
    # A small refused body still gets the 403 JSON answer.
    small = requests.post(f"http://other.test:{upstream.port}/small", data=b"x" * 1000, proxies=sess["proxies"],
                          timeout=20)
    assert small.status_code == 403 and small.json()["code"] == "egress.not_allowlisted"


def test_refused_upload_is_answered_or_closed_not_left_hanging(loopback_gateway, upstream):
    """A client still sending a refused body gets the 403 or the connection's end, not silence until it gives up:
    sandgate stops reading such a body, so it must close the connection."""
    sess = loopback_gateway.session(allow=["allowed.test"])
    cred = base64.b64encode(f"sandbox:{sess['token']}".encode()).decode()
    for framing in (f"Content-Length: {200 << 20}", "Transfer-Encoding: chunked"):
        head = (f"POST http://other.test:{upstream.port}/upload HTTP/1.1\r\nHost: other.test:{upstream.port}\r\n"
                f"Proxy-Authorization: Basic {cred}\r\n{framing}\r\n\r\n").encode()
        chunk = b"x" * (1 << 16)
        if framing.startswith("Transfer"):
            chunk = b"%x\r\n%s\r\n" % (len(chunk), chunk)
        reply = b""
        # the timeout only guards against the hang: an answer or a reset comes at once
        with socket.create_connection(("127.0.0.1", loopback_gateway.proxy_port), timeout=30) as sock:
            try:
                sock.sendall(head)
                for _ in range(32 * 16):            # up to 32 MiB, far past what sandgate reads of it
                    sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
            except socket.timeout:
                raise AssertionError(f"{framing}: the send stalled, neither answered nor closed") from None
            try:
                while data := sock.recv(65536):
                    reply += data
            except ConnectionResetError:
                pass
            except socket.timeout:
                raise AssertionError(f"{framing}: neither an answer nor the connection's end") from None
        assert reply == b"" or reply.startswith(b"HTTP/1.1 403 "), reply[:200]
    assert not any(r.path == "/upload" for r in upstream.recorder.requests)


def test_sigterm_keeps_the_counts_taken_since_the_last_sync(loopback_gateway):
    """A session's counters (`input.session.stats`: tool calls, requests, ...) survive a stop: SIGTERM writes the
    counts taken since the last sync (regression: they were synced once a second by a background task that the
    stop cancelled, so a restart forgot up to a second of tool calls, and a policy limiting them saw fewer).
    Runs last (defined last): it ends with the module's sandgate stopped."""
    sg = loopback_gateway
    sess = sg.session(allow=["allowed.test"])
    for step in range(40):
        resp = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": "shell", "step": step,
                                                     "args": {"command": f"echo {step}"}})
        assert resp.status_code == 200, resp.text
    assert sg.stop() == 0
    with sqlite3.connect(sg.data_dir / "sandgate.db") as db:
        row = db.execute("SELECT toolcalls FROM session_stats WHERE session = ?", (sess["id"],)).fetchone()
    assert row is not None and row[0] == 40

    sg.start()                                 # and the restarted process goes on from there
    try:
        resp = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": "shell", "step": 40,
                                                     "args": {"command": "echo again"}})
        assert resp.status_code == 200, resp.text
    finally:
        assert sg.stop() == 0
    with sqlite3.connect(sg.data_dir / "sandgate.db") as db:
        assert db.execute("SELECT toolcalls FROM session_stats WHERE session = ?",
                          (sess["id"],)).fetchone()[0] == 41
