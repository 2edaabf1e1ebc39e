"""Red team: query numbers on the long-poll and list endpoints. NaN made `?wait=` a wait that never ends (and,
for events, a busy loop on the event loop); negative or huge `limit` / `after` were 503 store errors on
PostgreSQL. All are 400 now, on SQLite and PostgreSQL."""
from __future__ import annotations

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
    with Sandgate(tmp_path_factory.mktemp("redteam-query"), cfg) as sg:
        yield sg


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
