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
                           "request_id": "rid-1", "access_request": "http://sandgate.internal/v1/access-requests",
                           "hint": "to ask a person for access, POST {\"host\", \"reason\"} to "
                                   "http://sandgate.internal/v1/access-requests"}
    assert resp.reason.startswith("Forbidden by sandgate: ")
    assert resp.reason.endswith("(ask: http://sandgate.internal/v1/access-requests)")
    long = denial("egress.not_allowlisted", "x" * 500, "rid-1")
    assert long.reason.endswith("(ask: http://sandgate.internal/v1/access-requests)")
    assert "access_request" not in denial("x", "y", "rid-1", status=503).json()


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


_NAMES = st.sampled_from([b"Proxy-Authorization", b"proxy-authorization", b"PROXY-AUTHORIZATION", b"Proxy-Authorizatio",
                          b"X-Proxy-Authorization", b"Host", b"Authorization", b"proxy-authorization ",
                          "Proxy-Authorizaţion".encode()])


@given(st.lists(st.tuples(st.one_of(_NAMES, st.binary(max_size=8)), st.binary(max_size=12)), max_size=8))
def test_take_proxy_authorization_is_get_all_then_del(fields):
    """The one-pass split gives what mitmproxy's Headers.get_all and del give (the old code)."""
    from gateway.egress.credentials import take_proxy_authorization
    headers = http.Headers(fields)
    expected_values = headers.get_all("Proxy-Authorization")
    if expected_values:
        del headers["Proxy-Authorization"]
    kept, values = take_proxy_authorization(tuple(fields))
    assert values == expected_values and kept == headers.fields


@given(scheme=st.sampled_from(["http", "https", "ht?p", "HTTP"]),
       host=st.sampled_from(["allowed.test", "127.0.0.1", "::1", "a?b", "xn--bcher-kva.de", ""]),
       port=st.integers(1, 65535),
       path=st.one_of(st.just("*"), st.just(""), st.text(alphabet="/?&=#a%*", max_size=12)),
       method=st.sampled_from(["GET", "POST", "OPTIONS"]))
def test_url_query_is_the_urls_query(scheme, host, port, path, method):
    from gateway.egress.addon import url_query
    req = http.Request(host, port, method.encode(), scheme.encode(), b"", path.encode(), b"HTTP/1.1", http.Headers(),
                       b"", None, 0.0, None)
    assert url_query(req) == req.url.partition("?")[2]
