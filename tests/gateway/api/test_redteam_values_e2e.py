"""Red team: values a store cannot hold, and query numbers, are 400 at the API, on PostgreSQL as on SQLite (one
sandgate per store for both).

Before: a NUL in a tool name, a session id (path or query) or an approval id was a 503 `store_unavailable` on
PostgreSQL (TEXT cannot hold NUL), which a client retries forever; a `step` past int32 was accepted and then
blocked every audit write (see tests/gateway/test_redteam_audit.py).

Query numbers on the long-poll and list endpoints: NaN made `?wait=` a wait that never ends (and, for events, a busy
loop on the event loop); negative or huge `limit` / `after` were 503 store errors on PostgreSQL.
"""
from __future__ import annotations

import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG, need
from tests.support.gateway import Sandgate
from tests.support.pg import PG_URL, pg_available


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def gw(request, tmp_path_factory):
    cfg = dict(LOOPBACK_CONFIG)
    if request.param == "postgresql":
        need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
        cfg["store"] = {"url": PG_URL}
    with Sandgate(tmp_path_factory.mktemp("redteam-values"), cfg) as sg:
        yield sg


def assert_400(resp):
    assert resp.status_code == 400, (resp.status_code, resp.text[:300])
    assert set(resp.json()) == {"error", "detail"}


@pytest.mark.parametrize("step", [2 ** 31, 2 ** 70, -1, -(2 ** 63) - 1, 1.5, "3", True])
def test_step_out_of_range_is_400(gw, step):
    sid = gw.session()["id"]
    assert_400(gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "shell", "args": {"command": "ls"},
                                                      "step": step}))


def test_step_in_range_is_fine(gw):
    sid = gw.session()["id"]
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "shell", "args": {"command": "ls"},
                                                  "step": 2 ** 31 - 1})
    assert resp.status_code == 200 and resp.json()["decision"] == "allow"


@pytest.mark.parametrize("body", [
    {"tool": "x\u0000y", "args": {}},
    {"tool": "shell", "args": {"command": "rm -rf x\u0000y"}},
    {"tool": "shell", "args": {"command": "ls", "k\u0000": 1}},
])
def test_nul_in_a_toolcall_is_400(gw, body):
    sid = gw.session()["id"]
    assert_400(gw.call("POST", "/v1/toolcalls", json={"session": sid, **body}))


def test_nul_in_session_fields_is_400(gw):
    assert_400(gw.call("POST", "/v1/sessions", json={"labels": {"a": "x\u0000"}}))
    sid = gw.session()["id"]
    assert_400(gw.call("PATCH", f"/v1/sessions/{sid}", json={"labels": {"k\u0000": "v"}}))
    assert_400(gw.call("POST", "/v1/toolcalls", json={"session": sid + "\u0000", "tool": "x", "args": {}}))


@pytest.mark.parametrize("path", [
    "/v1/sessions/{sid}%00", "/v1/approvals?session={sid}%00", "/v1/events?session={sid}%00",
    "/v1/approvals/a_00%00", "/v1/approvals?status=pending%00", "/v1/events?session={sid}&kind=toolcall%00",
])
def test_nul_in_the_url_is_400(gw, path):
    sid = gw.session()["id"]
    assert_400(gw.call("GET", path.format(sid=sid)))


def test_audit_keeps_writing(gw):
    sid = gw.session()["id"]
    gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "shell", "args": {"command": "ls"}, "step": 7})
    deadline = time.time() + 10
    while not [e for e in gw.events(sid) if e["kind"] == "toolcall"]:
        assert time.time() < deadline, "the tool call was never audited"
        time.sleep(0.2)
    assert requests.get(gw.api + "/healthz", timeout=10).json()["audit"]["status"] == "ok"
    assert "Traceback" not in gw.log()


# -- query numbers ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def asked(gw):
    sid = gw.session()["id"]
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "deploy", "args": {"target": "x"}})
    assert resp.json()["decision"] == "ask"
    return sid, resp.json()["approval_id"]


@pytest.mark.parametrize("query", [
    "wait=nan", "wait=NaN", "after=1&wait=nan", "after=1&wait=-nan", "limit=-1", "limit=nan",
    "after=99999999999999999999", "after=-99999999999999999999", "limit=99999999999999999999999",
])
def test_events_query_numbers(gw, asked, query):
    sid, _ = asked
    try:
        resp = gw.call("GET", f"/v1/events?session={sid}&{query}", timeout=15)
    except requests.Timeout:
        pytest.fail(f"?{query} never answered")
    assert resp.status_code == 400, (resp.status_code, resp.text[:200])
    assert set(resp.json()) == {"error", "detail"}


@pytest.mark.parametrize("wait", ["nan", "-nan", "NaN"])
def test_approval_wait_nan_is_400(gw, asked, wait):
    _, aid = asked
    try:
        resp = gw.call("GET", f"/v1/approvals/{aid}?wait={wait}", timeout=15)
    except requests.Timeout:
        pytest.fail(f"?wait={wait} never answered")
    assert resp.status_code == 400, resp.text[:200]


def test_ordinary_numbers_still_work(gw, asked):
    sid, aid = asked
    assert gw.call("GET", f"/v1/events?session={sid}&limit=0").json() == []
    assert gw.call("GET", f"/v1/events?session={sid}&after=0&wait=0.1").status_code == 200
    assert gw.call("GET", f"/v1/events?session={sid}&after=-1").status_code == 200
    assert gw.call("GET", f"/v1/approvals/{aid}?wait=0").json()["status"] == "pending"
    assert gw.call("GET", f"/v1/approvals/{aid}?wait=-5").json()["status"] == "pending"     # clamped to 0
