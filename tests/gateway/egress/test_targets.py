"""One destination per request (pure): the names a request carries must agree with where it goes."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gateway.net.hosts import parse_authority
from gateway.egress.targets import AUTHORITY_MISMATCH, HOST_MISMATCH, TargetArgs, check_target

DEST = ("allowed.test", 8443)


@pytest.mark.parametrize("in_tunnel, authority, hosts, code", [
    # inside a tunnel: absolute-form / :authority
    (True, "", ["allowed.test:8443"], None),
    (True, "allowed.test:8443", [], None),
    (True, "allowed.test", [], None),                          # no port named: agrees
    (True, "ALLOWED.test.:8443", [], None),                    # same name, other spelling
    (True, "other.test:8443", [], AUTHORITY_MISMATCH),
    (True, "allowed.test:443", [], AUTHORITY_MISMATCH),        # another port
    (True, "allowed.test.evil.test", [], AUTHORITY_MISMATCH),
    (True, "user@allowed.test", [], AUTHORITY_MISMATCH),       # user info is not a destination
    (True, "allowed.test:8443/x", [], AUTHORITY_MISMATCH),
    (True, "127.0.0.1:8443", [], AUTHORITY_MISMATCH),
    (True, "allowed.test:99999", [], AUTHORITY_MISMATCH),
    (True, "allowed.test:", [], None),
    # inside a tunnel: Host header
    (True, "", ["allowed.test"], None),
    (True, "", ["other.test:8443"], HOST_MISMATCH),
    (True, "", ["allowed.test:443"], AUTHORITY_MISMATCH),
    (True, "", ["allowed.test:8443", "other.test"], HOST_MISMATCH),   # two Host headers
    (True, "", ["allowed.test", "allowed.test"], HOST_MISMATCH),
    (True, "allowed.test:8443", ["other.test"], HOST_MISMATCH),
    (True, "other.test", ["allowed.test"], AUTHORITY_MISMATCH),
    (True, "", ["bad host"], HOST_MISMATCH),
    # plain proxy: today's Host check (host only)
    (False, "", ["allowed.test:1234"], None),
    (False, "", ["allowed.test."], None),
    (False, "", ["other.test:8443"], HOST_MISMATCH),
    (False, "", [], None),
    (False, "", ["a", "b"], HOST_MISMATCH),
])
def test_check_target(in_tunnel, authority, hosts, code):
    verdict = check_target(TargetArgs(DEST, in_tunnel, authority, hosts))
    assert (verdict.code if verdict else None) == code
    if verdict:
        assert verdict.reason


@pytest.mark.parametrize("text, expected", [
    ("a.test", ("a.test", None)), ("a.test:80", ("a.test", 80)), ("A.Test.:443", ("a.test", 443)),
    ("[::1]:8080", ("::1", 8080)), ("[::ffff:127.0.0.1]", ("127.0.0.1", None)), ("127.1:80", ("127.0.0.1", 80)),
    ("a.test:", ("a.test", None)),
])
def test_parse_authority(text, expected):
    assert parse_authority(text) == expected


@pytest.mark.parametrize("text", ["", "::1", "[a.test]:80", "u@a.test", "a.test:0", "a.test:x", "a.test/p",
                                  "[::1", "[::1]x", "a b", "a.test:65536"])
def test_parse_authority_rejects(text):
    with pytest.raises(ValueError):
        parse_authority(text)


@given(st.text(max_size=40))
def test_parse_authority_raises_only_value_error(text):
    try:
        parse_authority(text)
    except ValueError:
        pass


hosts = st.sampled_from(["allowed.test", "other.test", "ALLOWED.TEST.", "evil.test", "127.0.0.1", "[::1]"])
ports = st.sampled_from([None, 8443, 443, 80])


@given(hosts, ports, st.lists(st.tuples(hosts, ports), max_size=2))
def test_a_tunnel_request_passes_only_when_every_name_is_the_destination(auth_host, auth_port, host_headers):
    def text(h, p):
        return h if p is None else f"{h}:{p}"

    authority = text(auth_host, auth_port)
    headers = [text(h, p) for h, p in host_headers]
    verdict = check_target(TargetArgs(DEST, True, authority, headers))
    names = [(auth_host, auth_port)] + host_headers
    agrees = all(h.lower().rstrip(".") == "allowed.test" and p in (None, 8443) for h, p in names)
    assert (verdict is None) == (agrees and len(headers) <= 1)
