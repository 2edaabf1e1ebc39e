"""Access requests end to end: a sandbox denied a host asks from inside (only its proxy credentials), an approver
narrows the grant, the grant allows exactly what it covers until it expires or is withdrawn."""
from __future__ import annotations

import json
import subprocess
import shutil
import time
from urllib.parse import unquote, urlsplit

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG, need_binary
from tests.support.gateway import Sandgate
from tests.support.upstream import Upstream, make_cert

ENDPOINT = "http://sandgate.internal/v1/access-requests"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    cfg = {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "resolve": {
        **LOOPBACK_CONFIG["egress"]["resolve"], "api.partner.test": ["127.0.0.1"], "lo.partner.test": ["127.0.0.1"],
        "meta.partner.test": ["169.254.169.254"], "v6.partner.test": ["::1"],
        "pinned.partner.test": ["127.0.0.1"]}, "passthrough": ["pinned.partner.test"]},
        "approvals": {"max_grant_ttl_s": 3600},
        # test_what_a_session_can_file_is_capped's cap (no other test here has more than 2 pending in a session)
        "sessions": {"max_pending_approvals": 2}}
    cfg["egress"]["private_allow"] = ["127.0.0.0/8"]
    tmp = tmp_path_factory.mktemp("access")
    cert = make_cert(tmp / "certs", ["secure.test", "pinned.partner.test"])
    cfg["egress"]["upstream_ca"] = cert.cert
    cfg["secrets"] = {"demo": {"source": "env:SANDGATE_TEST_DEMO", "hosts": ["secure.test"], "env": "DEMO_TOKEN"}}
    with Sandgate(tmp, cfg, env={"SANDGATE_TEST_DEMO": "ghp_" + "D" * 36}) as sg:
        sg.tls_cert = cert
        sg.approver = sg.token("approver", "alice")
        sg.approver2 = sg.token("approver", "bob")
        yield sg


@pytest.fixture(scope="module")
def quorum_gw(tmp_path_factory):
    """Approvals need two approvers (`approvals.quorum`): one sandgate for the quorum tests here and in
    test_queue_e2e.py (each files its own request in a session of its own)."""
    with Sandgate(tmp_path_factory.mktemp("quorum"), {**LOOPBACK_CONFIG, "approvals": {"quorum": 2}}) as sg:
        sg.a, sg.b = sg.token("approver", "a"), sg.token("approver", "b")
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
    # a grant long enough for the checks below on a busy machine (all made before it ends), waited out after them
    resp = approve(gw, aid, grant={"methods": ["GET"], "path_prefix": "/v1/", "ttl_s": 10})
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
    # audited on use: the allow names the grant's rule and its approval
    used = [e for e in gw.events(sess["id"]) if e["host"] == "api.partner.test" and e["action"] == "allow"]
    assert used and "egress.granted" in used[-1]["codes"] and aid in " ".join(used[-1]["reasons"]), used
    assert requests.post(f"{base}/v1/x", data=b"x", proxies=sess["proxies"], timeout=10).status_code == 403
    assert requests.get(f"{base}/admin", proxies=sess["proxies"], timeout=10).status_code == 403
    assert requests.get(f"{base}/v1-admin", proxies=sess["proxies"], timeout=10).status_code == 403
    assert requests.get(f"{base}/v1/..%2fadmin", proxies=sess["proxies"], timeout=10).status_code == 403
    assert [r.path for r in upstream.recorder.requests] == ["/v1/x"]
    deadline = time.time() + 70
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
                 "http://x.test/", "x.test:80", "localhost.", "LOCALHOST", "*.localhost", "localhost.localdomain",
                 "[::ffff:169.254.169.254]", "::ffff:a9fe:a9fe", "2852039166", "0251.0376.0376.0376",
                 "0xa9fea9fe", "169.254.169.254.", "[fe80::1%25eth0]", "meta.partner.test", "META.partner.test.",
                 "v6.partner.test", "user@x.test", "x.test/admin", "", "a" * 300, "sandgate.internal", "x..test"):
        resp = file_inside(sess, {"host": host, "reason": "x"})
        assert resp.status_code == 400, (host, resp.text)
        assert resp.json()["error"] == "bad_request" and resp.json()["detail"], resp.text
    for extra in ({"extra": 1}, {"ttl_s": 3601}, {"ttl_s": 0}, {"ttl_s": -5}, {"ttl_s": "60"}, {"ttl_s": True},
                  {"ttl_s": 1e308}, {"methods": ["TRACE"]}, {"methods": "GET"}, {"methods": []},
                  {"path_prefix": "v1/"}, {"path_prefix": "/v1/%2e%2e/admin"}, {"path_prefix": "/v1/%00"},
                  {"port": 0}, {"port": "443"}, {"reason": ""}, {"reason": "x" * 1001}):
        resp = file_inside(sess, {"host": "x.test", "reason": "x", **extra})
        assert resp.status_code == 400, (extra, resp.text)
    # dot segments and empty segments are resolved as a server reads them: the approver sees the result
    resp = file_inside(sess, {"host": "dots.partner.test", "reason": "x", "path_prefix": "/v1/../admin//x"})
    item = gw.call("GET", f"/v1/approvals/{resp.json()['id']}", gw.approver).json()
    assert item["action"]["grant"]["path_prefix"] == "/admin/x"
    gw.call("POST", f"/v1/approvals/{item['id']}/deny", gw.approver, json={"reason": "no"})
    # without proxy credentials: 407, nothing filed
    anon = requests.post(ENDPOINT, json={"host": "x.test", "reason": "x"},
                         proxies={"http": f"http://{gw.proxy_host}:{gw.proxy_port}"}, timeout=10)
    assert anon.status_code == 407
    assert [a["id"] for a in gw.call("GET", f"/v1/approvals?session={sess['id']}", gw.approver).json()
            if a["status"] == "pending"] == []


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


def test_quorum_narrowest_vote_wins(quorum_gw, upstream):
    sg = quorum_gw
    a, b = sg.a, sg.b
    sess = sg.session(allow=[])
    aid = file_inside(sess, {"host": "allowed.test", "reason": "x", "ttl_s": 600}).json()["id"]
    assert approve(sg, aid, a, grant={"methods": ["GET", "HEAD"], "ttl_s": 300}).json()["status"] == "pending"
    final = approve(sg, aid, b, grant={"methods": ["GET", "POST"], "path_prefix": "/v1/"}).json()
    assert final["status"] == "approved"
    assert final["grant"]["methods"] == ["GET"] and final["grant"]["path_prefix"] == "/v1/"
    url = f"http://allowed.test:{upstream.port}"
    assert requests.get(f"{url}/v1/y", proxies=sess["proxies"], timeout=10).status_code == 200
    assert requests.head(f"{url}/v1/y", proxies=sess["proxies"], timeout=10).status_code == 403


def test_what_a_session_can_file_is_capped(gw):
    sg = gw
    sess = sg.session(allow=[])
    for host in ("a.partner.test", "b.partner.test"):
        assert file_inside(sess, {"host": host, "reason": "x"}).status_code == 202
    third = file_inside(sess, {"host": "c.partner.test", "reason": "x"})
    assert third.status_code == 429 and third.json()["error"] == "approvals.too_many"
    big = requests.post(ENDPOINT, data=b'{"host": "d.partner.test", "reason": "' + b"x" * 20000 + b'"}',
                        headers={"Content-Type": "application/json"}, proxies=sess["proxies"], timeout=10)
    assert big.status_code in (403, 413)
    assert len(sg.call("GET", f"/v1/approvals?session={sess['id']}", sg.token("approver", "a")).json()) == 2


def read_head(sock) -> tuple[str, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


def test_every_proxy_403_names_the_access_endpoint(gw, tmp_path):
    """Plain HTTP, a refused CONNECT (status line and body), and a request refused inside an allowed tunnel: each
    403 carries "access_request" and a one-line hint."""
    import base64
    import socket

    sess = gw.session(allow=[])
    ca = tmp_path / "ca.pem"
    ca.write_text(sess["ca_pem"])

    def check(doc):
        assert doc["access_request"] == ENDPOINT, doc
        assert "\n" not in doc["hint"] and ENDPOINT in doc["hint"], doc
    with Upstream(tls=gw.tls_cert) as secure:
        base = f"https://secure.test:{secure.port}"
        # a refused CONNECT: the status line names the endpoint (a client may show only that), the body too
        creds = urlsplit(sess["proxy_url"])
        auth = base64.b64encode(f"{unquote(creds.username)}:{unquote(creds.password)}".encode()).decode()
        with socket.create_connection((gw.proxy_host, gw.proxy_port), timeout=10) as sock:
            sock.sendall(f"CONNECT secure.test:{secure.port} HTTP/1.1\r\nHost: secure.test:{secure.port}\r\n"
                         f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode())
            head, rest = read_head(sock)
        status_line = head.split("\r\n", 1)[0]
        assert status_line.startswith("HTTP/1.1 403 ") and f"(ask: {ENDPOINT})" in status_line, head
        length = int(next(h.split(":", 1)[1] for h in head.split("\r\n") if h.lower().startswith("content-length")))
        with socket.create_connection((gw.proxy_host, gw.proxy_port), timeout=10) as sock:
            sock.sendall(f"CONNECT secure.test:{secure.port} HTTP/1.1\r\nHost: secure.test:{secure.port}\r\n"
                         f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode())
            head, rest = read_head(sock)
            while len(rest) < length:
                rest += sock.recv(4096)
        check(json.loads(rest))
        # curl shows the refused CONNECT's status line
        curl = need_binary("curl")
        out = subprocess.run([curl, "-sS", "-v", "--cacert", str(ca), "-x", sess["proxy_url"], f"{base}/v1/x"],
                             capture_output=True, text=True, timeout=20)
        assert f"ask: {ENDPOINT}" in out.stderr, out.stderr
        # granted GET under /v1/: the tunnel opens; inside it, POST and /admin are refused with the same body
        aid = file_inside(sess, {"host": "secure.test", "reason": "tls", "methods": ["GET"], "path_prefix": "/v1/"}
                          ).json()["id"]
        assert approve(gw, aid, grant={"ttl_s": 60}).status_code == 200
        with requests.Session() as http:       # one connection: one tunnel (verify per call: the environment's
            kw = {"proxies": sess["proxies"], "verify": str(ca), "timeout": 10}     # CA bundle beats Session.verify)
            assert http.get(f"{base}/v1/x", **kw).status_code == 200
            for resp in (http.post(f"{base}/v1/x", data=b"x", **kw), http.get(f"{base}/admin", **kw)):
                assert resp.status_code == 403, resp.text
                check(resp.json())
        assert [r.path for r in secure.recorder.requests] == ["/v1/x"]
    # and plain HTTP
    resp = requests.get("http://other.test:9/", proxies=sess["proxies"], timeout=10)
    assert resp.status_code == 403
    check(resp.json())


def test_caller_matrix_for_grants(gw, upstream):
    """Who may withdraw a grant (the session's harness, an approver, admin) and who may not (another harness, the
    session's own token, for another session's path); a session's token decides nothing."""
    sess = gw.session(allow=[])
    other_sess = gw.session(allow=[])
    admin = gw.token("admin", "root")
    other_harness = gw.token("harness", "mallory")

    def granted():
        aid = file_inside(sess, {"host": "api.partner.test", "reason": "matrix", "methods": ["GET"]}).json()["id"]
        assert approve(gw, aid, grant={"ttl_s": 60}).status_code == 200
        return aid
    aid = granted()
    path = f"/v1/sessions/{sess['id']}/grants/{aid}"
    # the sandbox itself: it cannot read another session's request, nor decide or withdraw through the API
    assert requests.get(f"{ENDPOINT}/{aid}", proxies=other_sess["proxies"], timeout=10).status_code == 404
    assert requests.delete(f"{ENDPOINT}/{aid}", proxies=sess["proxies"], timeout=10).status_code == 405
    assert gw.call("DELETE", path, sess["token"]).status_code in (401, 403)
    assert gw.call("GET", f"/v1/approvals/{aid}", sess["token"]).status_code in (401, 403)
    assert gw.call("DELETE", path, other_harness).status_code == 404
    assert gw.call("GET", f"/v1/approvals/{aid}", other_harness).status_code == 404
    assert gw.call("GET", f"/v1/sessions/{sess['id']}", other_harness).status_code == 404     # nor its grants
    assert aid not in [a["id"] for a in gw.call("GET", "/v1/approvals", other_harness).json()]
    assert gw.call("POST", f"/v1/approvals/{aid}/approve", other_harness, json={}).status_code == 403
    assert gw.call("DELETE", f"/v1/sessions/{other_sess['id']}/grants/{aid}").status_code == 404
    assert gw.call("DELETE", f"/v1/sessions/{sess['id']}/grants/a_nosuchthing", gw.approver).status_code == 404
    assert [g["approval"] for g in gw.call("GET", f"/v1/sessions/{sess['id']}").json()["grants"]] == [aid]
    # the session's own harness
    assert gw.call("DELETE", path).status_code == 200
    assert gw.call("DELETE", path).status_code == 409            # not in force any more
    assert gw.call("GET", f"/v1/sessions/{sess['id']}").json()["grants"] == []
    url = f"http://api.partner.test:{upstream.port}/v1/x"
    assert requests.get(url, proxies=sess["proxies"], timeout=10).status_code == 403
    # an approver, and admin
    for token in (gw.approver, admin):
        aid = granted()
        assert requests.get(url, proxies=sess["proxies"], timeout=10).status_code == 200
        assert gw.call("DELETE", f"/v1/sessions/{sess['id']}/grants/{aid}", token).status_code == 200
        assert requests.get(url, proxies=sess["proxies"], timeout=10).status_code == 403
    # a harness filing for another harness's session, a withdrawal of a pending request: refused
    assert gw.call("POST", f"/v1/sessions/{sess['id']}/access-requests", other_harness,
                   json={"host": "x.partner.test", "reason": "x"}).status_code == 404
    pending = file_inside(sess, {"host": "p.partner.test", "reason": "x"}).json()["id"]
    assert gw.call("DELETE", f"/v1/sessions/{sess['id']}/grants/{pending}", gw.approver).status_code == 409
    # no self-approval: admin files one for the session, and cannot approve it itself
    mine = gw.call("POST", f"/v1/sessions/{sess['id']}/access-requests", admin,
                   json={"host": "q.partner.test", "reason": "admin asks"})
    assert mine.status_code == 202, mine.text
    assert approve(gw, mine.json()["id"], token=admin).status_code == 403
    assert approve(gw, mine.json()["id"]).status_code == 200


def test_the_sandbox_waits_for_the_decision(gw):
    import threading

    sess = gw.session(allow=[])
    aid = file_inside(sess, {"host": "wait.partner.test", "reason": "x", "methods": ["GET"]}).json()["id"]
    decider = threading.Timer(1.5, approve, args=(gw, aid), kwargs={"grant": {"ttl_s": 30}})
    started = time.monotonic()
    decider.start()
    try:
        seen = requests.get(f"{ENDPOINT}/{aid}?wait=20", proxies=sess["proxies"], timeout=30)
    finally:
        decider.join()
    waited = time.monotonic() - started
    assert seen.status_code == 200 and seen.json()["status"] == "approved", seen.text
    assert seen.json()["grant"]["methods"] == ["GET"] and waited > 1.0, waited     # held until the decision
    # a wait that is not a number is a 400; a huge one is capped (answered at once: it is decided)
    assert requests.get(f"{ENDPOINT}/{aid}?wait=x", proxies=sess["proxies"], timeout=10).status_code == 400
    assert requests.get(f"{ENDPOINT}/{aid}?wait=nan", proxies=sess["proxies"], timeout=10).status_code == 400
    assert requests.get(f"{ENDPOINT}/{aid}?wait=1e999", proxies=sess["proxies"], timeout=10).status_code == 200


def test_quorum_one_approver_widening_is_refused(quorum_gw, upstream):
    sg = quorum_gw
    a, b = sg.a, sg.b
    sess = sg.session(allow=[])
    aid = file_inside(sess, {"host": "allowed.test", "reason": "x", "methods": ["GET"], "path_prefix": "/v1/",
                             "ttl_s": 600}).json()["id"]
    assert approve(sg, aid, a, grant={"ttl_s": 30}).json()["status"] == "pending"
    for wider in ({"methods": ["GET", "POST"]}, {"path_prefix": "/"}, {"path_prefix": "/v1/../admin"},
                  {"ttl_s": 601}, {"host": "other.test"}, {"port": 1}):
        resp = approve(sg, aid, b, grant=wider)
        assert resp.status_code == 400, (wider, resp.text)
    assert sg.call("GET", f"/v1/approvals/{aid}", a).json()["status"] == "pending"
    final = approve(sg, aid, b, grant={"path_prefix": "/v1/x"}).json()
    assert final["status"] == "approved"
    g = final["grant"]
    assert g["methods"] == ["GET"] and g["path_prefix"] == "/v1/x" and g["host"] == "allowed.test"
    url = f"http://allowed.test:{upstream.port}"
    assert requests.get(f"{url}/v1/x/1", proxies=sess["proxies"], timeout=10).status_code == 200
    assert requests.get(f"{url}/v1/y", proxies=sess["proxies"], timeout=10).status_code == 403
    assert requests.post(f"{url}/v1/x/1", proxies=sess["proxies"], timeout=10).status_code == 403


def test_a_grant_keeps_every_deny_rule_a_secret_bound_elsewhere(gw, upstream):
    """Under a grant of the whole host, a secret bound to another host is still refused there."""
    sess = gw.session(allow=[], secrets=["demo"])
    placeholder = sess["env"]["DEMO_TOKEN"]
    aid = file_inside(sess, {"host": "api.partner.test", "reason": "all of it"}).json()["id"]
    assert approve(gw, aid, grant={"ttl_s": 60}).status_code == 200
    url = f"http://api.partner.test:{upstream.port}/v1/x"
    assert requests.get(url, proxies=sess["proxies"], timeout=10).status_code == 200
    refused = requests.get(url, headers={"Authorization": f"Bearer {placeholder}"}, proxies=sess["proxies"],
                           timeout=10)
    assert refused.status_code == 403 and refused.json()["access_request"] == ENDPOINT, refused.text
    assert all("authorization" not in r.headers for r in upstream.recorder.requests)


def test_ask_rules_still_apply_under_a_grant(gw, upstream):
    """A grant that covers DELETE does not skip the ask of DELETE: the request is held for a person."""
    import threading

    sess = gw.session(allow=[])
    aid = file_inside(sess, {"host": "api.partner.test", "reason": "x", "methods": ["GET", "DELETE"]}).json()["id"]
    assert approve(gw, aid, grant={"ttl_s": 60}).status_code == 200
    url = f"http://api.partner.test:{upstream.port}/v1/x"
    got = {}
    sender = threading.Thread(target=lambda: got.update(r=requests.delete(url, proxies=sess["proxies"], timeout=60)))
    sender.start()
    deadline = time.time() + 20
    held = []
    while not held and time.time() < deadline:
        held = [a for a in gw.call("GET", f"/v1/approvals?session={sess['id']}&kind=egress&status=pending",
                                   gw.approver).json()]
        time.sleep(0.2)
    assert len(held) == 1 and "DELETE" in held[0]["summary"], held
    assert gw.call("POST", f"/v1/approvals/{held[0]['id']}/deny", gw.approver, json={"reason": "no"}).status_code == 200
    sender.join(30)
    assert got["r"].status_code == 403
    assert [r.method for r in upstream.recorder.requests] == []


def test_a_tunnel_only_a_grant_opened_is_intercepted_even_to_a_passthrough_host(gw, tmp_path):
    """egress.passthrough relays TLS unread: a grant narrowed to GET under /v1/ would then cover everything. A tunnel
    that only a grant opened is intercepted, so each request is decided against the grant; a session whose allow
    list names the host still gets the passthrough."""
    ca = tmp_path / "ca.pem"
    with Upstream(tls=gw.tls_cert) as pinned:
        base = f"https://pinned.partner.test:{pinned.port}"
        sess = gw.session(allow=[])
        ca.write_text(sess["ca_pem"])
        aid = file_inside(sess, {"host": "pinned.partner.test", "reason": "x", "methods": ["GET"],
                                 "path_prefix": "/v1/"}).json()["id"]
        assert approve(gw, aid, grant={"ttl_s": 60}).status_code == 200
        kw = {"proxies": sess["proxies"], "verify": str(ca), "timeout": 10}       # sandgate's certificate: read
        assert requests.get(f"{base}/v1/x", **kw).status_code == 200
        assert requests.get(f"{base}/admin", **kw).status_code == 403
        assert requests.post(f"{base}/v1/x", data=b"x", **kw).status_code == 403
        assert [r.path for r in pinned.recorder.requests] == ["/v1/x"]
        listed = gw.session(allow=["pinned.partner.test"])
        relayed = requests.get(f"{base}/admin", proxies=listed["proxies"], verify=gw.tls_cert.cert, timeout=10)
        assert relayed.status_code == 200                     # the upstream's own certificate: relayed unread


def test_quorum_needs_distinct_approvers(quorum_gw):
    """A tool call's approval under `approvals.quorum = 2` (the queue's tests are test_queue_e2e.py's)."""
    from tests.gateway.approvals.test_queue_e2e import file_deploy

    sg = quorum_gw
    sid = sg.session()["id"]
    aid = file_deploy(sg, sid)
    alice, bob = sg.token("approver", "alice"), sg.token("approver", "bob")
    first = sg.call("POST", f"/v1/approvals/{aid}/approve", alice, json={})
    assert first.status_code == 200 and first.json()["status"] == "pending"
    assert sg.call("POST", f"/v1/approvals/{aid}/approve", alice, json={}).status_code == 409
    second = sg.call("POST", f"/v1/approvals/{aid}/approve", bob, json={})
    assert second.json()["status"] == "approved" and len(second.json()["votes"]) == 2
