"""What an egress approval is bound to (pure): method, URL, body hash and the headers that carry meaning."""
from __future__ import annotations

import base64

import pytest
from hypothesis import given, strategies as st

from broker.inject import find_placeholders
from gateway.egress.binding import UNBOUND_HEADERS, binding_headers, egress_binding

PH_GH = "ghp_" + "a" * 36
PH_OTHER = "sgph_" + "b" * 40
OWNERS = {PH_GH: ("s1", "github"), PH_OTHER: ("s1", "other")}
BASE = [("Host", "api.test"), ("Content-Type", "application/json"), ("X-Target", "prod")]


def secret_of(value: str) -> list[str]:
    return sorted({name for _, name in find_placeholders(value, OWNERS)})


def binding(headers, method="DELETE", url="https://api.test/x", body=b"{}"):
    return egress_binding("s1", method, url, body, binding_headers(headers, secret_of))


@pytest.mark.parametrize("extra", [
    [("Date", "Mon, 30 Nov 2026 10:00:00 GMT")],
    [("Connection", "keep-alive"), ("Keep-Alive", "timeout=5")],
    [("Connection", "close, X-Hop"), ("X-Hop", "1")],                 # named hop-by-hop by Connection
    [("Proxy-Authorization", "Basic eDp5")], [("Proxy-Connection", "keep-alive")], [("Proxy-Anything", "1")],
    [("Via", "1.1 a")], [("Forwarded", "for=1.2.3.4")], [("X-Forwarded-For", "1.2.3.4")],
    [("TE", "trailers")], [("Transfer-Encoding", "chunked")], [("Upgrade", "h2c")], [("Trailer", "x")],
    [("Content-Length", "2")],                                        # the body hash binds the body
])
def test_unbound_headers_do_not_change_the_binding(extra):
    assert binding(BASE + extra) == binding(BASE)


@pytest.mark.parametrize("changed", [
    [("X-Target", "staging")],
    [("Content-Type", "text/plain")],
    [("Authorization", "Bearer other-value")],
    [("Cookie", "session=2")],
    [("X-Target", "prod"), ("X-Target", "dev")],
    [("If-Match", "*")],
    [("Authorization", f"Bearer {PH_OTHER}")],                        # another secret than approved
])
def test_meaningful_headers_change_the_binding(changed):
    approved = BASE + [("Authorization", f"Bearer {PH_GH}"), ("Cookie", "session=1")]
    variant = [h for h in approved if h[0].lower() not in {c[0].lower() for c in changed}] + changed
    assert binding(variant) != binding(approved)


def test_method_url_and_body_bind():
    assert binding(BASE, method="POST") != binding(BASE)
    assert binding(BASE, url="https://api.test/y") != binding(BASE)
    assert binding(BASE, body=b'{"a":1}') != binding(BASE)


def test_placeholder_values_are_bound_by_their_secret_in_any_encoding():
    basic = "Basic " + base64.b64encode(f"x-access-token:{PH_GH}".encode()).decode()
    bound = binding_headers([("Authorization", basic), ("X-Key", f"ghp%5F{PH_GH[4:]}")], secret_of)
    assert bound == [("authorization", "{secret:github}"), ("x-key", "{secret:github}")]
    assert binding([("Authorization", f"Bearer {PH_GH}")]) == binding([("Authorization", basic)])
    assert PH_GH not in repr(binding_headers([("Authorization", f"Bearer {PH_GH}")], secret_of))


def test_unbound_list_is_documented_shape():
    assert {"date", "connection", "proxy-authorization", "host", "content-length"} <= UNBOUND_HEADERS


names = st.sampled_from(["X-A", "x-b", "Accept", "Content-Type", "Date", "Via", "X-C"])
values = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=8)


@given(st.lists(st.tuples(names, values), max_size=8), st.randoms())
def test_order_across_names_and_name_case_do_not_matter(headers, rnd):
    # Shuffle whole name groups (the order of repeated headers is meaningful and kept).
    groups: dict[str, list] = {}
    for name, value in headers:
        groups.setdefault(name.lower(), []).append((name.upper(), value))
    keys = list(groups)
    rnd.shuffle(keys)
    shuffled = [pair for key in keys for pair in groups[key]]
    assert binding_headers(shuffled) == binding_headers(headers)


# -- AWS calls ---------------------------------------------------------------------------------------------

from gateway.egress.binding import aws_binding  # noqa: E402

AWS = {"service": "ec2", "region": "us-east-1", "operation": "TerminateInstances", "resource": "i-1"}


def _aws_headers(date: str, sig: str, attempt: int) -> list[tuple[str, str]]:
    return [("Host", "ec2.us-east-1.amazonaws.com"), ("X-Amz-Date", date), ("User-Agent", f"aws-cli/1.44 a/{attempt}"),
            ("amz-sdk-invocation-id", f"id-{attempt}"), ("amz-sdk-request", f"attempt={attempt}; max=5"),
            ("Authorization", f"AWS4-HMAC-SHA256 Credential=AKIAPH/20260101/us-east-1/ec2/aws4_request, "
                              f"SignedHeaders=host;x-amz-date, Signature={sig}"),
            ("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")]


def test_aws_binding_ignores_signature_date_and_sdk_headers():
    body = b"Action=TerminateInstances&InstanceId.1=i-1&Version=2016-11-15"
    first = aws_binding("s1", AWS, "POST", "https://ec2.us-east-1.amazonaws.com/", body,
                        _aws_headers("20260101T000000Z", "a" * 64, 1), lambda v: ())
    retry = aws_binding("s1", AWS, "POST", "https://ec2.us-east-1.amazonaws.com/", body,
                        _aws_headers("20260101T000100Z", "b" * 64, 2), lambda v: ())
    assert first == retry
    other_body = aws_binding("s1", AWS, "POST", "https://ec2.us-east-1.amazonaws.com/", body.replace(b"i-1", b"i-2"),
                             _aws_headers("20260101T000000Z", "a" * 64, 1), lambda v: ())
    other_op = aws_binding("s1", {**AWS, "operation": "StopInstances"}, "POST", "https://ec2.us-east-1.amazonaws.com/",
                           body, _aws_headers("20260101T000000Z", "a" * 64, 1), lambda v: ())
    other_session = aws_binding("s2", AWS, "POST", "https://ec2.us-east-1.amazonaws.com/", body,
                                _aws_headers("20260101T000000Z", "a" * 64, 1), lambda v: ())
    assert len({first, other_body, other_op, other_session}) == 4


def test_aws_binding_of_presigned_urls_drops_the_presigning_parameters():
    def url(date: str, sig: str) -> str:
        return (f"https://b.s3.amazonaws.com/k?versionId=3&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAPH%2F"
                f"x&X-Amz-Date={date}&X-Amz-Expires=300&X-Amz-SignedHeaders=host&X-Amz-Signature={sig}")
    s3 = {"service": "s3", "region": "us-east-1", "operation": "DeleteObject", "resource": "b/k"}
    a = aws_binding("s1", s3, "DELETE", url("20260101T000000Z", "a" * 64), b"", [], lambda v: ())
    b = aws_binding("s1", s3, "DELETE", url("20260101T000500Z", "c" * 64), b"", [], lambda v: ())
    c = aws_binding("s1", s3, "DELETE", url("20260101T000500Z", "c" * 64).replace("versionId=3", "versionId=4"), b"",
                    [], lambda v: ())
    assert a == b != c
