"""Pure helpers of the egress addon: proxy credentials, status reasons, body sizing."""
from __future__ import annotations

import base64
import re

import pytest
from hypothesis import given, strategies as st
from mitmproxy import http

from gateway.egress.addon import unsized_body
from gateway.egress.credentials import parse_proxy_authorization
from gateway.egress.responses import denial, status_reason


def basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize("value, token", [
    (basic("sandgate:tok.en.x"), "tok.en.x"), (basic("anyone:t"), "t"), (basic(":t"), "t"),
    ("Bearer abc", "abc"), ("bearer  abc ", "abc"), (basic("user:"), None), (basic("nocolon"), None),
    ("Basic !!!", None), ("Digest x", None), ("", None), ("Basic", None), (basic("a:b:c"), "b:c"),
])
def test_parse_proxy_authorization(value, token):
    assert parse_proxy_authorization(value) == token


@given(st.text())
def test_parse_proxy_authorization_never_raises(value):
    parse_proxy_authorization(value)


@pytest.mark.parametrize("text", ["ok", "new\r\nline", "über", "x" * 500, ""])
def test_status_reason_is_safe(text):
    out = status_reason(text)
    assert re.fullmatch(r"[\x20-\x7e]{1,200}", out)


def test_denial_shape():
    resp = denial("egress.not_allowlisted", "evil.test is not allowed", "rid-1")
    assert resp.status_code == 403 and resp.headers["X-Sandgate-Decision"] == "deny"
    assert resp.json() == {"error": "denied", "reason": "evil.test is not allowed", "code": "egress.not_allowlisted",
                           "request_id": "rid-1"}
    assert resp.reason.startswith("Forbidden by sandgate: ")


@pytest.mark.parametrize("version, method, headers, expected", [
    ("HTTP/1.1", "POST", {"transfer-encoding": "chunked"}, True),
    ("HTTP/1.1", "POST", {"content-length": "10"}, False),
    ("HTTP/1.1", "GET", {}, False),
    ("HTTP/2.0", "POST", {}, True),
    ("HTTP/2.0", "PUT", {"content-length": "5"}, False),
    ("HTTP/2.0", "GET", {}, False),
])
def test_unsized_body(version, method, headers, expected):
    req = http.Request.make(method, "http://x.test/", b"", headers)
    if "content-length" not in headers:
        req.headers.pop("content-length", None)
    req.http_version = version
    assert unsized_body(req) is expected
