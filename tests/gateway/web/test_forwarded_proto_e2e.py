"""Behind a TLS-terminating ingress: `X-Forwarded-Proto: https` from a proxy in `api.trusted_proxies` makes the
page's login cookie `Secure` (and `__Host-`); the same header from any other address is ignored. Real sandgate,
real sockets; the "ingress" is a client bound to 127.0.0.2."""
from __future__ import annotations

import http.client
import ipaddress
from http.cookies import SimpleCookie
from urllib.parse import urlencode

import pytest

from gateway.web.forwarded import forwarded_scheme
from tests.gateway.web.conftest import page_config
from tests.support.gateway import Sandgate

pytestmark = pytest.mark.e2e

INGRESS = "127.0.0.2"


@pytest.fixture(scope="module")
def sg(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("fwd"), page_config(api={"trusted_proxies": [f"{INGRESS}/32"]})) as gate:
        gate.approver = gate.token("approver", "alice")
        yield gate


def login_cookie(sg, source: str, proto: str | None) -> tuple[str, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", sg.api_port, timeout=30, source_address=(source, 0))
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if proto is not None:
        headers["X-Forwarded-Proto"] = proto
    try:
        conn.request("POST", "/login", urlencode({"token": sg.approver, "next": "/"}), headers)
        resp = conn.getresponse()
        assert resp.status == 303, resp.read()
        jar = SimpleCookie(resp.getheader("Set-Cookie"))
    finally:
        conn.close()
    (name, morsel), = jar.items()
    sg.last_cookie = f"{name}={morsel.value}"
    return name, {"secure": bool(morsel["secure"]), "httponly": bool(morsel["httponly"]),
                  "samesite": morsel["samesite"], "path": morsel["path"]}


def test_the_trusted_ingress_saying_https_gets_the_secure_cookie(sg):
    name, attrs = login_cookie(sg, INGRESS, "https")
    assert name == "__Host-sandgate_page"
    assert attrs == {"secure": True, "httponly": True, "samesite": "Strict", "path": "/"}


def test_the_trusted_ingress_saying_http_or_nothing_gets_the_plain_cookie(sg):
    for proto in ("http", None):
        name, attrs = login_cookie(sg, INGRESS, proto)
        assert (name, attrs["secure"]) == ("sandgate_page", False), proto


def test_anyone_else_claiming_https_is_ignored(sg):
    name, attrs = login_cookie(sg, "127.0.0.1", "https")
    assert (name, attrs["secure"]) == ("sandgate_page", False)


def test_the_secure_cookie_logs_in_through_the_ingress(sg):
    """The cookie set behind the ingress is the one the page reads back on the next request."""
    name, _ = login_cookie(sg, INGRESS, "https")
    assert name == "__Host-sandgate_page"
    conn = http.client.HTTPConnection("127.0.0.1", sg.api_port, timeout=30, source_address=(INGRESS, 0))
    try:
        conn.request("GET", "/", headers={"Cookie": sg.last_cookie, "X-Forwarded-Proto": "https"})
        resp = conn.getresponse()
        assert resp.status == 200 and b"Log in" not in resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("peer,header,expected", [
    ("10.0.0.5", "https", "https"),
    ("10.0.0.5", "HTTPS", "https"),
    ("10.0.0.5", "http, https", "https"),          # the last value is the one the nearest (trusted) proxy added
    ("10.0.0.5", "https, http", "http"),
    ("10.0.0.5", "gopher", None),
    ("::ffff:10.0.0.5", "https", "https"),
    ("10.0.1.5", "https", None),                   # not a trusted proxy
    ("10.0.0.5", None, None),
    (None, "https", None),
])
def test_forwarded_scheme(peer, header, expected):
    assert forwarded_scheme(peer, header, (ipaddress.ip_network("10.0.0.0/24"),)) == expected
    assert forwarded_scheme(peer, header, ()) is None                 # nobody trusted: the header never counts
