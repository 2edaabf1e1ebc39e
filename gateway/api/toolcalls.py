"""POST /v1/toolcalls: the harness asks before it runs a tool call.

The handler reads the body and hands the call to the tool-call gate (gateway/gates/toolcall.py), which does all of
its work; the gate's refusals become API errors (STATUS_OF).
"""
from __future__ import annotations

from aiohttp import web

from gateway.api.auth import require
from gateway.api.errors import ApiError
from gateway.api.state import TOOLCALLS, read_json
from gateway.gates.toolcall import ToolCallRefused, ToolCallRequest
from gateway.mcp.context import parse_mcp_context

routes = web.RouteTableDef()

MAX_STEP = 2 ** 31 - 1                  # the store's INTEGER column


@routes.post("/v1/toolcalls")
async def post_toolcall(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", "body must be a JSON object")
    sid, tool, args, step = body.get("session"), body.get("tool"), body.get("args", {}), body.get("step")
    if not isinstance(sid, str) or not isinstance(tool, str) or not tool:
        raise ApiError(400, "bad_request", "session and tool are required strings")
    if not isinstance(args, dict):
        raise ApiError(400, "bad_request", "args must be an object")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEP):
        raise ApiError(400, "bad_request", f"step must be an integer from 0 to {MAX_STEP}")
    try:
        mcp = parse_mcp_context(body["mcp"]) if body.get("mcp") is not None else None
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    try:
        outcome = await request.app[TOOLCALLS].decide(ToolCallRequest(
            session=sid, tool=tool, args=args, step=step, mcp=mcp, principal=principal))
    except ToolCallRefused as exc:
        raise ApiError.of(exc.code, exc.detail) from None
    out = {"id": outcome.id, "decision": outcome.action, "reasons": list(outcome.reasons),
           "codes": list(outcome.codes)}
    if outcome.approval_id is not None:
        out["approval_id"] = outcome.approval_id
    return web.json_response(out)
