"""Red team: a placeholder headed for a host its secret is not bound to, in spellings and layers a detector may
miss. Real sandgate, real upstream, raw sockets. Each must be refused (403 secret.exfiltration) before the
upstream sees a byte, or (a body streamed because its size is not declared) reach it blanked out; the upstream's
recorder proves it.

Not covered, by design: a placeholder the sandbox transforms itself (hex, gzip, UTF-16, any cipher) cannot be
recognised, and need not be: it carries no secret. The guarantee is on the real value, which is put only into
requests to the hosts its secret is bound to."""
from __future__ import annotations

import base64
import json

import pytest

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.tunnel import read_response, read_until_closed
from tests.support.upstream import Upstream

REAL = "sk-bound-" + "Z" * 24


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("redteam-ph")
    with Upstream() as up:
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"],
                          "resolve": {"bound.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}},
               "secrets": {"key": {"source": "env:SG_KEY", "hosts": ["bound.test"],
                                   "inject_in": ["header", "query", "body"], "allow_plaintext": True}}}
        with Sandgate(tmp / "gw", cfg, env={"SG_KEY": REAL}) as sg:
            yield sg, up


def body_forms(ph: str) -> dict[str, tuple[dict, bytes]]:
    boundary = "XyZ"
    multipart = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\n"
                 f"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n"
                 f"{base64.b64encode(ph.encode()).decode()}\r\n--{boundary}--\r\n").encode()
    return {
        "multipart-b64": ({"Content-Type": f"multipart/form-data; boundary={boundary}"}, multipart),
        "json-unicode": ({"Content-Type": "application/json"},
                         json.dumps({"k": "".join(f"\\u{ord(c):04x}" for c in ph)}).encode()),
        "basic-in-json": ({"Content-Type": "application/json"},
                          json.dumps({"auth": "Basic " + base64.b64encode(f"u:{ph}".encode()).decode()}).encode()),
        "percent-twice": ({"Content-Type": "application/x-www-form-urlencoded"},
                          ("k=" + "".join(f"%25{ord(c):02X}" for c in ph)).encode()),
    }


def plain_request(sg, token: str, raw: bytes, whole: bool = False) -> bytes:
    """One raw plain-proxy request (absolute form) with the session's proxy credentials; `whole`: everything until
    the proxy closes (the request must say Connection: close)."""
    import socket

    with socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=10) as sock:
        sock.sendall(raw.replace(b"@AUTH@", ("Basic " + base64.b64encode(f"s:{token}".encode()).decode()).encode()))
        return read_until_closed(sock, 10)[0] if whole else read_response(sock)


@pytest.mark.parametrize("form", ["multipart-b64", "json-unicode", "basic-in-json", "percent-twice"])
def test_placeholder_in_an_encoded_body_to_an_unbound_host_is_refused(env, form):
    sg, up = env
    sess = sg.session(allow=["bound.test", "other.test"], secrets=["key"])
    ph = sess["env"]["KEY"]
    headers, body = body_forms(ph)[form]
    up.recorder.requests.clear()
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    reply = plain_request(sg, sess["token"], (
        f"POST http://other.test:{up.port}/echo HTTP/1.1\r\nHost: other.test:{up.port}\r\n"
        f"Proxy-Authorization: @AUTH@\r\n{extra}Content-Length: {len(body)}\r\n\r\n").encode() + body)
    assert reply.startswith(b"HTTP/1.1 403") and b"secret.exfiltration" in reply, reply[:300]
    assert up.recorder.requests == []


@pytest.mark.parametrize("trick", ["folded", "chunk-split", "chunk-ext", "dup-header"])
def test_placeholder_in_an_odd_request_framing_to_an_unbound_host_is_refused(env, trick):
    sg, up = env
    sess = sg.session(allow=["bound.test", "other.test"], secrets=["key"])
    ph = sess["env"]["KEY"]
    up.recorder.requests.clear()
    start = f"POST http://other.test:{up.port}/echo HTTP/1.1\r\nHost: other.test:{up.port}\r\nProxy-Authorization: @AUTH@\r\n"
    half = len(ph) // 2
    if trick == "folded":
        raw = start + f"X-A: a\r\n {ph}\r\nContent-Length: 0\r\n\r\n"
    elif trick == "chunk-split":
        raw = (start + "Transfer-Encoding: chunked\r\n\r\n"
               f"{half:x}\r\n{ph[:half]}\r\n{len(ph) - half:x}\r\n{ph[half:]}\r\n0\r\n\r\n")
    elif trick == "chunk-ext":
        raw = start + f"Transfer-Encoding: chunked\r\n\r\n1;ext={ph}\r\nx\r\n0\r\n\r\n"
    else:
        raw = start + f"X-A: ok\r\nX-A: {ph}\r\nContent-Length: 0\r\n\r\n"
    reply = plain_request(sg, sess["token"], raw.encode())
    for seen in up.recorder.requests:
        blob = repr(seen.headers).encode() + seen.path.encode() + seen.body
        assert ph.encode() not in blob and ph[:half].encode() not in blob and ph[half:].encode() not in blob
        assert REAL.encode() not in blob and REAL[:len(REAL) // 2].encode() not in blob    # nor the real value
    if trick in ("folded", "dup-header"):
        assert up.recorder.requests == [] and reply.startswith((b"HTTP/1.1 403", b"HTTP/1.1 400")), reply[:300]


@pytest.mark.parametrize("framing", ["chunked", "large"])
def test_a_streamed_upload_to_the_bound_host_carries_the_real_value_in_its_headers(env, framing):
    """A body that streams (chunked, or larger than inspect_max_bytes) leaves with its headers before the body is
    read: the header and query placeholders are swapped at that point, not after (git push, large uploads)."""
    sg, up = env
    sess = sg.session(allow=["bound.test"], secrets=["key"])
    ph = sess["env"]["KEY"]
    up.recorder.requests.clear()
    head = (f"POST http://bound.test:{up.port}/echo?k={ph} HTTP/1.1\r\nHost: bound.test:{up.port}\r\n"
            f"Proxy-Authorization: @AUTH@\r\nAuthorization: Bearer {ph}\r\nConnection: close\r\n")
    if framing == "chunked":
        raw = (head + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n").encode()
    else:
        body = b"x" * (3 * 1024 * 1024)
        raw = (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    reply = plain_request(sg, sess["token"], raw, whole=True)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
    seen = up.recorder.requests[-1]
    assert seen.headers["authorization"] == f"Bearer {REAL}" and seen.path == f"/echo?k={REAL}"
    assert REAL.encode() not in reply and ph.encode() in reply           # the echo is scrubbed back
