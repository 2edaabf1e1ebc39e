"""Red team: CONNECT targets and absolute-form URLs in odd spellings (trailing dots, case, ports 0 and 65536,
userinfo, brackets around a name, IPv4 and IPv6 literal forms). Each gets the same answer as its normal form, or
is refused before any dial; the recording upstream shows what was reached. Loopback only: every name maps to
127.0.0.1, and the session allows only `allowed.test`."""
from __future__ import annotations

import socket

import pytest

from tests.support.tunnel import proxy_auth, read_response


def ask(sg, raw: str) -> bytes:
    with socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=10) as sock:
        sock.sendall(raw.encode())
        return read_response(sock, 8).split(b"\r\n", 1)[0]


@pytest.mark.parametrize("target, expect", [
    ("allowed.test:{P}", b"HTTP/1.1 200"),
    ("allowed.test.:{P}", b"HTTP/1.1 200"),            # trailing dot: the same host
    ("ALLOWED.Test:{P}", b"HTTP/1.1 200"),
    ("allowed.test:0{P}", b"HTTP/1.1 200"),             # a leading zero is the same port
    ("allowed.test..:{P}", b"HTTP/1.1 400"),
    ("allowed.test:0", b"HTTP/1.1 400"),
    ("allowed.test:65536", b"HTTP/1.1 400"),
    ("allowed.test:-1", b"HTTP/1.1 400"),
    ("allowed.test:+{P}", b"HTTP/1.1 400"),
    ("allowed.test", b"HTTP/1.1 400"),
    ("u@allowed.test:{P}", b"HTTP/1.1 400"),
    ("u:p@allowed.test:{P}", b"HTTP/1.1 400"),
    ("other.test@allowed.test:{P}", b"HTTP/1.1 400"),
    ("allowed.test:{P}:{P}", b"HTTP/1.1 400"),
    ("allowed%2etest:{P}", b"HTTP/1.1 400"),
    ("allowed.test:{P}/x", b"HTTP/1.1 400"),
    ("other.test:{P}", b"HTTP/1.1 403"),                # not on the allow list
    ("127.0.0.1:{P}", b"HTTP/1.1 403"),                 # an address the name maps to is not the name
    ("127.1:{P}", b"HTTP/1.1 403"),
    ("0177.0.0.1:{P}", b"HTTP/1.1 403"),
    ("2130706433:{P}", b"HTTP/1.1 403"),
    ("[::1]:{P}", b"HTTP/1.1 403"),
    ("[::ffff:127.0.0.1]:{P}", b"HTTP/1.1 403"),
])
def test_connect_target_spellings(loopback_gateway, upstream, target, expect):
    sg = loopback_gateway
    sess = sg.session(allow=["allowed.test"])
    t = target.replace("{P}", str(upstream.port))
    line = ask(sg, f"CONNECT {t} HTTP/1.1\r\nHost: {t}\r\nProxy-Authorization: {proxy_auth(sess['token'])}\r\n\r\n")
    assert line.startswith(expect), (t, line)


@pytest.mark.parametrize("url, expect", [
    ("http://allowed.test.:{P}/", b"HTTP/1.1 200"),
    ("http://ALLOWED.test:{P}/", b"HTTP/1.1 200"),
    ("http://u:p@allowed.test:{P}/", b"HTTP/1.1 400"),
    ("http://allowed.test:{P}@other.test:{P}/", b"HTTP/1.1 400"),
    ("http://other.test:{P}\\@allowed.test:{P}/", b"HTTP/1.1 400"),
    ("http://allowed.test:{P}#@other.test:{P}/", b"HTTP/1.1 400"),
    ("http://allowed.test:65536/", b"HTTP/1.1 400"),
    ("http://127.1:{P}/", b"HTTP/1.1 403"),
])
def test_absolute_form_spellings(loopback_gateway, upstream, url, expect):
    sg = loopback_gateway
    sess = sg.session(allow=["allowed.test"])
    u = url.replace("{P}", str(upstream.port))
    host = u.split("/")[2].split("@")[-1]
    line = ask(sg, f"GET {u} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: {proxy_auth(sess['token'])}\r\n\r\n")
    assert line.startswith(expect), (u, line)
    if not expect.endswith(b"200"):
        assert upstream.recorder.requests == []
