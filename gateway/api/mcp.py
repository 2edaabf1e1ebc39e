"""POST /v1/mcp/tools: which of an MCP server's tools the tool-call policy always denies (hidden from the agent).

Each tool is decided once as a listing probe: `input.tool = {"name": TOOL, "args": {}}`, `input.mcp` with
`"listing": true`. Nothing is filed or counted; a tool whose probe is "deny" is reported hidden (a call to it is
still decided, and denied, like any other).
"""
from __future__ import annotations

import time

from aiohttp import web

from gateway.api.auth import require
from gateway.api.errors import ApiError
from gateway.api.owned import owned_session
from gateway.api.state import AUDIT, ENGINE, SESSIONS, read_json
from gateway.mcp.context import parse_mcp_context
from gateway.toolcalls.enrich import build_toolcall_input

routes = web.RouteTableDef()

MAX_TOOLS = 1000


@routes.post("/v1/mcp/tools")
async def probe_tools(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    sessions = request.app[SESSIONS]
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", "body must be a JSON object")
    await owned_session(request, principal, body.get("session"))
    session = await sessions.live(body["session"])
    if session is None:
        raise ApiError(409, "session_ended", "the session has ended")
    tools = body.get("tools")
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise ApiError(400, "bad_request", f"tools must be a list of at most {MAX_TOOLS} objects")
    probes = []
    for item in tools:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise ApiError(400, "bad_request", "every tool needs a name")
        try:
            ctx = parse_mcp_context({"server": body.get("server"), "annotations": item.get("annotations") or {}},
                                    listing=True)
        except ValueError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        probes.append((name, ctx))
    session = sessions.with_stats(session)
    out = []
    for name, ctx in probes:
        doc = build_toolcall_input(session=session, tool=name, args={}, step=None, now=time.time())
        doc["mcp"] = ctx.to_input()
        decision = await request.app[ENGINE].decide("toolcall", doc)
        out.append({"name": name, "decision": decision.action, "hidden": decision.action == "deny",
                    "reasons": list(decision.reasons), "codes": list(decision.codes)})
    hidden = [t["name"] for t in out if t["hidden"]]
    if hidden:
        request.app[AUDIT].record("mcp.tools", session=session["id"], action="hide", codes=["toolcall.mcp_hidden"],
                        detail={"server": probes[0][1].server, "hidden": hidden[:100]})
    return web.json_response({"tools": out})
