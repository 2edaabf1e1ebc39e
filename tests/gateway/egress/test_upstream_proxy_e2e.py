"""A corporate upstream proxy: every allowed request leaves through it, after sandgate's own decision, address check
and injection. Real sandgate, a real recording forward proxy on loopback, real upstreams (cleartext, TLS, raw TCP),
real clients."""
from __future__ import annotations

import base64

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.forward_proxy import ForwardProxy
from tests.support.gateway import Sandgate
from tests.support.h2upstream import H2Upstream
from tests.support.tunnel import h2_request, open_tunnel, read_until_closed, tls_in_tunnel
from tests.support.upstream import EchoServer, Upstream, make_cert

REAL = "proxy-tls-" + "S" * 26
PROXY_USER, PROXY_PASS = "corp-user", "corp-" + "W" * 20
NAMES = ["bound.test", "other.test", "direct.test", "echo.test", "onlyproxy.test"]


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return make_cert(tmp_path_factory.mktemp("upstream-proxy-certs"), NAMES)


@pytest.fixture(scope="module")
def h2up(cert):
    with H2Upstream(tls=cert) as up:
        yield up


@pytest.fixture(scope="module")
def env(tmp_path_factory, cert):
    tmp = tmp_path_factory.mktemp("upstream-proxy")
    hosts = {name: "127.0.0.1" for name in NAMES}
    with Upstream() as plain, Upstream(tls=cert) as secure, EchoServer() as echo, \
            ForwardProxy(hosts, PROXY_USER, PROXY_PASS) as proxy:
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert,
                          "resolve": {n: ["127.0.0.1"] for n in NAMES if n != "onlyproxy.test"},
                          "raw_tcp": [f"echo.test:{echo.port}"],
                          "upstream_proxy": proxy.url, "upstream_proxy_user": "env:SG_PROXY_USER",
                          "upstream_proxy_password": "env:SG_PROXY_PASS",
                          "upstream_proxy_bypass": ["direct.test", "10.9.0.0/16"]},
               "secrets": {"tok": {"source": "env:SG_TOK", "hosts": ["bound.test"]}}}
        environ = {"SG_TOK": REAL, "SG_PROXY_USER": PROXY_USER, "SG_PROXY_PASS": PROXY_PASS}
        with Sandgate(tmp / "gw", cfg, env=environ) as sg:
            yield sg, proxy, plain, secure, echo
        log = sg.log()
        assert REAL not in log and PROXY_PASS not in log


def session(sg, *secrets):
    return sg.session(allow=["bound.test", "other.test", "direct.test", "echo.test", "onlyproxy.test"],
                      secrets=list(secrets))


def basic() -> str:
    return "Basic " + base64.b64encode(f"{PROXY_USER}:{PROXY_PASS}".encode()).decode()


def test_tls_goes_by_connect_to_the_vetted_address_with_the_secret_injected_before(env):
    sg, proxy, _plain, secure, _ = env
    sess = session(sg, "tok")
    ph = sess["env"]["TOK"]
    proxy.log.clear()
    secure.recorder.requests.clear()
    resp = requests.get(f"https://bound.test:{secure.port}/echo", headers={"Authorization": f"Bearer {ph}"},
                        proxies=sess["proxies"], verify=sess["ca_file"], timeout=20)
    assert resp.status_code == 200, resp.text
    # the upstream got the real value (injected by sandgate), the sandbox saw only its placeholder
    assert secure.recorder.requests[-1].headers["authorization"] == f"Bearer {REAL}"
    assert REAL not in resp.text and ph in resp.text
    # the proxy was asked for the vetted address (never the name), with its credentials
    asked = proxy.log.asked
    assert [(a.method, a.target) for a in asked] == [("CONNECT", f"127.0.0.1:{secure.port}")]
    assert asked[0].headers["proxy-authorization"] == basic()
    # what crossed the proxy is TLS: neither the secret nor the placeholder in the clear
    relayed = bytes(proxy.log.relayed)
    assert REAL.encode() not in relayed and ph.encode() not in relayed and b"bound.test" in relayed   # (SNI)


def test_a_keep_alive_tls_client_reuses_one_proxy_tunnel(env):
    sg, proxy, _plain, secure, _ = env
    sess = session(sg)
    proxy.log.clear()
    with requests.Session() as client:
        for _ in range(5):
            resp = client.get(f"https://other.test:{secure.port}/", proxies=sess["proxies"],
                              verify=sess["ca_file"], timeout=20)
            assert resp.status_code == 200
    assert [a.target for a in proxy.log.asked] == [f"127.0.0.1:{secure.port}"]


def test_an_http2_client_gets_http2_end_to_end_through_the_proxy_with_the_secret_injected(env, h2up):
    """An h2 upstream behind the proxy: sandgate connects (through the proxy) before answering the client's
    ClientHello, so the client gets h2 because the upstream speaks it."""
    sg, proxy, _plain, _secure, _ = env
    sess = session(sg, "tok")
    ph = sess["env"]["TOK"]
    proxy.log.clear()
    h2up.recorder.requests.clear()
    with open_tunnel(sg.proxy_port, sess["token"], f"bound.test:{h2up.port}") as sock:
        tls = tls_in_tunnel(sock, sess["ca_file"], "bound.test", alpn=["h2", "http/1.1"])
        assert tls.selected_alpn_protocol() == "h2"
        status, body = h2_request(tls, [(":method", "GET"), (":scheme", "https"),
                                        (":authority", f"bound.test:{h2up.port}"), (":path", "/echo"),
                                        ("authorization", f"Bearer {ph}")])
    assert status == 200 and body.startswith(b"h2 /echo") and ph.encode() in body and REAL.encode() not in body
    assert h2up.recorder.requests[-1].headers["authorization"] == f"Bearer {REAL}"
    assert h2up.alpns[-1] == "h2"
    assert [(a.method, a.target) for a in proxy.log.asked] == [("CONNECT", f"127.0.0.1:{h2up.port}")]
    assert REAL.encode() not in bytes(proxy.log.relayed)


def test_an_http2_client_of_an_http1_upstream_gets_http1_through_the_proxy(env):
    sg, proxy, _plain, secure, _ = env
    sess = session(sg, "tok")
    ph = sess["env"]["TOK"]
    proxy.log.clear()
    secure.recorder.requests.clear()
    with open_tunnel(sg.proxy_port, sess["token"], f"bound.test:{secure.port}") as sock:
        tls = tls_in_tunnel(sock, sess["ca_file"], "bound.test", alpn=["h2", "http/1.1"])
        assert tls.selected_alpn_protocol() is None        # as the upstream answered: no ALPN, so HTTP/1.1
        tls.sendall(f"GET /echo HTTP/1.1\r\nHost: bound.test:{secure.port}\r\nAuthorization: Bearer {ph}\r\n"
                    "Connection: close\r\n\r\n".encode())
        answer, _closed = read_until_closed(tls)
    assert answer.startswith(b"HTTP/1.1 200") and ph.encode() in answer and REAL.encode() not in answer
    assert secure.recorder.requests[-1].headers["authorization"] == f"Bearer {REAL}"
    assert [(a.method, a.target) for a in proxy.log.asked] == [("CONNECT", f"127.0.0.1:{secure.port}")]
    assert REAL.encode() not in bytes(proxy.log.relayed)


def test_cleartext_goes_in_absolute_form_to_the_vetted_address_keeping_the_host(env):
    sg, proxy, plain, _secure, _ = env
    sess = session(sg)
    proxy.log.clear()
    plain.recorder.requests.clear()
    resp = requests.get(f"http://other.test:{plain.port}/echo?x=1", proxies=sess["proxies"], timeout=20)
    assert resp.status_code == 200, resp.text
    asked = proxy.log.asked
    assert [(a.method, a.target) for a in asked] == [("GET", f"http://127.0.0.1:{plain.port}/echo?x=1")]
    assert asked[0].headers["host"] == f"other.test:{plain.port}"
    assert asked[0].headers["proxy-authorization"] == basic()
    seen = plain.recorder.requests[-1]
    assert seen.path == "/echo?x=1" and seen.headers["host"] == f"other.test:{plain.port}"
    # the sandbox's own proxy credentials never go further
    assert sess["token"] not in repr(asked[0].headers)
    assert "proxy-authorization" not in seen.headers


def test_a_denied_host_never_reaches_the_proxy(env):
    sg, proxy, plain, secure, _ = env
    sess = sg.session(allow=["bound.test"])
    proxy.log.clear()
    resp = requests.get(f"http://other.test:{plain.port}/", proxies=sess["proxies"], timeout=20)
    assert resp.status_code == 403
    with pytest.raises(requests.exceptions.ProxyError):
        requests.get(f"https://other.test:{secure.port}/", proxies=sess["proxies"], verify=sess["ca_file"],
                     timeout=20)
    # an address the check refuses (private, not in private_allow) is refused before the proxy too
    resp = requests.get("http://10.0.0.7/", proxies=sess["proxies"], timeout=20)
    assert resp.status_code == 403
    assert proxy.log.asked == []


def test_a_placeholder_in_cleartext_is_refused_before_the_proxy(env):
    sg, proxy, plain, _secure, _ = env
    sess = session(sg, "tok")
    proxy.log.clear()
    resp = requests.get(f"http://bound.test:{plain.port}/echo",
                        headers={"Authorization": f"Bearer {sess['env']['TOK']}"}, proxies=sess["proxies"], timeout=20)
    assert resp.status_code == 403 and resp.json()["code"] == "secret.plaintext"
    assert proxy.log.asked == [] and REAL.encode() not in bytes(proxy.log.relayed)


def test_bypassed_hosts_go_direct(env):
    sg, proxy, plain, secure, _ = env
    sess = session(sg)
    proxy.log.clear()
    assert requests.get(f"http://direct.test:{plain.port}/", proxies=sess["proxies"], timeout=20).status_code == 200
    assert requests.get(f"https://direct.test:{secure.port}/", proxies=sess["proxies"], verify=sess["ca_file"],
                        timeout=20).status_code == 200
    assert proxy.log.asked == []


def test_a_raw_tunnel_goes_by_connect_through_the_proxy(env):
    sg, proxy, _plain, _secure, echo = env
    sess = session(sg)
    proxy.log.clear()
    with open_tunnel(sg.proxy_port, sess["token"], f"echo.test:{echo.port}") as sock:
        sock.sendall(b"\x00\x01raw bytes\n")
        got = b""
        while len(got) < 12:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
    assert got == b"\x00\x01raw bytes\n"
    asked = proxy.log.asked
    assert [(a.method, a.target) for a in asked] == [("CONNECT", f"127.0.0.1:{echo.port}")]
    assert asked[0].headers["proxy-authorization"] == basic()


def test_a_name_only_the_proxy_resolves_is_refused_in_local_mode(env):
    sg, proxy, _plain, secure, _ = env
    sess = session(sg)
    proxy.log.clear()
    with pytest.raises(requests.exceptions.ProxyError):
        requests.get(f"https://onlyproxy.test:{secure.port}/", proxies=sess["proxies"], verify=sess["ca_file"],
                     timeout=20)
    assert proxy.log.asked == []


@pytest.fixture(scope="module")
def proxy_resolving(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("upstream-proxy-resolve")
    cert = make_cert(tmp / "certs", NAMES)
    with Upstream(tls=cert) as secure, Upstream() as plain, ForwardProxy({"onlyproxy.test": "127.0.0.1"}) as proxy:
        cfg = {"egress": {"upstream_ca": cert.cert, "upstream_proxy": proxy.url, "upstream_proxy_resolve": "proxy"}}
        with Sandgate(tmp / "gw", cfg) as sg:
            yield sg, proxy, secure, plain


def test_proxy_mode_hands_the_proxy_the_name(proxy_resolving):
    sg, proxy, secure, plain = proxy_resolving
    sess = sg.session(allow=["onlyproxy.test", "127.0.0.1"])
    resp = requests.get(f"https://onlyproxy.test:{secure.port}/", proxies=sess["proxies"], verify=sess["ca_file"],
                        timeout=20)
    assert resp.status_code == 200, resp.text
    assert [(a.method, a.target) for a in proxy.log.asked] == [("CONNECT", f"onlyproxy.test:{secure.port}")]
    assert "proxy-authorization" not in proxy.log.asked[0].headers
    # address literals are still checked by sandgate (loopback is not allowed in this configuration)
    proxy.log.clear()
    resp = requests.get(f"http://127.0.0.1:{secure.port}/", proxies=sess["proxies"], timeout=20)
    assert resp.status_code == 403
    assert proxy.log.asked == []


def test_unreadable_proxy_credentials_fail_closed(tmp_path):
    with Upstream() as plain, ForwardProxy({"other.test": "127.0.0.1"}, PROXY_USER, PROXY_PASS) as proxy:
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_proxy": proxy.url,
                          "upstream_proxy_user": "env:SG_PROXY_USER", "upstream_proxy_password": "env:SG_NOT_SET"}}
        with Sandgate(tmp_path / "gw", cfg, env={"SG_PROXY_USER": PROXY_USER}) as sg:
            sess = sg.session(allow=["other.test"])
            resp = requests.get(f"http://other.test:{plain.port}/", proxies=sess["proxies"], timeout=20)
            assert resp.status_code == 502 and resp.json()["code"] == "egress.upstream_proxy_unavailable"
            assert proxy.log.asked == [] and plain.recorder.requests == []


def test_a_streamed_cleartext_upload_goes_through_the_proxy(env):
    sg, proxy, plain, _secure, _ = env
    sess = session(sg)
    proxy.log.clear()
    plain.recorder.requests.clear()
    body = b"x" * (3 * 1024 * 1024)          # above inspect_max_bytes: streamed, routed at requestheaders
    resp = requests.post(f"http://other.test:{plain.port}/upload", data=body, proxies=sess["proxies"], timeout=60)
    assert resp.status_code == 200
    assert [(a.method, a.target) for a in proxy.log.asked] == [("POST", f"http://127.0.0.1:{plain.port}/upload")]
    assert plain.recorder.requests[-1].body == body


def test_sandgates_own_requests_go_through_the_proxy_too(tmp_path):
    """The OAuth2 token endpoint and the retry after a 401 are sandgate's own requests: through the proxy as well,
    by CONNECT to the vetted address, with the proxy's credentials; nothing secret crosses it in the clear."""
    from tests.support.oauth_server import OAuthServer

    cert = make_cert(tmp_path / "certs", ["auth.test", "api.test"])
    with OAuthServer(cert, "cid", "cs-" + "Z" * 24, lifetime_s=60) as auth, \
            ForwardProxy({}, PROXY_USER, PROXY_PASS) as proxy:
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert,
                          "resolve": {"auth.test": ["127.0.0.1"], "api.test": ["127.0.0.1"]},
                          "upstream_proxy": proxy.url, "upstream_proxy_user": "env:SG_PROXY_USER",
                          "upstream_proxy_password": "env:SG_PROXY_PASS"},
               "secrets": {"crm": {"kind": "oauth2", "token_url": f"https://auth.test:{auth.port}/token",
                                   "client_id": "env:SG_CID", "client_secret": "env:SG_CS", "hosts": ["api.test"]}}}
        env = {"SG_PROXY_USER": PROXY_USER, "SG_PROXY_PASS": PROXY_PASS, "SG_CID": "cid", "SG_CS": "cs-" + "Z" * 24}
        with Sandgate(tmp_path / "gw", cfg, env=env) as sg:
            sess = sg.session(allow=["api.test"], secrets=["crm"])
            ph = sess["env"]["CRM"]
            url = f"https://api.test:{auth.port}/api/x"
            kw = {"headers": {"Authorization": f"Bearer {ph}"}, "proxies": sess["proxies"],
                  "verify": sess["ca_file"], "timeout": 20}
            assert requests.get(url, **kw).status_code == 200
            auth.state.expire_access_tokens()                   # the next call gets a 401, then is retried
            assert requests.get(url, **kw).status_code == 200
        assert auth.state.grants == ["client_credentials"] * 2 and auth.state.api_status[-2:] == [401, 200]
        # token endpoint, API, token endpoint again, the retry: every one a CONNECT to the vetted address, with
        # the proxy's credentials (the API's first tunnel carries the 401 and stays open)
        targets = [(a.method, a.target) for a in proxy.log.asked]
        assert set(targets) == {("CONNECT", f"127.0.0.1:{auth.port}")} and len(targets) >= 3
        assert all(a.headers["proxy-authorization"] == basic() for a in proxy.log.asked)
        relayed = bytes(proxy.log.relayed)
        for secret in ["cs-" + "Z" * 24, ph, *auth.state.access]:
            assert secret.encode() not in relayed


def test_proxy_mode_cleartext_goes_in_absolute_form_with_the_name(proxy_resolving):
    sg, proxy, _secure, plain = proxy_resolving
    sess = sg.session(allow=["onlyproxy.test"])
    proxy.log.clear()
    resp = requests.get(f"http://onlyproxy.test:{plain.port}/echo", proxies=sess["proxies"], timeout=20)
    assert resp.status_code == 200, resp.text
    assert [(a.method, a.target) for a in proxy.log.asked] == [("GET", f"http://onlyproxy.test:{plain.port}/echo")]
    assert plain.recorder.requests[-1].headers["host"] == f"onlyproxy.test:{plain.port}"

