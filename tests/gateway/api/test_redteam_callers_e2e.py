"""Red team: every API endpoint against every kind of caller, on a real sandgate.

DESIGN "Who may call what": a missing or invalid token is 401 (garbage, expired, revoked, a page cookie used
as a bearer token), a valid token of the wrong role 403 (a session token, always: the proxy only), another
harness's session 404; revocation reaches the API, the page and the proxy.

Hostile JSON bodies on every endpoint are 400 `bad_json` with a JSON error, never 500, never a crashed policy
worker, and never a row that poisons the session's later decisions (its history).

Harness ownership: a harness sees only the sessions it created (the caller matrix for one session, lists, who
decides, who deletes). One sandgate for the three.
"""
from __future__ import annotations

import time

import jwt
import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("redteam-callers"), LOOPBACK_CONFIG) as sg:
        sg.admin = sg.token("admin", "root")
        sg.approver = sg.token("approver", "ann")
        sg.other = sg.token("harness", "other")
        yield sg


def page_cookie(gw, token: str) -> str:
    s = requests.Session()
    resp = s.post(gw.api + "/login", data={"token": token, "next": "/"}, allow_redirects=False, timeout=10)
    assert resp.status_code == 303, resp.text
    return next(iter(s.cookies.values()))


def jti(token: str) -> str:
    return jwt.decode(token, options={"verify_signature": False})["jti"]


def endpoints(sid: str, aid: str) -> list[tuple[str, str, dict | None, tuple[str, ...]]]:
    """(method, path, body, roles allowed besides admin)."""
    tc = {"session": sid, "tool": "shell", "args": {"command": "ls"}}
    return [
        ("GET", "/v1/sessions", None, ("harness",)),
        ("POST", "/v1/sessions", {}, ("harness",)),
        ("GET", f"/v1/sessions/{sid}", None, ("harness",)),
        ("PATCH", f"/v1/sessions/{sid}", {"labels": {"a": "b"}}, ("harness",)),
        ("POST", "/v1/toolcalls", tc, ("harness",)),
        ("POST", f"/v1/sessions/{sid}/scrub", {"texts": ["x"]}, ("harness",)),
        ("POST", "/v1/mcp/tools", {"session": sid, "server": "s", "tools": [{"name": "t"}]}, ("harness",)),
        ("GET", "/v1/approvals", None, ("harness", "approver")),
        ("GET", f"/v1/approvals/{aid}", None, ("harness", "approver")),
        ("GET", f"/v1/events?session={sid}", None, ("harness", "approver")),
        ("POST", f"/v1/approvals/{aid}/deny", {"reason": "no"}, ("approver",)),
        ("GET", "/v1/secrets", None, ()),
        ("GET", "/v1/revocations", None, ()),
    ]


def call(gw, method: str, path: str, token: str | None, body: dict | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return requests.request(method, gw.api + path, json=body, headers=headers, timeout=30)


def test_caller_matrix(gw):
    sess = gw.session()
    sid = sess["id"]
    aid = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "deploy",
                                                 "args": {"target": "prod"}}).json()["approval_id"]
    callers = {"none": (None, 401), "garbage": ("x.y.z", 401), "not-a-jwt": ("hello", 401),
               "expired": (gw.token("harness", "old", ttl_s=-5), 401),
               "page-cookie": (page_cookie(gw, gw.approver), 401),
               "session": (sess["token"], 403)}
    for method, path, body, roles in endpoints(sid, aid):
        for name, (token, status) in callers.items():
            resp = call(gw, method, path, token, body)
            assert resp.status_code == status, (name, method, path, resp.status_code, resp.text[:200])
            assert set(resp.json()) == {"error", "detail"}
        for role, token in (("harness", gw.harness_token), ("approver", gw.approver)):
            resp = call(gw, method, path, token, body)
            if role in roles:
                assert resp.status_code < 400 or resp.status_code == 409, (role, method, path, resp.text[:200])
            else:
                assert resp.status_code == 403, (role, method, path, resp.status_code, resp.text[:200])


def test_another_harness_sees_nothing(gw):
    sid = gw.session()["id"]
    for method, path, body in [("GET", f"/v1/sessions/{sid}", None), ("PATCH", f"/v1/sessions/{sid}", {"frozen": True}),
                               ("DELETE", f"/v1/sessions/{sid}", None), ("GET", f"/v1/events?session={sid}", None),
                               ("POST", "/v1/toolcalls", {"session": sid, "tool": "shell", "args": {"command": "ls"}}),
                               ("POST", f"/v1/sessions/{sid}/scrub", {"texts": []})]:
        resp = call(gw, method, path, gw.other, body)
        assert resp.status_code == 404, (method, path, resp.status_code)
    assert sid not in [s["id"] for s in call(gw, "GET", "/v1/sessions", gw.other, None).json()]
    assert gw.call("GET", f"/v1/sessions/{sid}").status_code == 200      # untouched


def test_revocation_reaches_every_path(gw):
    harness, approver = gw.token("harness", "rev-h"), gw.token("approver", "rev-a")
    sess = call(gw, "POST", "/v1/sessions", harness, {"allow": ["allowed.test"]}).json()
    page = requests.Session()
    page.post(gw.api + "/login", data={"token": approver, "next": "/"}, allow_redirects=False, timeout=10)
    assert page.get(gw.api + "/", allow_redirects=False, timeout=10).status_code == 200
    for token in (harness, approver, sess["token"]):
        assert call(gw, "POST", "/v1/revocations", gw.admin, {"jti": jti(token)}).status_code == 201
    deadline = time.time() + 10
    while call(gw, "GET", "/v1/sessions", harness, None).status_code != 401:
        assert time.time() < deadline, "the revoked harness token still works"
        time.sleep(0.1)
    assert call(gw, "GET", "/v1/approvals", approver, None).status_code == 401
    assert page.get(gw.api + "/", allow_redirects=False, timeout=10).status_code == 303    # back to the login
    login = requests.post(gw.api + "/login", data={"token": approver, "next": "/"}, allow_redirects=False,
                          timeout=10)
    assert login.status_code == 401
    proxied = requests.get("http://allowed.test:9/", proxies={"http": sess["proxy_url"]}, timeout=10)
    assert proxied.status_code == 407


def test_nobody_decides_what_they_filed(gw):
    sid = call(gw, "POST", "/v1/sessions", gw.admin, {}).json()["id"]
    aid = call(gw, "POST", "/v1/toolcalls", gw.admin, {"session": sid, "tool": "deploy",
                                                       "args": {"target": "x"}}).json()["approval_id"]
    resp = call(gw, "POST", f"/v1/approvals/{aid}/approve", gw.admin, {})
    assert resp.status_code == 403 and resp.json()["error"] == "forbidden"
    assert call(gw, "POST", f"/v1/approvals/{aid}/approve", gw.approver, {}).status_code == 200
    assert call(gw, "POST", f"/v1/approvals/{aid}/deny", gw.token("approver", "bob"),
                {"reason": "late"}).status_code == 409


# -- hostile bodies -----------------------------------------------------------------------------------------
DEEP_ARRAY = b"[" * 50000 + b"]" * 50000
DEEP_OBJECT = b'{"a":' * 5000 + b"1" + b"}" * 5000


def toolcall(sid: str, args: bytes) -> bytes:
    return b'{"session": "%s", "tool": "shell", "args": %s}' % (sid.encode(), args)


def hostile(sid: str) -> list[bytes]:
    return [
        DEEP_ARRAY, DEEP_OBJECT,
        toolcall(sid, b'{"command": "ls", "x": ' + b"[" * 500 + b"]" * 500 + b"}"),    # parses, but absurdly deep
        toolcall(sid, b'{"command": "\\ud800"}'),            # lone surrogates: no UTF-8 spelling, regorus crashed
        toolcall(sid, b'{"command": "ls", "\\udcff": 1}'),
        b'{"session": "\\ud800", "tool": "shell", "args": {}}',
        toolcall(sid, b'{"command": "ls", "n": NaN}'),        # not JSON (Python's json accepts them)
        toolcall(sid, b'{"command": "ls", "n": Infinity}'),
        toolcall(sid, b'{"command": "ls", "n": -Infinity}'),
        b"\xef\xbb\xbf{}",                                   # a BOM
        b'{"a": "\xff"}',                                    # not UTF-8
    ]


def post(gw, method: str, path: str, body: bytes, token: str, ctype: str = "application/json"):
    return requests.request(method, gw.api + path, data=body, timeout=60,
                            headers={"Authorization": f"Bearer {token}", "Content-Type": ctype})


def assert_bad_json(resp):
    assert resp.status_code == 400, (resp.status_code, resp.text[:300])
    body = resp.json()
    assert set(body) == {"error", "detail"} and body["error"] == "bad_json", body
    assert "Traceback" not in resp.text


def body_endpoints(gw, sid: str) -> list[tuple[str, str, str]]:
    admin, approver = gw.token("admin", "root"), gw.token("approver", "ann")
    h = gw.harness_token
    return [("POST", "/v1/sessions", h), ("PATCH", f"/v1/sessions/{sid}", h), ("POST", "/v1/toolcalls", h),
            ("POST", "/v1/approvals/a_0000000000000000/approve", approver),
            ("POST", "/v1/approvals/a_0000000000000000/deny", approver), ("POST", "/v1/revocations", admin),
            ("PUT", "/v1/secrets/foo", admin), ("POST", f"/v1/sessions/{sid}/scrub", h),
            ("POST", "/v1/mcp/tools", h)]


def test_hostile_bodies_are_400_everywhere(gw):
    sid = gw.session()["id"]
    for method, path, token in body_endpoints(gw, sid):
        for body in hostile(sid):
            assert_bad_json(post(gw, method, path, body, token))
    log = gw.log()
    assert "Traceback" not in log and "internal error" not in log
    assert "policy worker exited" not in log


def test_a_bad_charset_is_400(gw):
    sid = gw.session()["id"]
    resp = post(gw, "POST", "/v1/toolcalls", toolcall(sid, b'{"command": "ls"}'), gw.harness_token,
                ctype="application/json; charset=no-such-charset")
    assert resp.status_code in (200, 400), resp.text
    assert "Traceback" not in gw.log()


def test_a_refused_body_leaves_the_session_deciding_normally(gw):
    sid = gw.session(workspace="/workspace")["id"]
    for body in hostile(sid):
        post(gw, "POST", "/v1/toolcalls", body, gw.harness_token)
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "shell", "args": {"command": "ls"}})
    assert resp.status_code == 200 and resp.json()["decision"] == "allow", resp.text
    assert "policy.error" not in resp.text


# -- harness ownership -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(gw):
    """This module's sandgate, with harnesses alice and bob, and a session and an approval of alice's."""
    sg = gw
    callers = {"alice": sg.token("harness", "alice"), "bob": sg.token("harness", "bob"),
               "admin": sg.token("admin", "root"), "approver": sg.token("approver", "pat")}
    mine = sg.call("POST", "/v1/sessions", callers["alice"], json={"allow": ["allowed.test"]}).json()
    callers["session"] = mine["token"]
    ask = sg.call("POST", "/v1/toolcalls", callers["alice"],
                  json={"session": mine["id"], "tool": "deploy", "args": {"target": "prod"}}).json()
    assert ask["decision"] == "ask"
    return sg, callers, mine["id"], ask["approval_id"]


def owner_call(sg, token, method, path, **kw):
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
        resp = owner_call(sg, callers[caller], method, fill(path, sid, aid), **kw)
        assert resp.status_code == expected, (caller, method, path, resp.text)
        if expected == 404:
            assert resp.json()["error"] == "not_found"


def test_lists_show_only_what_the_caller_owns(world):
    sg, callers, sid, aid = world
    bob_sid = owner_call(sg, callers["bob"], "POST", "/v1/sessions", json={}).json()["id"]
    alice_sessions = {s["id"] for s in owner_call(sg, callers["alice"], "GET", "/v1/sessions").json()}
    bob_sessions = {s["id"] for s in owner_call(sg, callers["bob"], "GET", "/v1/sessions").json()}
    admin_sessions = {s["id"] for s in owner_call(sg, callers["admin"], "GET", "/v1/sessions").json()}
    assert sid in alice_sessions and bob_sid not in alice_sessions
    assert bob_sessions == {bob_sid}
    assert {sid, bob_sid} <= admin_sessions
    assert aid not in [a["id"] for a in owner_call(sg, callers["bob"], "GET", "/v1/approvals?status=").json()]
    assert aid in [a["id"] for a in owner_call(sg, callers["alice"], "GET", "/v1/approvals?status=").json()]
    assert aid in [a["id"] for a in owner_call(sg, callers["approver"], "GET", "/v1/approvals?status=").json()]
    # Filtered by one session (what a harness polls): the owner sees its item, another harness nothing.
    assert aid in [a["id"] for a in owner_call(sg, callers["alice"], "GET", f"/v1/approvals?session={sid}").json()]
    assert owner_call(sg, callers["bob"], "GET", f"/v1/approvals?session={sid}").json() == []
    assert owner_call(sg, callers["bob"], "GET", f"/v1/approvals?session={bob_sid}").json() == []
    bob_events = owner_call(sg, callers["bob"], "GET", "/v1/events").json()
    assert bob_events and {e["session"] for e in bob_events} == {bob_sid}
    assert sid in {e["session"] for e in owner_call(sg, callers["admin"], "GET", "/v1/events").json()}


def test_another_harness_cannot_end_or_freeze_a_session(world):
    sg, callers, sid, _aid = world
    assert owner_call(sg, callers["bob"], "DELETE", f"/v1/sessions/{sid}").status_code == 404
    assert owner_call(sg, callers["bob"], "PATCH", f"/v1/sessions/{sid}", json={"frozen": True}).status_code == 404
    row = owner_call(sg, callers["alice"], "GET", f"/v1/sessions/{sid}").json()
    assert row["status"] == "active" and row["frozen"] is False
    # An unknown session and another harness's session answer exactly alike.
    unknown = owner_call(sg, callers["bob"], "GET", "/v1/sessions/s_0000000000000000")
    foreign = owner_call(sg, callers["bob"], "GET", f"/v1/sessions/{sid}")
    assert (unknown.status_code, unknown.json()) == (foreign.status_code, foreign.json())


def test_approvals_are_decided_by_approvers_only(world):
    sg, callers, sid, _aid = world
    item = owner_call(sg, callers["alice"], "POST", "/v1/toolcalls",
                json={"session": sid, "tool": "deploy", "args": {"target": "staging"}}).json()
    assert owner_call(sg, callers["alice"], "POST", f"/v1/approvals/{item['approval_id']}/approve",
                json={}).status_code == 403
    assert owner_call(sg, callers["bob"], "POST", f"/v1/approvals/{item['approval_id']}/approve",
                json={}).status_code == 403
    assert owner_call(sg, callers["approver"], "POST", f"/v1/approvals/{item['approval_id']}/approve",
                json={}).status_code == 200


def test_admin_deletes_any_session(world):
    sg, callers, _sid, _aid = world
    other = owner_call(sg, callers["bob"], "POST", "/v1/sessions", json={}).json()["id"]
    assert owner_call(sg, callers["admin"], "DELETE", f"/v1/sessions/{other}").status_code == 204
    assert owner_call(sg, callers["bob"], "GET", f"/v1/sessions/{other}").json()["status"] == "deleted"


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
