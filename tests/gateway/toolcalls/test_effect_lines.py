"""effect_lines: what a tool call would do, in the words an approver reads (pure)."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.enrich import build_toolcall_input
from gateway.toolcalls.history import MAX_EFFECTS, effect_lines

SESSION = {"id": "s", "workload": "ephemeral", "created_at": 0.0, "workspace": "/workspace"}


def lines(tool, args):
    return effect_lines(build_toolcall_input(session=SESSION, tool=tool, args=args, step=None, now=1.0))


def test_deletes_writes_moves_and_hosts_are_named():
    assert lines("shell", {"command": "rm -rf /workspace/build && make"}) == ["deletes /workspace/build"]
    assert lines("shell", {"command": "mv a b; echo x > out.txt"}) == [
        "writes /workspace/b", "moves /workspace/a", "writes /workspace/out.txt"]
    assert lines("delete_file", {"path": "old.txt"}) == ["deletes /workspace/old.txt"]
    assert lines("write_file", {"path": "new.txt", "content": "x"}) == ["writes /workspace/new.txt"]
    assert lines("http_request", {"method": "POST", "url": "https://api.example.com/x"}) == [
        "sends POST to api.example.com"]
    assert lines("sql", {"query": "DELETE FROM t WHERE id = 1"})[0].startswith("runs SQL ")
    assert lines("shell", {"command": "ls -la"}) == []


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                max_size=4), max_leaves=30))
def test_any_document_gives_a_short_list_of_strings(doc):
    """The input's shape is never trusted: anything gives at most MAX_EFFECTS distinct strings, never raises."""
    for candidate in (doc, {"shell": doc}, {"shell": {"commands": [doc]}}, {"tool": {"name": "delete_file"},
                                                                           "path": doc},
                      {"shell": {"commands": [{"http": doc, "deletes": doc, "remote": doc}]}}, {"sql": {"kinds": doc}},
                      {"tool": doc, "url": doc}, {"tool": {"name": "http_request", "args": doc}, "url": {"host": doc}}):
        try:
            out = effect_lines(candidate if isinstance(candidate, dict) else {"x": candidate})
        except (AttributeError, TypeError) as exc:
            raise AssertionError(f"effect_lines raised on {json.dumps(candidate, default=str)}") from exc
        assert len(out) <= MAX_EFFECTS and len(set(out)) == len(out) and all(isinstance(o, str) for o in out)
