"""The MCP part of a tool call (`body.mcp` → `input.mcp`): validation and approval binding. Pure."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gateway.mcp.context import McpContext, parse_mcp_context
from gateway.sessions.spec import MAX_TTL_S, BadRequest, renewed_expiry
from gateway.store.records import Session


def test_to_input_marks_annotations_untrusted():
    ctx = parse_mcp_context({"server": "github", "annotations": {"readOnlyHint": True}})
    assert ctx.to_input() == {"server": "github", "annotations": {"readOnlyHint": True}, "untrusted": ["annotations"]}
    assert parse_mcp_context({"server": "gh"}, listing=True).to_input()["listing"] is True
    assert parse_mcp_context({"server": "gh", "annotations": None}).annotations == {}


@pytest.mark.parametrize("value", [
    None, "github", [], {}, {"server": ""}, {"server": "a/b"}, {"server": "../x"}, {"server": "x" * 129},
    {"server": "a b"}, {"server": "a\nb"}, {"server": 3}, {"server": "ok", "annotations": []},
    {"server": "ok", "annotations": "x"}, {"server": "ok", "extra": 1},
    {"server": "ok", "annotations": {"k": "v" * 20000}},
])
def test_bad_mcp_bodies_are_refused(value):
    with pytest.raises(ValueError):
        parse_mcp_context(value)


def test_binding_target_separates_servers():
    assert McpContext("a").target("delete") != McpContext("b").target("delete")
    assert McpContext("a").target("delete") != "delete"


@given(st.one_of(st.none(), st.text(), st.integers(), st.dictionaries(st.text(), st.text())))
def test_parse_raises_only_value_error(value):
    try:
        parse_mcp_context({"server": value} if not isinstance(value, dict) else value)
    except ValueError:
        pass


@pytest.mark.parametrize("ttl,now,ok", [
    (60, 1000.0, True), (MAX_TTL_S, 0.0, True), (MAX_TTL_S + 1, 0.0, False), (MAX_TTL_S, 10.0, False),
    (0, 0.0, False), (-5, 0.0, False), (True, 0.0, False), ("60", 0.0, False), (1.5, 0.0, False), (None, 0.0, False),
])
def test_renewed_expiry(ttl, now, ok):
    row = Session(id="s_1", workload="persistent", created_at=0.0, expires_at=1.0)
    if ok:
        assert renewed_expiry(row, ttl, now) == now + ttl
    else:
        with pytest.raises(BadRequest):
            renewed_expiry(row, ttl, now)
