"""Secrets travel only where they are bound: over TLS (unless allow_plaintext), to their ports, and only when
the request names a single destination. Real proxy, real upstreams (cleartext and TLS), real clients."""
from __future__ import annotations

import base64

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.h2upstream import H2Upstream
from tests.support.tunnel import h2_request, open_tunnel, read_response, tls_in_tunnel
from tests.support.upstream import Upstream, make_cert

REAL_TLS = "tls-only-" + "T" * 24
REAL_PLAIN = "plain-ok-" + "P" * 24
REAL_PORT = "port-pin-" + "Q" * 24
H2: list[H2Upstream] = []      # the module's HTTP/2 upstream: a client offering h2 gets h2 only from one that speaks it


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("transport")
    cert = make_cert(tmp / "certs", ["bound.test", "other.test"])
    with Upstream() as plain, Upstream(tls=cert) as secure, Upstream(tls=cert) as secure2, \
            H2Upstream(tls=cert) as h2up:
        H2[:] = [h2up]
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert,
                          "resolve": {"bound.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}},
               "secrets": {
                   "tls_only": {"source": "env:SG_TLS", "hosts": ["bound.test"], "inject_in": ["header", "query",
                                                                                                "body"]},
                   "plain_ok": {"source": "env:SG_PLAIN", "hosts": ["bound.test"], "allow_plaintext": True},
                   "port_pin": {"source": "env:SG_PORT", "hosts": ["bound.test"], "ports": [secure.port]},
               }}
        environ = {"SG_TLS": REAL_TLS, "SG_PLAIN": REAL_PLAIN, "SG_PORT": REAL_PORT}
        with Sandgate(tmp / "gw", cfg, env=environ) as sg:
            yield sg, plain, secure, secure2


def never_saw_a_real_value(*upstreams) -> None:
    for up in upstreams:
        for seen in up.recorder.requests:
            blob = repr(seen.headers).encode() + seen.path.encode() + seen.body
            for real in (REAL_TLS, REAL_PLAIN, REAL_PORT):
                assert real.encode() not in blob and base64.b64encode(real.encode()) not in blob


def session(sg, *secrets):
    sess = sg.session(allow=["bound.test", "other.test"], secrets=list(secrets))
    return sess, sess["env"]


@pytest.mark.parametrize("where", ["header", "query", "body", "basic"])
def test_placeholder_in_cleartext_to_a_bound_host_is_refused(env, where):
    sg, plain, _secure, _ = env
    sess, ph = session(sg, "tls_only")
    ph = ph["TLS_ONLY"]
    plain.recorder.requests.clear()
    kw: dict = {"headers": {}}
    url = f"http://bound.test:{plain.port}/echo"
    if where == "header":
        kw["headers"]["Authorization"] = f"Bearer {ph}"
    elif where == "query":
        url += f"?key={ph}"
    elif where == "body":
        kw["data"] = f"token={ph}"
    else:
        kw["auth"] = ("x-access-token", ph)
    resp = requests.post(url, proxies=sess["proxies"], timeout=20, **kw)
    assert resp.status_code == 403 and resp.json()["code"] == "secret.plaintext"
    assert plain.recorder.requests == []
    rows = [e for e in sg.events(sess["id"]) if e["kind"] == "exfiltration"]
    assert rows and rows[-1]["codes"] == ["secret.plaintext"] and rows[-1]["detail"]["secrets"] == ["tls_only"]


def test_placeholder_in_a_cleartext_tunnel_is_refused(env):
    sg, plain, _secure, _ = env
    sess, ph = session(sg, "tls_only")
    plain.recorder.requests.clear()
    with open_tunnel(sg.proxy_port, sess["token"], f"bound.test:{plain.port}") as sock:
        sock.sendall(f"GET /echo HTTP/1.1\r\nHost: bound.test:{plain.port}\r\n"
                     f"Authorization: Bearer {ph['TLS_ONLY']}\r\n\r\n".encode())
        reply = read_response(sock)
    assert reply.startswith(b"HTTP/1.1 403") and b"secret.plaintext" in reply
    assert plain.recorder.requests == []


def test_tls_request_gets_the_real_value(env):
    sg, _plain, secure, _ = env
    sess, ph = session(sg, "tls_only")
    resp = requests.get(f"https://bound.test:{secure.port}/echo?key={ph['TLS_ONLY']}", proxies=sess["proxies"],
                        verify=sess["ca_file"], headers={"Authorization": f"Bearer {ph['TLS_ONLY']}"}, timeout=20)
    assert resp.status_code == 200
    seen = secure.recorder.requests[-1]
    assert seen.headers["authorization"] == f"Bearer {REAL_TLS}" and REAL_TLS in seen.path
    assert REAL_TLS not in resp.text                               # scrubbed on the way back


def test_allow_plaintext_opts_in(env):
    sg, plain, _secure, _ = env
    sess, ph = session(sg, "plain_ok")
    resp = requests.get(f"http://bound.test:{plain.port}/echo", proxies=sess["proxies"], timeout=20,
                        headers={"Authorization": f"Bearer {ph['PLAIN_OK']}"})
    assert resp.status_code == 200
    assert plain.recorder.requests[-1].headers["authorization"] == f"Bearer {REAL_PLAIN}"


def test_ports_restrict_where_a_secret_goes(env):
    sg, _plain, secure, secure2 = env
    sess, ph = session(sg, "port_pin")
    headers = {"Authorization": f"Bearer {ph['PORT_PIN']}"}
    ok = requests.get(f"https://bound.test:{secure.port}/echo", proxies=sess["proxies"], verify=sess["ca_file"],
                      headers=headers, timeout=20)
    assert ok.status_code == 200 and secure.recorder.requests[-1].headers["authorization"] == f"Bearer {REAL_PORT}"
    secure2.recorder.requests.clear()
    refused = requests.get(f"https://bound.test:{secure2.port}/echo", proxies=sess["proxies"],
                           verify=sess["ca_file"], headers=headers, timeout=20)
    assert refused.status_code == 403 and refused.json()["code"] == "secret.port"
    assert secure2.recorder.requests == []


@pytest.mark.parametrize("secret, tls", [("tls_only", True), ("plain_ok", False)])
def test_absolute_form_to_another_host_with_a_placeholder_is_refused(env, secret, tls):
    """Inside a tunnel to the bound host, a request naming another host: 403 before any injection."""
    sg, plain, secure, secure2 = env
    sess, ph = session(sg, secret)
    up = secure if tls else plain
    for u in (plain, secure, secure2):
        u.recorder.requests.clear()
    sock = open_tunnel(sg.proxy_port, sess["token"], f"bound.test:{up.port}")
    if tls:
        sock = tls_in_tunnel(sock, sess["ca_file"], "bound.test", alpn=["http/1.1"])
    with sock:
        placeholder = ph[secret.upper()]
        sock.sendall(f"GET {'https' if tls else 'http'}://other.test:{up.port}/steal HTTP/1.1\r\n"
                     f"Host: bound.test:{up.port}\r\nAuthorization: Bearer {placeholder}\r\n\r\n".encode())
        reply = read_response(sock)
    assert reply.startswith(b"HTTP/1.1 403") and b"egress.authority_mismatch" in reply
    assert up.recorder.requests == []
    never_saw_a_real_value(plain, secure, secure2)


def test_http2_authority_to_another_host_with_a_placeholder_is_refused(env):
    sg, plain, secure, secure2 = env
    h2up = H2[0]
    sess, ph = session(sg, "tls_only")
    for u in (plain, secure, secure2, h2up):
        u.recorder.requests.clear()
    tls = tls_in_tunnel(open_tunnel(sg.proxy_port, sess["token"], f"bound.test:{h2up.port}"),
                        sess["ca_file"], "bound.test", alpn=["h2"])
    with tls:
        assert tls.selected_alpn_protocol() == "h2"
        status, body = h2_request(tls, [(":method", "GET"), (":path", "/steal"), (":scheme", "https"),
                                        (":authority", f"other.test:{h2up.port}"),
                                        ("authorization", f"Bearer {ph['TLS_ONLY']}")])
    assert status == 403 and b"egress.authority_mismatch" in body
    assert h2up.recorder.requests == []
    never_saw_a_real_value(plain, secure, secure2, h2up)
