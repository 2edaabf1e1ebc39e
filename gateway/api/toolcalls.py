"""POST /v1/toolcalls: the harness asks before it runs a tool call.

The handler reads the body and hands the call to the tool-call gate (gateway/gates/toolcall.py), which does all of
its work; the gate's refusals become API errors (STATUS_OF).
"""
from __future__ import annotations

from aiohttp import web

from gateway.api.auth import require
from gateway.api.bodies import MAX_TOOL_NAME, TOOLCALL, read_body
from gateway.api.errors import ApiError
from gateway.api.state import TOOLCALLS, read_json
from gateway.gates.toolcall import ToolCallRefused, ToolCallRequest
from gateway.mcp.context import parse_mcp_context

routes = web.RouteTableDef()

@routes.post("/v1/toolcalls")
async def post_toolcall(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    body = read_body(await read_json(request), TOOLCALL)
    args = body.doc.get("args", {})                 # absent: no arguments; null: refused
    if len(body.tool) > MAX_TOOL_NAME:
        raise ApiError(400, "bad_request", f"tool: a name is at most {MAX_TOOL_NAME} characters")
    if args is None:
        raise ApiError(400, "bad_request", "args must be an object")
    try:
        mcp = parse_mcp_context(body.mcp) if body.mcp is not None else None
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    try:
        outcome = await request.app[TOOLCALLS].decide(ToolCallRequest(
            session=body.session, tool=body.tool, args=args, step=body.step, mcp=mcp, principal=principal))
    except ToolCallRefused as exc:
        raise ApiError.of(exc.code, exc.detail) from None
    out = {"id": outcome.id, "decision": outcome.action, "reasons": list(outcome.reasons),
           "codes": list(outcome.codes)}
    if outcome.approval_id is not None:
        out.update(approval_id=outcome.approval_id)
    return web.json_response(out)
