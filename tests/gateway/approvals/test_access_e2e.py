"""Access requests end to end: a sandbox denied a host asks from inside (only its proxy credentials), an approver
narrows the grant, the grant allows exactly what it covers until it expires or is withdrawn."""
from __future__ import annotations

import json
import subprocess
import shutil
import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG, need_binary
from tests.support.gateway import Sandgate

ENDPOINT = "http://sandgate.internal/v1/access-requests"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    cfg = {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "resolve": {
        **LOOPBACK_CONFIG["egress"]["resolve"], "api.partner.test": ["127.0.0.1"], "lo.partner.test": ["127.0.0.1"]}},
        "approvals": {"max_grant_ttl_s": 3600}}
    cfg["egress"]["private_allow"] = ["127.0.0.0/8"]
    with Sandgate(tmp_path_factory.mktemp("access"), cfg) as sg:
        sg.approver = sg.token("approver", "alice")
        sg.approver2 = sg.token("approver", "bob")
        yield sg


def file_inside(sess, body):
    return requests.post(ENDPOINT, json=body, proxies=sess["proxies"], timeout=10)


def approve(gw, aid, token=None, **body):
    return gw.call("POST", f"/v1/approvals/{aid}/approve", token or gw.approver, json={"reason": "ok", **body})


def test_denied_sandbox_asks_from_inside_and_a_narrowed_grant_allows_exactly_it(gw, upstream):
    sess = gw.session(allow=[])
    base = f"http://api.partner.test:{upstream.port}"
    denied = requests.get(f"{base}/v1/x", proxies=sess["proxies"], timeout=10)
    assert denied.status_code == 403
    assert denied.json()["access_request"] == ENDPOINT and "POST" in denied.json()["hint"]
    filed = file_inside(sess, {"host": "api.partner.test", "reason": "the task needs the partner API",
                               "ttl_s": 600})
    assert filed.status_code == 202, filed.text
    aid = filed.json()["id"]
    assert filed.json()["status"] == "pending"
    # a second one for the same host: 409 naming the first
    again = file_inside(sess, {"host": "api.partner.test", "reason": "again"})
    assert again.status_code == 409 and again.json()["id"] == aid, again.text
    # the approver sees it as an access approval with the reason; cannot widen it
    item = gw.call("GET", f"/v1/approvals/{aid}", gw.approver).json()
    assert item["kind"] == "access" and "partner API" in item["reasons"][0] and item["grant"] is None
    assert approve(gw, aid, grant={"ttl_s": 601}).status_code == 400
    assert approve(gw, aid, grant={"ttl_s": 4000}).status_code == 400
    assert approve(gw, aid, grant={"host": "other.test"}).status_code == 400
    assert gw.call("GET", f"/v1/approvals/{aid}", gw.approver).json()["status"] == "pending"
    resp = approve(gw, aid, grant={"methods": ["GET"], "path_prefix": "/v1/", "ttl_s": 3})
    assert resp.status_code == 200 and resp.json()["status"] == "approved", resp.text
    assert resp.json()["grant"]["methods"] == ["GET"] and resp.json()["grant"]["path_prefix"] == "/v1/"
    # the sandbox reads its decision (waiting)
    seen = requests.get(f"{ENDPOINT}/{aid}?wait=5", proxies=sess["proxies"], timeout=10).json()
    assert seen["status"] == "approved" and seen["grant"]["methods"] == ["GET"]
    # the harness sees the grant on the session
    grants = gw.call("GET", f"/v1/sessions/{sess['id']}").json()["grants"]
    assert [g["approval"] for g in grants] == [aid]
    ok = requests.get(f"{base}/v1/x", proxies=sess["proxies"], timeout=10)
    assert ok.status_code == 200, ok.text
    assert requests.post(f"{base}/v1/x", data=b"x", proxies=sess["proxies"], timeout=10).status_code == 403
    assert requests.get(f"{base}/admin", proxies=sess["proxies"], timeout=10).status_code == 403
    assert requests.get(f"{base}/v1-admin", proxies=sess["proxies"], timeout=10).status_code == 403
    assert requests.get(f"{base}/v1/..%2fadmin", proxies=sess["proxies"], timeout=10).status_code == 403
    assert [r.path for r in upstream.recorder.requests] == ["/v1/x"]
    deadline = time.time() + 10
    while time.time() < deadline:       # after the TTL the same GET is denied again
        if requests.get(f"{base}/v1/x", proxies=sess["proxies"], timeout=10).status_code == 403:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the grant never expired")
    assert gw.call("GET", f"/v1/sessions/{sess['id']}").json()["grants"] == []


def test_curl_through_the_proxy_files_and_uses_a_grant(gw, upstream):
    curl = need_binary("curl")
    sess = gw.session(allow=[])
    out = subprocess.run([curl, "-sS", "-x", sess["proxy_url"], "-H", "Content-Type: application/json",
                          "--data", json.dumps({"host": "api.partner.test", "reason": "curl asks",
                                                "methods": ["GET"], "path_prefix": "/v1/"}), ENDPOINT],
                         capture_output=True, text=True, timeout=20)
    aid = json.loads(out.stdout)["id"]
    assert approve(gw, aid, grant={"ttl_s": 60}).status_code == 200
    url = f"http://api.partner.test:{upstream.port}/v1/x"
    got = subprocess.run([curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-x", sess["proxy_url"], url],
                         capture_output=True, text=True, timeout=20)
    assert got.stdout == "200"
    posted = subprocess.run([curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-x", sess["proxy_url"],
                             "--data", "x", url], capture_output=True, text=True, timeout=20)
    assert posted.stdout == "403"
    # withdrawn: denied again at once
    assert gw.call("DELETE", f"/v1/sessions/{sess['id']}/grants/{aid}", gw.approver).status_code == 200
    again = subprocess.run([curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-x", sess["proxy_url"], url],
                           capture_output=True, text=True, timeout=20)
    assert again.stdout == "403"


def test_https_inside_through_the_tunnel(gw, tmp_path):
    sess = gw.session(allow=[])
    ca = tmp_path / "ca.pem"
    ca.write_text(sess["ca_pem"])
    resp = requests.post("https://sandgate.internal/v1/access-requests", json={"host": "tls.partner.test",
                         "reason": "over TLS"}, proxies=sess["proxies"], verify=str(ca), timeout=10)
    assert resp.status_code == 202, resp.text
    mine = requests.get(f"https://sandgate.internal/v1/access-requests/{resp.json()['id']}",
                        proxies=sess["proxies"], verify=str(ca), timeout=10)
    assert mine.status_code == 200 and mine.json()["host"] == "tls.partner.test"


def test_https_inside_with_a_client_offering_h2(gw, tmp_path):
    """curl offers h2: sandgate.internal has no upstream, so nothing is dialled before the client's handshake (the
    early dial is only for vetted destinations) and the proxy answers itself."""
    sess = gw.session(allow=[])
    ca = tmp_path / "ca.pem"
    ca.write_text(sess["ca_pem"])
    out = subprocess.run([shutil.which("curl") or "curl", "-sS", "--cacert", str(ca), "-x", sess["proxy_url"],
                          "-H", "Content-Type: application/json", "-d", json.dumps({"host": "h2.partner.test",
                          "reason": "over h2"}), "-w", "\n%{http_code}", "https://sandgate.internal/v1/access-requests"],
                         capture_output=True, text=True, timeout=20)
    assert out.stdout.endswith("\n202"), out.stdout + out.stderr
    assert json.loads(out.stdout.rsplit("\n", 1)[0])["status"] == "pending"


def test_refused_at_filing(gw):
    sess = gw.session(allow=[])
    for host in ("169.254.169.254", "localhost", "127.0.0.1.nip.io.localhost", "10.1.2.3", "[::1]",
                 "http://x.test/", "x.test:80"):
        resp = file_inside(sess, {"host": host, "reason": "x"})
        assert resp.status_code == 400, (host, resp.text)
    assert file_inside(sess, {"host": "x.test", "reason": "x", "extra": 1}).status_code == 400
    assert file_inside(sess, {"host": "x.test", "reason": "x", "ttl_s": 3601}).status_code == 400
    # without proxy credentials: 407, nothing filed
    anon = requests.post(ENDPOINT, json={"host": "x.test", "reason": "x"},
                         proxies={"http": f"http://{gw.proxy_host}:{gw.proxy_port}"}, timeout=10)
    assert anon.status_code == 407
    assert gw.call("GET", f"/v1/approvals?session={sess['id']}", gw.approver).json() == []


def test_a_session_cannot_read_another_sessions_requests(gw):
    one, two = gw.session(allow=[]), gw.session(allow=[])
    aid = file_inside(one, {"host": "one.partner.test", "reason": "x"}).json()["id"]
    assert requests.get(f"{ENDPOINT}/{aid}", proxies=two["proxies"], timeout=10).status_code == 404
    assert requests.get(f"{ENDPOINT}/{aid}", proxies=one["proxies"], timeout=10).status_code == 200
    # nor withdraw the other's grant through the harness API as another harness
    other = gw.token("harness", "someone-else")
    approve(gw, aid)
    assert gw.call("DELETE", f"/v1/sessions/{one['id']}/grants/{aid}", other).status_code == 404
    assert gw.call("DELETE", f"/v1/sessions/{two['id']}/grants/{aid}", gw.approver).status_code == 404


def test_harness_files_for_its_session_and_pending_cap(gw):
    sess = gw.session(allow=[])
    resp = gw.call("POST", f"/v1/sessions/{sess['id']}/access-requests", json={"host": "h.partner.test",
                                                                                "reason": "harness asks"})
    assert resp.status_code == 202
    other = gw.token("harness", "another")
    assert gw.call("POST", f"/v1/sessions/{sess['id']}/access-requests", other,
                   json={"host": "h.partner.test", "reason": "x"}).status_code == 404
    # the session itself cannot approve its own request
    assert approve(gw, resp.json()["id"], token=sess["token"]).status_code in (401, 403)


def test_quorum_narrowest_vote_wins(tmp_path, upstream):
    cfg = {**LOOPBACK_CONFIG, "approvals": {"quorum": 2}}
    with Sandgate(tmp_path, cfg) as sg:
        a, b = sg.token("approver", "a"), sg.token("approver", "b")
        sess = sg.session(allow=[])
        aid = file_inside(sess, {"host": "allowed.test", "reason": "x", "ttl_s": 600}).json()["id"]
        assert approve(sg, aid, a, grant={"methods": ["GET", "HEAD"], "ttl_s": 300}).json()["status"] == "pending"
        final = approve(sg, aid, b, grant={"methods": ["GET", "POST"], "path_prefix": "/v1/"}).json()
        assert final["status"] == "approved"
        assert final["grant"]["methods"] == ["GET"] and final["grant"]["path_prefix"] == "/v1/"
        url = f"http://allowed.test:{upstream.port}"
        assert requests.get(f"{url}/v1/y", proxies=sess["proxies"], timeout=10).status_code == 200
        assert requests.head(f"{url}/v1/y", proxies=sess["proxies"], timeout=10).status_code == 403


def test_what_a_session_can_file_is_capped(tmp_path):
    cfg = {**LOOPBACK_CONFIG, "sessions": {"max_pending_approvals": 2}}
    with Sandgate(tmp_path, cfg) as sg:
        sess = sg.session(allow=[])
        for host in ("a.partner.test", "b.partner.test"):
            assert file_inside(sess, {"host": host, "reason": "x"}).status_code == 202
        third = file_inside(sess, {"host": "c.partner.test", "reason": "x"})
        assert third.status_code == 429 and third.json()["error"] == "approvals.too_many"
        big = requests.post(ENDPOINT, data=b'{"host": "d.partner.test", "reason": "' + b"x" * 20000 + b'"}',
                            headers={"Content-Type": "application/json"}, proxies=sess["proxies"], timeout=10)
        assert big.status_code in (403, 413)
        assert len(sg.call("GET", f"/v1/approvals?session={sess['id']}", sg.token("approver", "a")).json()) == 2
