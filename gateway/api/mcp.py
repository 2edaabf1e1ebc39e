"""POST /v1/mcp/tools: which of an MCP server's tools the tool-call policy always denies (hidden from the agent).

Each tool is decided once as a listing probe: `input.tool = {"name": TOOL, "args": {}}`, `input.mcp` with
`"listing": true`. Nothing is filed or counted; a tool whose probe is "deny" is reported hidden (a call to it is
still decided, and denied, like any other).
"""
from __future__ import annotations

from aiohttp import web

from gateway.api.auth import require
from gateway.api.bodies import MCP_TOOLS, read_body
from gateway.api.errors import ApiError
from gateway.api.state import TOOLCALLS, read_json
from gateway.gates.toolcall import ToolCallRefused
from gateway.mcp.context import parse_mcp_context

routes = web.RouteTableDef()

@routes.post("/v1/mcp/tools")
async def probe_tools(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    body = read_body(await read_json(request), MCP_TOOLS)
    probes = []
    for item in body.tools:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise ApiError(400, "bad_request", "every tool needs a name")
        try:
            ctx = parse_mcp_context({"server": body.server, "annotations": item.get("annotations") or {}},
                                    listing=True)
        except ValueError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        probes.append((name, ctx))
    try:
        out = await request.app[TOOLCALLS].probe(body.session, probes, principal)
    except ToolCallRefused as exc:
        raise ApiError.of(exc.code, exc.detail) from None
    return web.json_response({"tools": [{"name": p.name, "decision": p.action, "hidden": p.hidden,
                                         "reasons": list(p.reasons), "codes": list(p.codes)} for p in out]})
