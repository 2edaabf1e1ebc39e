"""Transparent mode on loopback: binding a session to a source address through the API, and what a binding
never does (authenticate the proxy listener). The captured path itself is tests/gateway/test_isolate_e2e.py."""
from __future__ import annotations

import socket

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.upstream import free_port


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    cfg = {"egress": LOOPBACK_CONFIG["egress"],
           "proxy": {"transparent_listen": f"127.0.0.1:{free_port()}", "dns_listen": f"127.0.0.1:{free_port()}",
                     "transparent_sources": ["10.200.0.0/16", "127.0.0.0/8"]}}
    with Sandgate(tmp_path_factory.mktemp("transparent"), cfg) as sg:
        yield sg


def test_healthz_and_listen_file_name_the_transparent_listener(gw):
    assert gw.call("GET", "/healthz").json()["transparent"] is True
    listen = (gw.data_dir / "listen.json").read_text()
    assert '"transparent": "127.0.0.1:' in listen and '"dns": "127.0.0.1:' in listen


def test_a_session_bound_to_a_source_address(gw):
    sess = gw.session(allow=["allowed.test"], source="10.200.9.2")
    assert sess["source"] == "10.200.9.2"
    assert sess["transparent"]["listen"].startswith("127.0.0.1:") and sess["transparent"]["dns"].startswith("127.")
    assert gw.call("GET", f"/v1/sessions/{sess['id']}").json()["source"] == "10.200.9.2"
    taken = gw.call("POST", "/v1/sessions", json={"source": "10.200.9.2"})
    assert taken.status_code == 409 and taken.json()["error"] == "source_in_use"
    assert gw.call("DELETE", f"/v1/sessions/{sess['id']}").status_code == 204
    again = gw.session(source="::ffff:10.200.9.2")            # free once its session ended; mapped form unmapped
    assert again["source"] == "10.200.9.2"
    gw.call("DELETE", f"/v1/sessions/{again['id']}")


@pytest.mark.parametrize("source", ["192.0.2.1", "10.201.0.2", "::1", "not an address", 7])
def test_a_source_outside_the_configured_networks_is_refused(gw, source):
    resp = gw.call("POST", "/v1/sessions", json={"source": source})
    assert resp.status_code == 400 and resp.json()["error"] == "bad_request"


def test_a_source_binding_never_authenticates_the_proxy_listener(gw, upstream):
    sess = gw.session(allow=["allowed.test"], source="127.0.0.1")
    try:
        # From the bound address, through the regular proxy listener, without credentials: 407.
        resp = requests.get(f"http://allowed.test:{upstream.port}/", timeout=10,
                            proxies={"http": f"http://127.0.0.1:{gw.proxy_port}"})
        assert resp.status_code == 407
        assert not upstream.recorder.requests
        # With the session's credentials it works as ever.
        assert requests.get(f"http://allowed.test:{upstream.port}/", proxies=sess["proxies"], timeout=10).ok
    finally:
        gw.call("DELETE", f"/v1/sessions/{sess['id']}")


def test_a_connection_to_the_transparent_listener_that_was_not_redirected_is_closed(gw, upstream):
    sess = gw.session(allow=["allowed.test"], source="127.0.0.1")
    try:
        host, port = sess["transparent"]["listen"].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(f"GET / HTTP/1.1\r\nHost: allowed.test:{upstream.port}\r\n\r\n".encode())
            try:
                answer = conn.recv(100)
            except ConnectionResetError:
                answer = b""
            assert answer == b""       # its destination is the listener itself (or unknown): refused, closed
        assert not upstream.recorder.requests
    finally:
        gw.call("DELETE", f"/v1/sessions/{sess['id']}")


def test_without_a_transparent_listener_a_source_is_refused(loopback_gateway):
    assert loopback_gateway.call("GET", "/healthz").json()["transparent"] is False
    resp = loopback_gateway.call("POST", "/v1/sessions", json={"source": "10.200.9.2"})
    assert resp.status_code == 400 and "transparent_listen" in resp.json()["detail"]
