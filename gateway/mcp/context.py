"""The MCP part of a tool call: which server a tool belongs to and what the server says about it. Pure.

`POST /v1/toolcalls` takes an optional `"mcp": {"server": NAME, "annotations": {...}}`; the policy sees it as
`input.mcp`. The server name is chosen by the harness (`sandgate mcp --name`); annotations come from the MCP
server itself and are marked untrusted: a policy may let them make a decision stricter, never looser.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_SERVER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,127}\Z")
MAX_ANNOTATIONS_BYTES = 16 * 1024


@dataclass(frozen=True)
class McpContext:
    server: str
    annotations: dict = field(default_factory=dict)
    listing: bool = False        # a tools/list probe (no call is made; nothing is filed)

    def to_input(self) -> dict:
        out: dict[str, Any] = {"server": self.server, "annotations": dict(self.annotations),
                               "untrusted": ["annotations"]}
        if self.listing:
            out["listing"] = True
        return out

    def target(self, tool: str) -> str:
        """What an approval of this call is bound to: the same tool name on another server is another action."""
        return f"mcp:{self.server}/{tool}"


def parse_mcp_context(value: Any, *, listing: bool = False) -> McpContext:
    """Validate the body's `mcp` object. ValueError with a human message when it does not fit."""
    if not isinstance(value, dict):
        raise ValueError("mcp must be an object")
    unknown = set(value) - {"server", "annotations"}
    if unknown:
        raise ValueError(f"mcp: unknown keys {sorted(unknown)}")
    server = value.get("server")
    if not isinstance(server, str) or not _SERVER.match(server):
        raise ValueError("mcp.server must be a name of letters, digits and _.:@+- (no '/', at most 128)")
    annotations = value.get("annotations", {})
    if annotations is None:
        annotations = {}
    if not isinstance(annotations, dict):
        raise ValueError("mcp.annotations must be an object")
    if len(json.dumps(annotations, default=str)) > MAX_ANNOTATIONS_BYTES:
        raise ValueError("mcp.annotations are too large")
    return McpContext(server, annotations, listing)
