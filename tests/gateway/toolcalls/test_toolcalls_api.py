"""The tool-call decision table through the real HTTP API of a running sandgate."""
from __future__ import annotations

import pytest

from tests.conftest import LOOPBACK_CONFIG
from tests.gateway.toolcalls.test_toolcall_policy import BASE_SESSION, CASES
from tests.support.gateway import Sandgate


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("toolcalls"), LOOPBACK_CONFIG) as sg:
        sg.sessions = {}
        yield sg


def session_for(sg, overrides: dict) -> str:
    key = tuple(sorted((k, str(v)) for k, v in overrides.items()))
    if key not in sg.sessions:
        body = {"workload": overrides.get("workload", BASE_SESSION["workload"]),
                "allow": overrides.get("allow", BASE_SESSION["allow"]),
                "workspace": overrides.get("workspace", BASE_SESSION["workspace"])}
        sid = sg.session(**body)["id"]
        if overrides.get("frozen"):
            assert sg.call("PATCH", f"/v1/sessions/{sid}", json={"frozen": True}).json()["frozen"] is True
        sg.sessions[key] = sid
    return sg.sessions[key]


def test_table_has_at_least_60_cases():
    assert len(CASES) >= 60


@pytest.mark.parametrize("name, overrides, tool, args, expected", CASES, ids=[c[0] for c in CASES])
def test_toolcall_decision_via_api(gw, name, overrides, tool, args, expected):
    sid = session_for(gw, overrides)
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": tool, "args": args, "step": 7})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["decision"] == expected, body
    assert body["reasons"], "every decision carries a human-readable reason"
    assert ("approval_id" in body) == (expected == "ask")


def test_toolcall_audited_with_step(gw):
    sid = session_for(gw, {})
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "shell", "args": {"command": "ls"},
                                                  "step": 42})
    events = [e for e in gw.events(sid) if e["request_id"] == resp.json()["id"]]
    assert len(events) == 1 and events[0]["step"] == 42 and events[0]["kind"] == "toolcall"
    assert events[0]["action"] == "allow"


@pytest.mark.parametrize("body, status", [
    ({"tool": "shell", "args": {}}, 400),
    ({"session": "s_nope", "tool": "shell", "args": {"command": "ls"}}, 404),
    ({"session": "x", "tool": "shell", "args": "rm -rf /"}, 400),
    ({"session": "x", "tool": 5}, 400),
])
def test_malformed_toolcalls_rejected(gw, body, status):
    resp = gw.call("POST", "/v1/toolcalls", json=body)
    assert resp.status_code == status
    assert set(resp.json()) == {"error", "detail"}


def test_session_token_refused_on_api(gw):
    sess = gw.session()
    resp = gw.call("POST", "/v1/toolcalls", sess["token"], json={"session": sess["id"], "tool": "shell",
                                                                 "args": {"command": "ls"}})
    assert resp.status_code == 403
