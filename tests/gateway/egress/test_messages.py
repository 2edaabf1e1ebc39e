"""The fast per-message type check gives mitmproxy's verdicts (gateway/egress/messages.py)."""
from __future__ import annotations

import pytest
from mitmproxy import http

from gateway.egress.messages import exact_types, install_fast_message_check


def verdict(check, data: type, values: dict) -> str:
    """What a __post_init__ says of a data object holding these field values: "" or the TypeError's text."""
    obj = data.__new__(data)
    obj.__dict__.update(values)
    try:
        check(obj)
    except TypeError as exc:
        return str(exc)
    return ""


def request_values(**over) -> dict:
    values = dict(host="example.com", port=443, method=b"GET", scheme=b"https", authority=b"", path=b"/",
                  http_version=b"HTTP/1.1", headers=http.Headers(host="example.com"), content=b"", trailers=None,
                  timestamp_start=1.0, timestamp_end=None)
    return values | over


def response_values(**over) -> dict:
    values = dict(http_version=b"HTTP/1.1", status_code=200, reason=b"OK", headers=http.Headers(), content=None,
                  trailers=None, timestamp_start=1.0, timestamp_end=2.0)
    return values | over


class SubBytes(bytes):
    pass


CASES = [
    (http.RequestData, request_values()),
    (http.RequestData, request_values(timestamp_start=1, timestamp_end=2)),      # int for float
    (http.RequestData, request_values(content=None, trailers=http.Headers(x="1"))),
    (http.RequestData, request_values(path=SubBytes(b"/sub"))),                  # a subclass
    (http.RequestData, request_values(port="443")),
    (http.RequestData, request_values(method="GET")),
    (http.RequestData, request_values(headers={"host": "x"})),
    (http.RequestData, request_values(content="text")),
    (http.RequestData, request_values(trailers=[])),
    (http.RequestData, request_values(timestamp_end="soon")),
    (http.RequestData, request_values(port=True)),                              # bool is an int
    (http.ResponseData, response_values()),
    (http.ResponseData, response_values(status_code=200.0)),
    (http.ResponseData, response_values(reason="OK")),
    (http.ResponseData, response_values(timestamp_start=None)),
    (http.ResponseData, response_values(http_version=bytearray(b"HTTP/1.1"))),
]


@pytest.mark.parametrize("data, values", CASES)
def test_the_same_verdict_as_mitmproxys_check(data, values):
    install_fast_message_check()
    assert "__post_init__" in data.__dict__
    assert verdict(data.__post_init__, data, values) == verdict(http.MessageData.__post_init__, data, values)


def test_messages_mitmproxy_builds_pass():
    install_fast_message_check()
    request = http.Request.make("POST", "https://example.com:8443/x?y=1", b"body", {"a": "b"})
    response = http.Response.make(403, b"no", {"content-type": "text/plain"})
    assert (request.port, request.content, response.status_code) == (8443, b"body", 403)


def test_exact_types_of_the_annotations():
    assert exact_types(bytes) == {bytes}
    assert exact_types(bytes | None) == {bytes, type(None)}
    assert exact_types(http.Headers | None) == {http.Headers, type(None)}
    assert exact_types(tuple[int, int]) == frozenset()      # anything else goes to mitmproxy's check
