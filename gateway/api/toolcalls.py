"""POST /v1/toolcalls: the harness asks before it runs a tool call."""
from __future__ import annotations

import asyncio
import logging
import posixpath
import time
from typing import Mapping

from aiohttp import web

from gateway.api.auth import require
from gateway.api.errors import ApiError
from gateway.api.owned import owned_live_session
from gateway.api.state import APPROVALS, AUDIT, ENGINE, FACTS, METRICS, SESSIONS, read_json
from gateway.approvals.rules import binding_hash, canonical_json
from gateway.approvals.queue import ApprovalRequest
from gateway.runtime.ids import random_hex
from gateway.mcp.context import parse_mcp_context
from gateway.policy.decision import deny
from gateway.policy.readset import Shared
from gateway.sessions.registry import SessionRegistry
from gateway.store import StoreError
from gateway.toolcalls.describe import Effects
from gateway.toolcalls.enrich import SHELL_TOOLS, toolcall_base, toolcall_facts
from gateway.toolcalls.history import (HISTORY_SIZE, MAX_SESSION_PATHS, audit_facts, history_entries, path_rows,
                                      paths_from_rows)

log = logging.getLogger("sandgate.toolcalls")
PATHS_EXCEEDED = "toolcall.paths_exceeded"
ENRICH_TIMEOUT_S = 5.0

routes = web.RouteTableDef()

MAX_ARGS_BYTES = 256 * 1024
MAX_STEP = 2 ** 31 - 1                  # the store's INTEGER column


# Tool calls this short are parsed on the event loop: a typical command parses in 0.1-0.3 ms, less than the hop
# to a thread costs under load. The bound keeps the worst short input we found (hundreds of nested `$(`, or
# of pipes) to a few milliseconds. SQL (sqlglot is the slowest parser), MCP calls and calls that may run a
# script the session wrote (its name in the arguments, or a glob or expansion that could reach it) always go
# to a thread, with a time cap (ENRICH_TIMEOUT_S). Either way the facts are the same: this only decides
# where the parsing runs.
INLINE_ARGS_BYTES = 256


def enrich_inline(tool: str, args_json: str, files: Mapping[str, str | None], mcp: object) -> bool:
    """Whether a tool call is parsed on the loop (else: on a worker thread, bounded by ENRICH_TIMEOUT_S)."""
    if len(args_json) > INLINE_ARGS_BYTES or tool == "sql" or mcp is not None:
        return False
    written = [path for path, content in files.items() if isinstance(content, str) and content]
    if not written:
        return True
    if any(ch in args_json for ch in "*?[$`"):
        return False
    return not any(posixpath.basename(path.rstrip("/")) in args_json for path in written)


def toolcall_summary(tool: str, args: dict) -> str:
    if tool in SHELL_TOOLS and isinstance(args.get("command"), str):
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
    audit, metrics, sessions = request.app[AUDIT], request.app[METRICS], request.app[SESSIONS]
    if not audit.accepting:
        metrics.audit_refused.labels("toolcall").inc()
        raise ApiError(503, "audit.unavailable", "sandgate cannot record decisions right now; try again")
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
    args_json = canonical_json(args)
    if len(args_json) > MAX_ARGS_BYTES:
        raise ApiError(413, "too_large", "args are too large")
    try:
        mcp = parse_mcp_context(body["mcp"]) if body.get("mcp") is not None else None
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    live = await owned_live_session(request, principal, sid)
    if live is None:
        raise ApiError(409, "session_ended", "the session has ended")
    if step is not None:
        sessions.set_step(sid, step)
    sessions.count(sid, toolcalls=1)
    session = sessions.with_stats(live)
    now = time.time()
    history, links, files, complete = await _session_memory(sessions, sid, now)
    mcp_input = mcp.to_input() if mcp is not None else None
    base = toolcall_base(session=session, tool=tool, args=args, step=step, now=now, history=history, mcp=mcp_input)
    if complete:
        facts, effects = await _facts(request, sid, tool, args_json, base, links, files, mcp, mcp_input)
    else:
        facts, effects = _unparsed(), Effects()
    doc = {**base, **facts}
    if complete:
        decision = await request.app[ENGINE].decide("toolcall", doc)
    else:
        # A path missing from what is kept may still have been written or linked: deciding without it could
        # allow a script, or a path through a link, that the whole record would not. Denied, not evaluated.
        decision = deny(PATHS_EXCEEDED, f"the session has written or linked more than {MAX_SESSION_PATHS} paths, "
                        "more than sandgate keeps track of; start a new session", request.app[ENGINE].rev)
    metrics.decision("toolcall", decision.action)
    tcid = "t_" + random_hex(8)
    out = {"id": tcid, "decision": decision.action, "reasons": list(decision.reasons),
           "codes": list(decision.codes)}
    summary = toolcall_summary(tool, args) if mcp is None else f"mcp {mcp.server}/{tool} {canonical_json(args)}"[:300]
    detail = {"toolcall_id": tcid, "tool": tool, "summary": summary, **audit_facts(doc)}
    if mcp is not None:
        detail["mcp_server"] = mcp.server
    if decision.action != "deny":
        try:                                  # links and scripts this call leaves, for the session's later calls
            await sessions.add_paths(sid, path_rows(sid, effects, now))
        except StoreError:
            log.warning("could not record the paths of tool call %s", tcid)
            raise ApiError(503, "store_unavailable", "the store is unavailable; try again") from None
    if decision.action == "ask":
        binding = binding_hash(sid, "toolcall", tool if mcp is None else mcp.target(tool), args_json)
        action = {"tool": tool, "args": args} | ({"mcp_server": mcp.server} if mcp is not None else {})
        ticket = await request.app[APPROVALS].request_approval(ApprovalRequest(
            session=sessions.live_now(sid), session_id=sid, kind="toolcall", binding=binding, summary=summary,
            action=action, reasons=list(decision.reasons), requested_by=principal.ident, used_by=principal.ident,
            ttl_s=decision.approval_ttl_s))
        out["approval_id"] = ticket.row["id"]
        if ticket.reused:
            out.update(decision="allow", reasons=out["reasons"] + [f"approved by {ticket.row['decided_by']}"],
                       codes=out["codes"] + ["approval.approved"])
        detail["approval_id"] = out["approval_id"]
    sessions.toolcall_recorded(sid, audit.record(
        "toolcall", session=sid, step=step, action=out["decision"], reasons=out["reasons"], codes=out["codes"],
        request_id=tcid, policy_rev=decision.rev, detail=detail))
    return web.json_response(out)


async def _facts(request: web.Request, sid: str, tool: str, args_json: str, base: dict, links: dict, files: dict,
                 mcp: object, mcp_input: object) -> tuple[dict, Effects]:
    """What parsing the call adds to its input, and its effects: memoised, on the loop when short, else on a
    thread with a time cap. A failure is not an allow: the policy sees the call unparsed."""
    memo = request.app[FACTS]
    key = memo.key(tool, args_json, base["session"]["workspace"], links, files, mcp_input)
    try:
        hit = memo.get(key)              # the same call with the same workspace, links and files: parsed before
        if hit is not None:
            return hit
        if enrich_inline(tool, args_json, files, mcp):
            facts, effects = toolcall_facts(base, links, files)
        else:
            # Parsing (tree-sitter, sqlglot, ast) can take a while on long or hostile input: off the loop, bounded.
            facts, effects = await asyncio.wait_for(asyncio.to_thread(toolcall_facts, base, links, files),
                                                    ENRICH_TIMEOUT_S)
        if key is not None:       # memoised facts are shared and never changed: the decision cache knows
            facts = {k: Shared(v) if isinstance(v, dict) else v for k, v in facts.items()}
            memo.put(key, facts, effects)
        return facts, effects
    except Exception:  # noqa: BLE001 - enrichment failure must not allow: the policy sees it unparsed
        log.warning("tool-call enrichment failed for session %s tool %s", sid, tool)
        return _unparsed(), Effects()


def _unparsed() -> dict:
    return {"shell": {"parsed": False, "commands": []},
            "sql": {"parsed": False, "kinds": [], "unbounded": [], "visible": False}}


async def _session_memory(sessions: SessionRegistry, sid: str,
                          now: float) -> tuple[list[dict], dict, dict, bool]:
    """The session's recent tool calls (stored and still queued audit rows), the links and files its earlier
    calls left, and whether those are all of them (False past MAX_SESSION_PATHS). A store that cannot answer
    is an error (503): deciding without them could allow what a sequence makes dangerous."""
    try:
        events, rows = await sessions.toolcall_memory(sid)
    except StoreError:
        raise ApiError(503, "store_unavailable", "the store is unavailable; try again") from None
    links, files = paths_from_rows(rows)
    return history_entries(events, now), links, files, not getattr(rows, "truncated", False)
