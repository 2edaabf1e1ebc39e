"""Which tool calls are parsed on the event loop (short, plain) and which on a worker thread with a time cap;
and the memo of parsed calls. Where the parsing runs never changes the facts."""
from __future__ import annotations

import pytest

from gateway.gates.toolcall import INLINE_ARGS_BYTES, enrich_inline
from gateway.approvals.rules import canonical_json
from gateway.toolcalls.enrich import enrich_toolcall, toolcall_base, toolcall_facts
from gateway.toolcalls.memo import FactsMemo


def j(**args) -> str:
    return canonical_json(args)


@pytest.mark.parametrize("tool, args_json, files, mcp, inline", [
    ("shell", j(command="ls"), {}, None, True),
    ("read_file", j(path="/w/a"), {"/w/a.txt": None}, None, True),            # a file whose content is unknown
    ("shell", "x" * (INLINE_ARGS_BYTES + 1), {}, None, False),                 # long: a thread
    ("sql", j(query="select 1"), {}, None, False),                            # sqlglot: always a thread
    ("shell", j(command="bash run.sh"), {"/w/run.sh": "rm -rf /"}, None, False),   # runs a script it wrote
    ("shell", j(command="bash *.sh"), {"/w/run.sh": "rm -rf /"}, None, False),     # a glob could reach it
    ("shell", j(command="$(cat x)"), {"/w/run.sh": "rm -rf /"}, None, False),      # so could an expansion
    ("shell", j(command="git status"), {"/w/run.sh": "rm -rf /"}, None, True),     # never names it
    ("search", j(q="x"), {}, object(), False),                                # an MCP call
])
def test_enrich_inline(tool, args_json, files, mcp, inline):
    assert enrich_inline(tool, args_json, files, mcp) is inline


SESSION = {"id": "s1", "workload": "persistent", "created_at": 0.0, "labels": {}, "frozen": False,
           "allow": [], "workspace": "/workspace", "secrets": []}


def test_base_plus_facts_is_the_enriched_input():
    args = {"command": "echo hi > out.txt && bash run.sh"}
    files = {"/workspace/run.sh": "rm -rf /tmp/x"}
    whole = enrich_toolcall(session=SESSION, tool="shell", args=args, step=3, now=10.0, files=files)
    base = toolcall_base(session=SESSION, tool="shell", args=args, step=3, now=10.0)
    facts, effects = toolcall_facts(base, {}, files)
    assert {**base, **facts} == whole.doc and effects == whole.effects


def test_memo_keys_on_arguments_workspace_links_and_files():
    memo = FactsMemo(size=2)
    k = memo.key("shell", j(command="ls"), "/workspace", {}, {}, None)
    memo.put(k, {"shell": 1}, None)
    assert memo.get(memo.key("shell", j(command="ls"), "/workspace", {}, {}, None)) == ({"shell": 1}, None)
    for other in (memo.key("shell", j(command="ls -a"), "/workspace", {}, {}, None),
                  memo.key("bash", j(command="ls"), "/workspace", {}, {}, None),
                  memo.key("shell", j(command="ls"), "/other", {}, {}, None),
                  memo.key("shell", j(command="ls"), "/workspace", {"/workspace/l": "/etc"}, {}, None),
                  memo.key("shell", j(command="ls"), "/workspace", {}, {"/workspace/a": "x"}, None)):
        assert other != k and memo.get(other) is None
    assert memo.key("shell", j(command="ls"), "/workspace", {}, {}, {"server": "s"}) is None     # MCP: never
