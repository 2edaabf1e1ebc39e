"""Strings out of a JSON value and back in (scrubbing MCP results). Pure."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from sandgate.mcp.walk import collect_strings, replace_strings

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                           max_leaves=20)


@given(json_values)
def test_identity_round_trip(value):
    assert replace_strings(value, collect_strings(value)) == value


@given(json_values)
def test_every_string_is_replaced(value):
    strings = collect_strings(value)
    out = replace_strings(value, ["\x00" + s for s in strings])
    assert collect_strings(out) == ["\x00" + s for s in strings]


def test_keys_and_nesting():
    value = {"content": [{"type": "text", "text": "secret"}], "n": 3}
    assert collect_strings(value) == ["content", "type", "text", "text", "secret", "n"]
    assert replace_strings(value, ["content", "type", "text", "text", "PH", "n"]) == \
        {"content": [{"type": "text", "text": "PH"}], "n": 3}


def test_count_mismatch_is_an_error():
    with pytest.raises(ValueError):
        replace_strings("a", ["a", "b"])
    with pytest.raises(StopIteration):
        replace_strings(["a", "b"], ["a"])
