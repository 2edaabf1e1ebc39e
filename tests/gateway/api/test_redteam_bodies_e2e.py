"""Red team: hostile JSON bodies on every endpoint are 400 `bad_json` with a JSON error, never 500, never a
crashed policy worker, and never a row that poisons the session's later decisions (its history)."""
from __future__ import annotations

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("redteam-bodies"), LOOPBACK_CONFIG) as sg:
        yield sg


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


def endpoints(gw, sid: str) -> list[tuple[str, str, str]]:
    admin, approver = gw.token("admin", "root"), gw.token("approver", "ann")
    h = gw.harness_token
    return [("POST", "/v1/sessions", h), ("PATCH", f"/v1/sessions/{sid}", h), ("POST", "/v1/toolcalls", h),
            ("POST", "/v1/approvals/a_0000000000000000/approve", approver),
            ("POST", "/v1/approvals/a_0000000000000000/deny", approver), ("POST", "/v1/revocations", admin),
            ("PUT", "/v1/secrets/foo", admin), ("POST", f"/v1/sessions/{sid}/scrub", h),
            ("POST", "/v1/mcp/tools", h)]


def test_hostile_bodies_are_400_everywhere(gw):
    sid = gw.session()["id"]
    for method, path, token in endpoints(gw, sid):
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
