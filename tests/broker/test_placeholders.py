from __future__ import annotations

import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.placeholders import (BASE62, MIN_BITS, PlaceholderFormat, make_placeholder, parse_format,
                                 random_bits)

SAFE = re.compile(r"[A-Za-z0-9_-]*\Z")


@pytest.mark.parametrize("text, expected", [
    (None, None),
    ("", None),
    ("  ", None),
    ("ghp_:40", PlaceholderFormat("ghp_", 40)),
    ("sk-:51", PlaceholderFormat("sk-", 51)),
    (":32", PlaceholderFormat("", 32)),
    ("xoxb-", PlaceholderFormat("xoxb-", None)),
    ("glpat-:26", PlaceholderFormat("glpat-", 26)),
])
def test_parse_format(text, expected):
    assert parse_format(text) == expected


@pytest.mark.parametrize("text", [
    "ghp_:", "ghp_:abc", "ghp_:-5", ":0", ":16", "ghp_:20", "a b:40", "ghp:_:40", "x/y:40", ":99999",
    "ghp_:４０", 42,
])
def test_parse_format_rejects(text):
    with pytest.raises(ValueError):
        parse_format(text)


@given(st.text(max_size=20))
def test_parse_format_raises_only_value_error(text):
    try:
        parse_format(text)
    except ValueError:
        pass


def test_default_shape():
    ph = make_placeholder(None, None)
    assert ph.startswith("sgph_") and len(ph) == 45 and SAFE.match(ph)


@pytest.mark.parametrize("fmt, real_length, prefix, length", [
    (PlaceholderFormat("ghp_", 40), None, "ghp_", 40),
    (PlaceholderFormat("ghp_", 40), 93, "ghp_", 40),  # the format's length wins
    (PlaceholderFormat("sk-"), 51, "sk-", 51),
    (None, 64, "", 64),
    (PlaceholderFormat("xoxb-"), None, "xoxb-", 45),
])
def test_shape_follows_format_then_real_length(fmt, real_length, prefix, length):
    ph = make_placeholder(fmt, real_length)
    assert ph.startswith(prefix) and len(ph) == length and SAFE.match(ph[len(prefix):])


def test_refuses_too_little_randomness():
    with pytest.raises(ValueError):
        make_placeholder(None, 16)  # 16 base62 characters: about 95 bits
    with pytest.raises(ValueError):
        make_placeholder(PlaceholderFormat("ghp_"), 20)
    with pytest.raises(ValueError):
        PlaceholderFormat("ghp_", 12)
    assert random_bits(17) >= MIN_BITS and random_bits(16) < MIN_BITS
    assert len(make_placeholder(None, 17)) == 17


def test_uses_the_random_source_and_is_unique():
    seeded = make_placeholder(None, None, random.Random(7))
    assert seeded == make_placeholder(None, None, random.Random(7))
    drawn = {make_placeholder(None, None) for _ in range(2000)}
    assert len(drawn) == 2000


@given(prefix=st.text(alphabet=BASE62 + "_-.", max_size=8), extra=st.integers(17, 200),
       use_format_length=st.booleans())
def test_any_valid_shape_is_safe_and_exact(prefix, extra, use_format_length):
    length = len(prefix) + extra
    fmt = PlaceholderFormat(prefix, length if use_format_length else None)
    ph = make_placeholder(fmt, None if use_format_length else length)
    assert len(ph) == length and ph.startswith(prefix)
    assert SAFE.match(ph[len(prefix):])
    assert random_bits(len(ph) - len(prefix)) >= MIN_BITS
