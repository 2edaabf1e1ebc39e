"""Access requests and grants as pure functions: filing checks, narrowing (never widening), grants in force,
path prefixes at segment boundaries of the normalised path."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings, strategies as st

from gateway.approvals.access import (METHODS, AccessRules, BadAccess, covers, grant_in_force, live_grants, narrow,
                                      parse_access_request)
from gateway.net.paths import AMBIGUOUS, normalise_path, path_covered
from gateway.store.records import Approval

RULES = AccessRules(max_ttl_s=600, resolve={"inside.test": ["10.0.0.5"], "lo.test": ["127.0.0.1"],
                                            "ok.test": ["127.0.0.1"]},
                    private_allow=(ipaddress.ip_network("127.0.0.0/8"),))


def parse(**body):
    return RULES.parse({"reason": "need it", **body})


def test_defaults_and_normalisation():
    req = parse(host="API.Partner.Test.")
    assert req.host == "api.partner.test" and req.port is None and req.methods == METHODS
    assert req.path_prefix == "/" and req.ttl_s == 600
    req = parse(host="api.partner.test", port=8443, methods=["get", "POST"], path_prefix="/v1/./a/../", ttl_s=60)
    assert (req.port, req.methods, req.path_prefix, req.ttl_s) == (8443, ("GET", "POST"), "/v1/", 60.0)


@pytest.mark.parametrize("body, text", [
    ({"host": "api.partner.test", "reason": "x", "extra": 1}, "unknown field"),
    ({"host": "http://api.partner.test/", "reason": "x"}, "host must be"),
    ({"host": "api.partner.test:443", "reason": "x"}, "host must be"),
    ({"host": "a b.test", "reason": "x"}, "host must be"),
    ({"host": "", "reason": "x"}, "host must be"),
    ({"host": 5, "reason": "x"}, "host must be"),
    ({"host": "api.partner.test"}, "reason is required"),
    ({"host": "api.partner.test", "reason": "  "}, "reason is required"),
    ({"host": "api.partner.test", "reason": "x", "ttl_s": 601}, "max_grant_ttl_s"),
    ({"host": "api.partner.test", "reason": "x", "ttl_s": 0}, "ttl_s"),
    ({"host": "api.partner.test", "reason": "x", "ttl_s": True}, "ttl_s"),
    ({"host": "api.partner.test", "reason": "x", "port": 0}, "port"),
    ({"host": "api.partner.test", "reason": "x", "port": "443"}, "port"),
    ({"host": "api.partner.test", "reason": "x", "methods": []}, "methods"),
    ({"host": "api.partner.test", "reason": "x", "methods": ["CONNECT"]}, "methods"),
    ({"host": "api.partner.test", "reason": "x", "path_prefix": "v1"}, "path_prefix"),
    ({"host": "api.partner.test", "reason": "x", "path_prefix": "/v1/%2e%2e/"}, "path_prefix"),
    ({"host": "api.partner.test", "reason": "x", "path_prefix": "/v1/%00/"}, "control characters"),
    ({"host": "api.partner.test", "reason": "x", "path_prefix": "/v1/%0a"}, "control characters"),
    ({"host": "api.partner.test", "reason": "x", "path_prefix": "/v1/%7f"}, "control characters"),
    ({"host": "api.partner.test", "reason": "x", "path_prefix": "/v1/%E2%80%AE/"}, "bidi"),
    ({"host": "api.partner.test", "reason": "x", "path_prefix": "/v1/\u202egnp/"}, "bidi"),
    ({"host": "api.partner.test", "reason": "x", "path_prefix": "/v1\u200b/"}, "zero-width"),
    ({"host": "169.254.169.254", "reason": "x"}, "refused"),
    ({"host": "[::1]", "reason": "x"}, "refused"),
    ({"host": "0x0a000001", "reason": "x"}, "refused"),
    ({"host": "10.0.0.1", "reason": "x"}, "refused"),
    ({"host": "localhost", "reason": "x"}, "not a destination"),
    ({"host": "db.localhost", "reason": "x"}, "not a destination"),
    ({"host": "localhost.localdomain", "reason": "x"}, "not a destination"),
    ({"host": "LOCALHOST.localdomain.", "reason": "x"}, "not a destination"),
    ({"host": "localhost6.localdomain6", "reason": "x"}, "not a destination"),
    ({"host": "ｌｏｃａｌｈｏｓｔ", "reason": "x"}, "not a destination"),
    ({"host": "[::ffff:169.254.169.254]", "reason": "x"}, "refused"),
    ({"host": "2852039166", "reason": "x"}, "refused"),
    ({"host": "0251.0376.0376.0376", "reason": "x"}, "refused"),
    ({"host": "sandgate.internal", "reason": "x"}, "not a destination"),
    ({"host": "inside.test", "reason": "x"}, "refused"),
    ({"host": "intranet", "reason": "x"}, "fully qualified"),
    ([], "JSON object"),
])
def test_refused_at_filing(body, text):
    with pytest.raises(BadAccess, match=text):
        RULES.parse(body)


def test_allowed_private_and_public_literals_are_fine():
    assert parse(host="127.0.0.1").host == "127.0.0.1"        # private_allow covers it
    assert parse(host="lo.test").host == "lo.test"
    assert parse(host="93.184.216.34").host == "93.184.216.34"


def test_filing_never_resolves(monkeypatch):
    import socket

    def boom(*a, **k):
        raise AssertionError("resolved a name")
    monkeypatch.setattr(socket, "getaddrinfo", boom)
    monkeypatch.setattr(socket, "gethostbyname", boom)
    assert parse(host="never-resolved.example").host == "never-resolved.example"


REQUESTED = {"host": "h.test", "port": None, "methods": ["GET", "POST"], "path_prefix": "/v1/", "ttl_s": 300.0}


def test_narrow_and_never_widen():
    assert narrow(REQUESTED, {"methods": ["GET"], "path_prefix": "/v1/a", "ttl_s": 60}, 600) == {
        **REQUESTED, "methods": ["GET"], "path_prefix": "/v1/a", "ttl_s": 60.0}
    for change, text in [({"methods": ["DELETE"]}, "was not asked"), ({"path_prefix": "/"}, "outside"),
                         ({"path_prefix": "/v1-admin"}, "outside"), ({"path_prefix": "/v1/../admin"}, "outside"),
                         ({"ttl_s": 301}, "longer"), ({"ttl_s": 601}, "max_grant"), ({"host": "x.test"}, "unknown"),
                         ({"port": 1}, "unknown"), ([], "object")]:
        with pytest.raises(BadAccess, match=text):
            narrow(REQUESTED, change, 600)


def row(votes, **kw):
    return Approval(**{"id": "a_1", "kind": "access", "status": "approved", "used_at": None, "decided_at": 1000.0,
                       "action": {"grant": REQUESTED}, "votes": votes, "session": "s_1", "binding": "b",
                       "created_at": 900.0, "expires_at": 4500.0, **kw})


def test_grant_in_force_narrowest_vote_wins_and_runs_from_the_decision():
    votes = [{"by": "a", "verdict": "approve", "grant": {"methods": ["GET"], "ttl_s": 200}},
             {"by": "b", "verdict": "approve", "grant": {"path_prefix": "/v1/x", "ttl_s": 100}}]
    g = grant_in_force(row(votes))
    assert g == {"host": "h.test", "port": None, "methods": ["GET"], "path_prefix": "/v1/x/" if False else "/v1/x",
                 "expires_at": 1100.0, "approval": "a_1"}
    assert live_grants([row(votes)], 1099.9) == [g] and live_grants([row(votes)], 1100.0) == []
    assert grant_in_force(row(votes, used_at=1050.0)) is None             # withdrawn
    assert grant_in_force(row(votes, status="pending")) is None
    assert grant_in_force(row(votes, kind="egress")) is None
    crossing = [{"by": "a", "verdict": "approve", "grant": {"methods": ["GET"], "ttl_s": 50}},
                {"by": "b", "verdict": "approve", "grant": {"methods": ["GET", "POST"], "path_prefix": "/v1/a"}}]
    assert grant_in_force(row(crossing)) == {**g, "path_prefix": "/v1/a", "expires_at": 1050.0}
    disjoint = [{"by": "a", "verdict": "approve", "grant": {"path_prefix": "/v1/a"}},
                {"by": "b", "verdict": "approve", "grant": {"path_prefix": "/v1/b"}}]
    assert grant_in_force(row(disjoint)) is None
    no_method = [{"by": "a", "verdict": "approve", "grant": {"methods": ["GET"]}},
                 {"by": "b", "verdict": "approve", "grant": {"methods": ["POST"]}}]
    assert grant_in_force(row(no_method)) is None
    widening = [{"by": "a", "verdict": "approve", "grant": {"methods": ["DELETE"]}}]
    assert grant_in_force(row(widening)) is None                          # a stored widening grants nothing


@pytest.mark.parametrize("path, out", [
    ("/v1/x", "/v1/x"), ("/v1/./x", "/v1/x"), ("/v1/../admin", "/admin"), ("//v1//x/", "/v1/x/"),
    ("/v1/x?y=/..", "/v1/x"), ("/v1/%78", "/v1/x"), ("/v1/%2e%2e/admin", AMBIGUOUS),
    ("/v1/..%2fadmin", AMBIGUOUS), ("/v1/%252e%252e/admin", AMBIGUOUS), ("/v1/..;/admin", AMBIGUOUS),
    ("/v1\\..\\admin", "/admin"), ("", "/"), ("/..", "/"),
])
def test_normalise_path(path, out):
    assert normalise_path(path) == out


@pytest.mark.parametrize("path, prefix, ok", [
    ("/v1/x", "/v1/", True), ("/v1", "/v1/", True), ("/v1-admin", "/v1/", False), ("/v1-admin", "/v1", False),
    ("/admin", "/v1/", False), ("/anything", "/", True), (AMBIGUOUS, "/", True), (AMBIGUOUS, "/v1/", False),
    ("/v1/x/y", "/v1/x", True), ("/v1/xy", "/v1/x", False),
])
def test_path_covered(path, prefix, ok):
    assert path_covered(path, prefix) is ok


SEG = st.sampled_from(["v1", "x", "admin", "..", ".", "", "%2e%2e", "..%2f", "a%2Fb", "%2e", "b;c", "..;"])


@settings(max_examples=400)
@given(st.lists(SEG, max_size=6), st.lists(st.sampled_from(["v1", "x", "admin"]), min_size=1, max_size=3))
def test_a_covered_path_stays_under_the_prefix_however_a_server_reads_it(segments, prefix_segs):
    """Property: when a path is covered by a prefix other than "/", the plain dot-resolved reading of every way a
    server may decode it (raw, once-decoded) is under the prefix too."""
    path = "/" + "/".join(segments)
    prefix = "/" + "/".join(prefix_segs) + "/"
    if not path_covered(normalise_path(path), prefix):
        return
    from urllib.parse import unquote
    for reading in (path, unquote(path)):
        resolved = []
        for seg in reading.replace("\\", "/").split("/"):
            seg = seg.split(";", 1)[0] if seg.split(";", 1)[0] in (".", "..") else seg
            if seg in ("", "."):
                continue
            if seg == "..":
                resolved and resolved.pop()
                continue
            resolved.append(seg)
        assert path_covered("/" + "/".join(resolved), prefix), (path, reading)


@settings(max_examples=300)
@given(st.sampled_from(METHODS), st.lists(st.sampled_from(METHODS), min_size=1, unique=True),
       st.sampled_from(["/", "/v1/", "/v1/x"]), st.sampled_from(["/", "/v1/", "/v1/x", "/v2"]))
def test_narrowing_is_a_subset(method, methods, prefix, path):
    """Property: whatever a narrowed grant covers, the grant it narrows covers too."""
    base = {"host": "h.test", "port": None, "methods": list(METHODS), "path_prefix": "/v1/", "ttl_s": 100.0}
    try:
        narrowed = narrow(base, {"methods": methods, "path_prefix": prefix}, 600)
    except BadAccess:
        return
    live = {**narrowed, "expires_at": 1.0, "approval": "a"}
    if covers(live, method, "h.test", 443, path):
        assert covers({**base, "expires_at": 1.0, "approval": "a"}, method, "h.test", 443, path)


def test_covers():
    g = {"host": "h.test", "port": 443, "methods": ["GET"], "path_prefix": "/v1/", "expires_at": 1.0, "approval": "a"}
    assert covers(g, "GET", "h.test", 443, "/v1/x") and covers(g, "CONNECT", "h.test", 443, "")
    assert not covers(g, "POST", "h.test", 443, "/v1/x") and not covers(g, "GET", "h.test", 80, "/v1/x")
    assert not covers(g, "GET", "other.test", 443, "/v1/x") and not covers(g, "GET", "h.test", 443, "/admin")


VOTE = st.fixed_dictionaries({}, optional={
    "methods": st.lists(st.sampled_from(["GET", "POST", "HEAD", "DELETE"]), min_size=1, max_size=3),
    "path_prefix": st.sampled_from(["/", "/v1/", "/v1/a", "/v1/b", "/v2"]),
    "ttl_s": st.sampled_from([10, 100, 300, 1000])})


@settings(max_examples=300)
@given(st.lists(VOTE, max_size=3), st.sampled_from(["GET", "POST", "HEAD", "DELETE"]),
       st.sampled_from(["/v1/a/x", "/v1/b", "/v1", "/v2/x", "/"]))
def test_a_grant_in_force_is_never_wider_than_the_request_or_any_vote(changes, method, path):
    votes = [{"by": str(i), "verdict": "approve", "grant": c} for i, c in enumerate(changes)]
    valid = []
    for c in changes:
        try:
            valid.append(narrow(REQUESTED, c, 600))
        except BadAccess:
            assert grant_in_force(row(votes)) is None       # a vote that widens: nothing is granted
            return
    g = grant_in_force(row(votes))
    if g is None:
        return
    for allowed in [REQUESTED, *valid]:
        assert g["expires_at"] <= 1000.0 + float(allowed["ttl_s"])
        if covers(g, method, "h.test", 443, path):
            assert covers({**allowed, "expires_at": 0, "approval": "a"}, method, "h.test", 443, path)


@pytest.mark.parametrize("raw", [b'{"host": "x.test", "reason": "r\\ud800"}', b'{"host": "x.test", "reason": "r\\u0000"}',
                                 b'{"host": "x.test", "reason": "a", "reason": "b"}', b'{"ttl_s": NaN}'])
def test_the_sandbox_files_through_the_strict_json_of_the_api(raw):
    import asyncio
    from gateway.approvals.inside import PREFIX, answer
    status, doc = asyncio.run(answer(None, "s", "POST", PREFIX, {}, raw))    # refused before the queue is asked
    assert status == 400 and doc["error"] == "bad_json", doc
