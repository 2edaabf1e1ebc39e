"""CSRF helpers (pure): the cross-origin check, token comparison, safe redirect targets."""
from __future__ import annotations

import pytest

from gateway.web.csrf import check_request_origin, safe_next, token_matches

HOST = "127.0.0.1:8700"


@pytest.mark.parametrize("method, headers, ok", [
    ("GET", {"Sec-Fetch-Site": "cross-site"}, True),            # safe methods are not checked
    ("POST", {}, True),                                          # not a browser: the CSRF token decides
    ("POST", {"Sec-Fetch-Site": "same-origin"}, True),
    ("POST", {"Sec-Fetch-Site": "none"}, True),                  # typed in / bookmark
    ("POST", {"Sec-Fetch-Site": "same-site"}, False),            # a sibling subdomain is not us
    ("POST", {"Sec-Fetch-Site": "cross-site"}, False),
    ("POST", {"Sec-Fetch-Site": "cross-site", "Origin": "http://127.0.0.1:8700"}, False),
    ("POST", {"Origin": "http://127.0.0.1:8700"}, True),
    ("POST", {"Origin": "http://127.0.0.1:8701"}, False),
    ("POST", {"Origin": "http://evil.test"}, False),
    ("POST", {"Origin": "null"}, False),
])
def test_check_request_origin(method, headers, ok):
    assert (check_request_origin(method, headers, HOST) is None) is ok


@pytest.mark.parametrize("expected, given, ok", [
    ("abc123", "abc123", True), ("abc123", "abc124", False), ("abc123", "", False), ("abc123", None, False),
    ("", "", False), (None, "x", False), ("abc123", ["abc123"], False),
])
def test_token_matches(expected, given, ok):
    assert token_matches(expected, given) is ok


@pytest.mark.parametrize("target, want", [
    ("/approvals/a_1", "/approvals/a_1"), ("/history?state=denied", "/history?state=denied"),
    (None, "/"), ("", "/"), ("//evil.test", "/"), ("https://evil.test/", "/"), ("/\\evil.test", "/"),
    ("/x\r\nSet-Cookie: a=b", "/"), ("/login", "/"), ("/logout", "/"), ("evil", "/"),
])
def test_safe_next(target, want):
    assert safe_next(target) == want
