"""The tool-call decision table through the real HTTP API of a running sandgate."""
from __future__ import annotations

import pytest

from tests.conftest import LOOPBACK_CONFIG
from tests.gateway.toolcalls.test_toolcall_policy import BASE_SESSION, CASES
from tests.support.gateway import Sandgate


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    # the table files more asks per session than sessions.max_pending_approvals allows by default (its subject)
    cfg = {**LOOPBACK_CONFIG, "sessions": {"max_pending_approvals": 10000}}
    with Sandgate(tmp_path_factory.mktemp("toolcalls"), cfg) as sg:
        sg.sessions = {}
        sg.denied_in_a_row = {}
        yield sg


def session_for(sg, overrides: dict) -> str:
    key = tuple(sorted((k, str(v)) for k, v in overrides.items()))
    # a table row is decided on its own: after denial_streak (3) denials in a row a session's mutating calls ask
    # (toolcall.after_denials, tested on its own), so the next row gets a fresh session
    if key not in sg.sessions or sg.denied_in_a_row.get(sg.sessions[key], 0) >= 3:
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
    gw.denied_in_a_row[sid] = gw.denied_in_a_row.get(sid, 0) + 1 if body["decision"] == "deny" else 0
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


def toolcall(sg, sid: str, tool: str, args: dict) -> dict:
    resp = sg.call("POST", "/v1/toolcalls", json={"session": sid, "tool": tool, "args": args, "step": 1})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_history_and_session_paths_survive_a_restart(gw):
    """Restarts the module's sandgate (its sessions and their history are in its store: the table's rows after
    this one see what they saw before)."""
    sg = gw
    sid = sg.session(workload="persistent")["id"]
    assert toolcall(sg, sid, "shell", {"command": "ln -s ~ home"})["decision"] == "allow"
    assert toolcall(sg, sid, "write_file", {"path": "x.sh", "content": "rm -rf /\n"})["decision"] == "allow"
    for command in ("rm -rf ~", "rm -rf /", "find / -delete"):
        assert toolcall(sg, sid, "shell", {"command": command})["decision"] == "deny"
    sg.stop()
    sg.start()
    after = toolcall(sg, sid, "shell", {"command": "make install"})
    assert after["decision"] == "ask" and after["codes"] == ["toolcall.after_denials"]
    assert toolcall(sg, sid, "shell", {"command": "rm -rf home/"})["codes"] == ["toolcall.delete_home"]
    assert toolcall(sg, sid, "shell", {"command": "bash x.sh"})["codes"] == ["toolcall.delete_root"]
    other = sg.session(workload="persistent")["id"]       # session-scoped: another session sees none of it
    assert toolcall(sg, other, "shell", {"command": "bash x.sh"})["decision"] == "allow"
    assert toolcall(sg, other, "shell", {"command": "rm -rf home/"})["codes"] == ["toolcall.delete"]


def test_history_sees_calls_not_yet_written_and_audit_records_facts(gw):
    sid = gw.session(workload="persistent")["id"]
    for command in ("rm -rf ~", "rm -rf /", "find / -delete"):
        assert toolcall(gw, sid, "shell", {"command": command})["decision"] == "deny"
    assert toolcall(gw, sid, "shell", {"command": "make"})["codes"] == ["toolcall.after_denials"]
    assert gw.call("PATCH", f"/v1/sessions/{sid}", json={"frozen": True}).status_code == 200
    toolcall(gw, sid, "shell", {"command": "echo x > out.txt"})
    events = [e for e in gw.events(sid) if e["kind"] == "toolcall"]
    assert [e["action"] for e in events] == ["deny", "deny", "deny", "ask", "ask"]


def test_a_freeze_lifted_then_a_delete_asks_with_its_code(gw):
    sid = gw.session(workload="persistent")["id"]
    assert gw.call("PATCH", f"/v1/sessions/{sid}", json={"frozen": True}).status_code == 200
    assert toolcall(gw, sid, "shell", {"command": "ls"})["decision"] == "allow"
    assert gw.call("PATCH", f"/v1/sessions/{sid}", json={"frozen": False}).status_code == 200
    body = toolcall(gw, sid, "delete_file", {"path": "notes.txt"})
    assert body["codes"] == ["toolcall.after_freeze", "toolcall.delete"]
    assert toolcall(gw, sid, "delete_file", {"path": "notes2.txt"})["codes"] == ["toolcall.delete"]
