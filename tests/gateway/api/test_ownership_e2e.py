"""Who may call what: the caller matrix, with harness ownership (a harness sees only the sessions it created)."""
from __future__ import annotations

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("owners"), LOOPBACK_CONFIG) as sg:
        callers = {"alice": sg.token("harness", "alice"), "bob": sg.token("harness", "bob"),
                   "admin": sg.token("admin", "root"), "approver": sg.token("approver", "pat")}
        mine = sg.call("POST", "/v1/sessions", callers["alice"], json={"allow": ["allowed.test"]}).json()
        callers["session"] = mine["token"]
        ask = sg.call("POST", "/v1/toolcalls", callers["alice"],
                      json={"session": mine["id"], "tool": "deploy", "args": {"target": "prod"}}).json()
        assert ask["decision"] == "ask"
        yield sg, callers, mine["id"], ask["approval_id"]


def call(sg, token, method, path, **kw):
    return requests.request(method, sg.api + path, headers={"Authorization": f"Bearer {token}"}, timeout=20, **kw)


# (method, path, body) of everything a harness does with one session; {sid} and {aid} are alice's.
SESSION_CALLS = [
    ("GET", "/v1/sessions/{sid}", None),
    ("PATCH", "/v1/sessions/{sid}", {"labels": {"x": "y"}}),
    ("POST", "/v1/toolcalls", {"session": "{sid}", "tool": "read_file", "args": {"path": "/workspace/a"}}),
    ("GET", "/v1/events?session={sid}", None),
    ("GET", "/v1/approvals/{aid}", None),
    ("GET", "/v1/approvals/{aid}?wait=0", None),
]

# caller -> expected status for each SESSION_CALLS entry
MATRIX = {
    "alice": [200, 200, 200, 200, 200, 200],        # the owner
    "bob": [404, 404, 404, 404, 404, 404],          # another harness: nothing exists for it
    "admin": [200, 200, 200, 200, 200, 200],        # everything
    "approver": [403, 403, 403, 200, 200, 200],     # approvals (and audit context), never sessions
    "session": [403, 403, 403, 403, 403, 403],      # a valid token of the wrong role: the proxy only
}


def fill(value, sid, aid):
    if isinstance(value, str):
        return value.replace("{sid}", sid).replace("{aid}", aid)
    if isinstance(value, dict):
        return {k: fill(v, sid, aid) for k, v in value.items()}
    return value


@pytest.mark.parametrize("caller", list(MATRIX))
def test_caller_matrix_for_one_session(world, caller):
    sg, callers, sid, aid = world
    for (method, path, body), expected in zip(SESSION_CALLS, MATRIX[caller]):
        kw = {"json": fill(body, sid, aid)} if body is not None else {}
        resp = call(sg, callers[caller], method, fill(path, sid, aid), **kw)
        assert resp.status_code == expected, (caller, method, path, resp.text)
        if expected == 404:
            assert resp.json()["error"] == "not_found"


def test_lists_show_only_what_the_caller_owns(world):
    sg, callers, sid, aid = world
    bob_sid = call(sg, callers["bob"], "POST", "/v1/sessions", json={}).json()["id"]
    alice_sessions = {s["id"] for s in call(sg, callers["alice"], "GET", "/v1/sessions").json()}
    bob_sessions = {s["id"] for s in call(sg, callers["bob"], "GET", "/v1/sessions").json()}
    admin_sessions = {s["id"] for s in call(sg, callers["admin"], "GET", "/v1/sessions").json()}
    assert sid in alice_sessions and bob_sid not in alice_sessions
    assert bob_sessions == {bob_sid}
    assert {sid, bob_sid} <= admin_sessions
    assert aid not in [a["id"] for a in call(sg, callers["bob"], "GET", "/v1/approvals?status=").json()]
    assert aid in [a["id"] for a in call(sg, callers["alice"], "GET", "/v1/approvals?status=").json()]
    assert aid in [a["id"] for a in call(sg, callers["approver"], "GET", "/v1/approvals?status=").json()]
    bob_events = call(sg, callers["bob"], "GET", "/v1/events").json()
    assert bob_events and {e["session"] for e in bob_events} == {bob_sid}
    assert sid in {e["session"] for e in call(sg, callers["admin"], "GET", "/v1/events").json()}


def test_another_harness_cannot_end_or_freeze_a_session(world):
    sg, callers, sid, _aid = world
    assert call(sg, callers["bob"], "DELETE", f"/v1/sessions/{sid}").status_code == 404
    assert call(sg, callers["bob"], "PATCH", f"/v1/sessions/{sid}", json={"frozen": True}).status_code == 404
    row = call(sg, callers["alice"], "GET", f"/v1/sessions/{sid}").json()
    assert row["status"] == "active" and row["frozen"] is False
    # An unknown session and another harness's session answer exactly alike.
    unknown = call(sg, callers["bob"], "GET", "/v1/sessions/s_0000000000000000")
    foreign = call(sg, callers["bob"], "GET", f"/v1/sessions/{sid}")
    assert (unknown.status_code, unknown.json()) == (foreign.status_code, foreign.json())


def test_approvals_are_decided_by_approvers_only(world):
    sg, callers, sid, _aid = world
    item = call(sg, callers["alice"], "POST", "/v1/toolcalls",
                json={"session": sid, "tool": "deploy", "args": {"target": "staging"}}).json()
    assert call(sg, callers["alice"], "POST", f"/v1/approvals/{item['approval_id']}/approve",
                json={}).status_code == 403
    assert call(sg, callers["bob"], "POST", f"/v1/approvals/{item['approval_id']}/approve",
                json={}).status_code == 403
    assert call(sg, callers["approver"], "POST", f"/v1/approvals/{item['approval_id']}/approve",
                json={}).status_code == 200


def test_admin_deletes_any_session(world):
    sg, callers, _sid, _aid = world
    other = call(sg, callers["bob"], "POST", "/v1/sessions", json={}).json()["id"]
    assert call(sg, callers["admin"], "DELETE", f"/v1/sessions/{other}").status_code == 204
    assert call(sg, callers["bob"], "GET", f"/v1/sessions/{other}").json()["status"] == "deleted"


@pytest.mark.parametrize("role, ident, created_by, visible", [
    ("admin", "admin:root", "harness:alice", True),
    ("harness", "harness:alice", "harness:alice", True),
    ("harness", "harness:bob", "harness:alice", False),
    ("harness", "harness:alice", "", False),
    ("approver", "approver:alice", "approver:alice", False),
    ("session", "session:s_1", "session:s_1", False),
])
def test_owns(role, ident, created_by, visible):
    from gateway.sessions.spec import owns
    from gateway.store.records import Session

    row = Session(id="s_1", workload="ephemeral", created_at=0.0, expires_at=1.0, created_by=created_by)
    assert owns(role, ident, row) is visible
