"""POST /v1/toolcalls: the harness asks before it runs a tool call."""
from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import time

from aiohttp import web

from gateway.api.auth import GW, require
from gateway.api.errors import ApiError
from gateway.api.owned import owned_session
from gateway.api.sessions import read_json
from gateway.approvals import binding_hash, canonical_json
from gateway.mcp.context import parse_mcp_context
from gateway.policy.inputs import build_session_input

log = logging.getLogger("sandgate.toolcalls")
ENRICH_TIMEOUT_S = 5.0

routes = web.RouteTableDef()

MAX_ARGS_BYTES = 256 * 1024


def toolcall_summary(tool: str, args: dict) -> str:
    if tool in ("shell", "bash", "sh", "exec", "terminal") and isinstance(args.get("command"), str):
        return f"{tool}: {args['command']}"[:300]
    if isinstance(args.get("path"), str):
        return f"{tool} {args['path']}"[:300]
    if tool == "http_request":
        return f"http_request {args.get('method', 'GET')} {args.get('url', '')}"[:300]
    if tool == "sql":
        return f"sql: {args.get('query', '')}"[:300]
    if tool == "deploy":
        return f"deploy {args.get('target', '')}"[:300]
    return f"{tool} {canonical_json(args)}"[:300]


@routes.post("/v1/toolcalls")
async def post_toolcall(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    gw = request.app[GW]
    if not gw.audit.accepting:
        gw.metrics.audit_refused.labels("toolcall").inc()
        raise ApiError(503, "audit.unavailable", "sandgate cannot record decisions right now; try again")
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", "body must be a JSON object")
    sid, tool, args, step = body.get("session"), body.get("tool"), body.get("args", {}), body.get("step")
    if not isinstance(sid, str) or not isinstance(tool, str) or not tool:
        raise ApiError(400, "bad_request", "session and tool are required strings")
    if not isinstance(args, dict):
        raise ApiError(400, "bad_request", "args must be an object")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise ApiError(400, "bad_request", "step must be an integer")
    if len(canonical_json(args)) > MAX_ARGS_BYTES:
        raise ApiError(413, "too_large", "args are too large")
    try:
        mcp = parse_mcp_context(body["mcp"]) if body.get("mcp") is not None else None
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    await owned_session(request, principal, sid)
    session = await gw.live_session(sid)
    if session is None:
        raise ApiError(409, "session_ended", "the session has ended")
    if step is not None:
        gw.sessions.steps[sid] = step
    gw.sessions.count(sid, toolcalls=1)
    session = gw.sessions.with_stats(session)
    from gateway.toolcalls.enrich import build_toolcall_input

    try:
        # Parsing (tree-sitter, sqlglot) can take a while on hostile input: off the loop, bounded.
        doc = await asyncio.wait_for(asyncio.to_thread(
            functools.partial(build_toolcall_input, session=session, tool=tool, args=args, step=step,
                              now=time.time())), ENRICH_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - enrichment failure must not allow: the policy sees it unparsed
        log.warning("tool-call enrichment failed for session %s tool %s", sid, tool)
        doc = {"kind": "toolcall", "session": build_session_input(session, time.time()),
               "tool": {"name": tool, "args": args}, "step": step,
               "shell": {"parsed": False, "commands": []}, "sql": {"parsed": False, "kinds": []}}
    if mcp is not None:
        doc["mcp"] = mcp.to_input()
    decision = await gw.engine.decide("toolcall", doc)
    gw.metrics.decision("toolcall", decision.action)
    tcid = "t_" + secrets.token_hex(8)
    out = {"id": tcid, "decision": decision.action, "reasons": list(decision.reasons),
           "codes": list(decision.codes)}
    summary = toolcall_summary(tool, args) if mcp is None else f"mcp {mcp.server}/{tool} {canonical_json(args)}"[:300]
    detail = {"toolcall_id": tcid, "tool": tool, "summary": summary}
    if mcp is not None:
        detail["mcp_server"] = mcp.server
    if decision.action == "ask":
        queue = gw.approvals
        binding = binding_hash(sid, "toolcall", tool if mcp is None else mcp.target(tool), canonical_json(args))
        used = await queue.find_unused(binding, sid)
        if used is not None and await queue.consume(used, principal.ident):
            out.update(decision="allow", approval_id=used["id"],
                       reasons=out["reasons"] + [f"approved by {used['decided_by']}"],
                       codes=out["codes"] + ["approval.approved"])
        else:
            action = {"tool": tool, "args": args} | ({"mcp_server": mcp.server} if mcp is not None else {})
            item = await queue.file(session=sid, kind="toolcall", binding=binding, summary=summary, action=action,
                                    reasons=list(decision.reasons), requested_by=principal.ident,
                                    ttl_s=decision.approval_ttl_s)
            out["approval_id"] = item["id"]
        detail["approval_id"] = out["approval_id"]
    gw.audit.record("toolcall", session=sid, step=step, action=out["decision"], reasons=out["reasons"],
                    codes=out["codes"], request_id=tcid, policy_rev=decision.rev, detail=detail)
    return web.json_response(out)
