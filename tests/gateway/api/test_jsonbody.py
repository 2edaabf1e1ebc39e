"""jsonbody.parse_body: strict JSON or ValueError, for any bytes."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.net.jsonbody import MAX_DEPTH, parse_body


@pytest.mark.parametrize("raw", [
    b"NaN", b'{"a": Infinity}', b"[-Infinity]", b'"\\ud800"', b'{"\\udc80": 1}', b'["ok", ["\\udfff"]]',
    b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), b"[" * 100000 + b"]" * 100000, b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b"\xff", b"\xef\xbb\xbf{}", b"{", b"", b'{"a": "x\\u0000"}', b'{"\\u0000": 1}',
    b'{"labels": {"a": "b"}, "labels": {}}', b'{"labels": {"a": "b", "a": "c"}}', b'[{"x": 1, "y": 2, "x": 1}]',
])
def test_refused(raw):
    with pytest.raises(ValueError):
        parse_body(raw)


@pytest.mark.parametrize("raw, value", [
    (b"{}", {}), (b'{"a": "\\ud83d\\ude00"}', {"a": "\U0001F600"}), (b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, None),
    (b'{"n": 1e308, "i": 123456789012345678901234567890}', {"n": 1e308, "i": 123456789012345678901234567890}),
    ('{"é": "ü"}'.encode(), {"é": "ü"}),
])
def test_accepted(raw, value):
    got = parse_body(raw)
    if value is not None:
        assert got == value


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_value_or_valueerror(raw):
    try:
        value = parse_body(raw)
    except ValueError:
        return
    json.dumps(value, allow_nan=False).encode("utf-8")      # whatever is accepted is storable JSON


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
                    max_leaves=30))
def test_roundtrip_of_json_values(value):
    raw = json.dumps(value).encode()
    try:
        assert parse_body(raw) == value
    except ValueError as exc:
        assert "surrogate" in str(exc)
        assert any("\x00" in t or not t.isascii() for t in _texts(value))


def _texts(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


def _walked(raw: bytes, max_depth: int):
    """parse_body as it was before the shortcut: always the walk (check_value)."""
    from gateway.net.jsonbody import check_value
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=lambda n: (_ for _ in ()).throw(ValueError(n)))
        check_value(value, max_depth)
        return value
    except (ValueError, RecursionError):
        return ValueError


_pieces = st.lists(st.sampled_from(['[', ']', '{', '}', '"a"', ':', ',', '1', '"\\u0000"', '"\\ud800"', '"\\n"',
                                    '"x\\\\y"', '"é"', 'null', ' ', '"\x00"']), max_size=30).map("".join)


@settings(max_examples=1500, deadline=None)
@given(_pieces | st.recursive(st.none() | st.text(max_size=4), lambda k: st.lists(k, max_size=3)
                               | st.dictionaries(st.text(max_size=3), k, max_size=3), max_leaves=30).map(json.dumps),
       st.integers(1, 6))
def test_the_walk_is_skipped_only_when_it_could_not_refuse(text, max_depth):
    """parse_body skips check_value for bodies with no backslash and few brackets: it accepts and refuses
    exactly what the walk does."""
    raw = text.encode("utf-8", "surrogatepass")
    try:
        got = parse_body(raw, max_depth)
    except ValueError:
        got = ValueError
    assert got == _walked(raw, max_depth) or (got is ValueError and _walked(raw, max_depth) is ValueError)
