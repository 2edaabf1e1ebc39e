"""The egress proxy end to end: a real sandgate process, a real upstream, real clients (requests, curl)."""
from __future__ import annotations

import subprocess
import time

import pytest
import requests

from tests.conftest import need_binary
from tests.support.gateway import Sandgate


def get(sess, url, **kw):
    return requests.get(url, proxies=sess["proxies"], timeout=20, **kw)


def test_allowed_host_200_and_proxy_auth_not_forwarded(loopback_gateway, upstream):
    sess = loopback_gateway.session(allow=["allowed.test"])
    resp = get(sess, f"http://allowed.test:{upstream.port}/hello")
    assert resp.status_code == 200
    assert resp.text == "hello from upstream\n"
    seen = upstream.recorder.requests[-1]
    assert seen.path == "/hello"
    assert "proxy-authorization" not in seen.headers
    assert sess["token"] not in str(seen.headers)


def test_other_host_403_json(loopback_gateway, upstream):
    sess = loopback_gateway.session(allow=["allowed.test"])
    resp = get(sess, f"http://other.test:{upstream.port}/")
    assert resp.status_code == 403
    assert resp.headers["X-Sandgate-Decision"] == "deny"
    body = resp.json()
    assert body["error"] == "denied" and body["code"] == "egress.not_allowlisted"
    assert "other.test" in body["reason"] and body["request_id"]
    assert upstream.recorder.requests == []
    events = loopback_gateway.events(sess["id"])
    denied = [e for e in events if e["request_id"] == body["request_id"]]
    assert len(denied) == 1 and denied[0]["action"] == "deny" and denied[0]["http_status"] == 403
    assert denied[0]["host"] == "other.test"


def test_no_token_and_bad_token_407(loopback_gateway, upstream):
    url = f"http://allowed.test:{upstream.port}/"
    proxy = f"http://127.0.0.1:{loopback_gateway.proxy_port}"
    resp = requests.get(url, proxies={"http": proxy}, timeout=20)
    assert resp.status_code == 407
    assert "Proxy-Authenticate" in resp.headers
    resp = requests.get(url, proxies={"http": f"http://x:not-a-token@127.0.0.1:{loopback_gateway.proxy_port}"},
                        timeout=20)
    assert resp.status_code == 407
    harness = loopback_gateway.harness_token
    resp = requests.get(url, proxies={"http": f"http://x:{harness}@127.0.0.1:{loopback_gateway.proxy_port}"},
                        timeout=20)
    assert resp.status_code == 407, "a harness token is not a session token"
    assert upstream.recorder.requests == []


def test_deleted_session_407_at_once(loopback_gateway, upstream):
    sess = loopback_gateway.session(allow=["allowed.test"])
    url = f"http://allowed.test:{upstream.port}/"
    with requests.Session() as client:
        client.proxies = sess["proxies"]
        assert client.get(url, timeout=20).status_code == 200
        assert loopback_gateway.call("DELETE", f"/v1/sessions/{sess['id']}").status_code == 204
        assert client.get(url, timeout=20).status_code == 407, "keep-alive connection must not outlive the session"
    assert get(sess, url).status_code == 407
    status = loopback_gateway.call("GET", f"/v1/sessions/{sess['id']}").json()["status"]
    assert status == "deleted"


def test_expired_session_407(loopback_gateway, upstream):
    sess = loopback_gateway.session(allow=["allowed.test"], ttl_s=1)
    time.sleep(1.3)
    assert get(sess, f"http://allowed.test:{upstream.port}/").status_code == 407
    assert loopback_gateway.call("GET", f"/v1/sessions/{sess['id']}").json()["status"] == "expired"


def test_curl_allowed_and_denied(loopback_gateway, upstream):
    curl = need_binary("curl")
    sess = loopback_gateway.session(allow=["allowed.test"])
    ok = subprocess.run([curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", "-x", sess["proxy_url"],
                         f"http://allowed.test:{upstream.port}/"], capture_output=True, text=True, timeout=30)
    assert ok.stdout == "200"
    denied = subprocess.run([curl, "-s", "-i", "-x", sess["proxy_url"], f"http://other.test:{upstream.port}/"],
                            capture_output=True, text=True, timeout=30)
    assert denied.stdout.startswith("HTTP/1.1 403")
    assert "x-sandgate-decision: deny" in denied.stdout.lower()


def test_own_listener_refused_even_when_private_allowed(loopback_gateway):
    sess = loopback_gateway.session(allow=["127.0.0.1", "allowed.test"])
    resp = get(sess, f"http://127.0.0.1:{loopback_gateway.api_port}/healthz")
    assert resp.status_code == 403
    assert resp.json()["code"] == "address.own_listener"
    resp = get(sess, f"http://allowed.test:{loopback_gateway.proxy_port}/")
    assert resp.status_code == 403


@pytest.fixture(scope="module")
def strict_gateway(tmp_path_factory):
    cfg = {"egress": {"resolve": {"loopback.test": ["127.0.0.1"]}}}
    with Sandgate(tmp_path_factory.mktemp("strict"), cfg) as sg:
        yield sg


@pytest.mark.parametrize("host", ["loopback.test", "127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1",
                                  "[::ffff:127.0.0.1]", "localhost"])
def test_loopback_destinations_refused_without_contact(strict_gateway, upstream, host):
    bare = host.strip("[]")
    sess = strict_gateway.session(allow=["loopback.test", bare, "127.0.0.1", "localhost"])
    resp = get(sess, f"http://{host}:{upstream.port}/")
    assert resp.status_code == 403
    assert resp.json()["code"].startswith("address."), resp.text
    if resp.json()["code"] == "address.loopback":           # the refusal names the key that would allow it
        assert "egress.private_allow" in resp.json()["reason"], resp.text
    time.sleep(0.1)
    assert upstream.recorder.connections == 0


def test_keep_alive_connection_reused_for_many_requests(loopback_gateway, upstream):
    """The dial guard must not break mitmproxy's upstream connection reuse (no stall after a few requests)."""
    sess = loopback_gateway.session(allow=["allowed.test"])
    with requests.Session() as client:
        client.proxies = sess["proxies"]
        for i in range(40):
            assert client.get(f"http://allowed.test:{upstream.port}/k{i}", timeout=10).status_code == 200
    assert len(upstream.recorder.requests) == 40
    assert upstream.recorder.connections <= 3


def test_onboarding_app_is_off(loopback_gateway):
    sess = loopback_gateway.session(allow=["allowed.test"])
    resp = get(sess, "http://mitm.it/")
    assert resp.status_code == 403 and resp.headers["X-Sandgate-Decision"] == "deny"


@pytest.mark.parametrize("spelling", ["allowed.test.", "ALLOWED.Test", "Allowed.TEST."])
def test_other_spellings_of_a_name_get_its_answer_and_dial_its_normal_form(loopback_gateway, upstream, spelling):
    from tests.support.tunnel import open_tunnel, read_response

    sess = loopback_gateway.session(allow=["allowed.test"])
    resp = get(sess, f"http://{spelling}:{upstream.port}/dot")
    assert resp.status_code == 200
    assert upstream.recorder.requests[-1].headers["host"] == f"allowed.test:{upstream.port}"
    other = spelling.lower().replace("allowed", "other").upper() if spelling.isupper() else \
        spelling.lower().replace("allowed", "Other")
    denied = get(sess, f"http://{other}:{upstream.port}/")
    assert denied.status_code == 403 and denied.json()["code"] == "egress.not_allowlisted"
    with open_tunnel(loopback_gateway.proxy_port, sess["token"], f"{spelling}:{upstream.port}") as sock:
        sock.sendall(f"GET /dot-tunnel HTTP/1.1\r\nHost: {spelling}:{upstream.port}\r\n\r\n".encode())
        assert read_response(sock).startswith(b"HTTP/1.1 200")
    rows = [e for e in loopback_gateway.events(sess["id"]) if e["kind"] == "egress" and e["action"] == "allow"]
    assert {e["host"] for e in rows} == {"allowed.test"}
