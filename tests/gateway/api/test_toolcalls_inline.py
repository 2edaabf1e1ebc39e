"""Which tool calls are enriched on the event loop (short, plain) and which on a worker thread with a time cap."""
from __future__ import annotations

import pytest

from gateway.api.toolcalls import INLINE_ARGS_BYTES, enrich_inline


@pytest.mark.parametrize("tool, size, files, mcp, inline", [
    ("shell", 40, {}, None, True),
    ("read_file", INLINE_ARGS_BYTES, {"/w/a.txt": None}, None, True),       # a file whose content is unknown
    ("shell", INLINE_ARGS_BYTES + 1, {}, None, False),                      # long: a thread
    ("sql", 30, {}, None, False),                                           # sqlglot: always a thread
    ("shell", 30, {"/w/run.sh": "rm -rf /"}, None, False),                  # may reach a script it wrote
    ("search", 30, {}, object(), False),                                    # an MCP call
])
def test_enrich_inline(tool, size, files, mcp, inline):
    assert enrich_inline(tool, size, files, mcp) is inline
