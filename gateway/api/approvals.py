"""Approval endpoints: list, read (with ?wait), approve, deny."""
from __future__ import annotations

import math
from typing import Any, Mapping

from aiohttp import web

from gateway.api.auth import require
from gateway.api.bodies import DECIDE, check_query, read_body
from gateway.api.errors import ApiError
from gateway.api.owned import owned_session_ids
from gateway.api.state import APPROVALS, SESSIONS, path_param, read_json
from gateway.api.timefmt import rfc3339
from gateway.approvals.access import grant_in_force
from gateway.approvals.queue import ApprovalError
from gateway.approvals.rules import KINDS
from gateway.auth.tokens import Principal
from gateway.sessions.spec import owns
from gateway.store.records import Approval

routes = web.RouteTableDef()

MAX_WAIT_S = 300.0


def approval_view(row: Approval | Mapping[str, Any]) -> dict:
    """An approval as the API shows it (a stored one's JSON, as a notification carries it, too)."""
    if not isinstance(row, Approval):
        row = Approval.from_row(row)
    return {
        "id": row.id, "status": row.status, "kind": row.kind, "session": row.session,
        "summary": row.summary, "action": row.action, "reasons": row.reasons,
        "created_at": rfc3339(row.created_at), "expires_at": rfc3339(row.expires_at),
        "decided_by": row.decided_by, "decided_at": rfc3339(row.decided_at), "reason": row.reason,
        "votes": [{"by": v.by, "verdict": v.verdict, "at": rfc3339(v.at), "reason": v.reason} for v in row.ballots],
        "quorum": row.quorum, "used_at": rfc3339(row.used_at), "requested_by": row.requested_by,
        **({"grant": grant_view(grant_in_force(row))} if row.kind == "access" else {}),
    }


def grant_view(grant: dict | None) -> dict | None:
    """A grant in force (approvals/access.py: a JSON object) with its expiry as RFC 3339."""
    return None if grant is None else grant | {"expires_at": rfc3339(grant.get("expires_at"))}


async def _visible(request: web.Request, row: Approval | None, principal: Principal) -> Approval:
    """Harness tokens see only approvals of the sessions they created."""
    if row is None:
        raise ApiError(404, "not_found", "no such approval")
    if principal.role == "harness":
        sess = await request.app[SESSIONS].get(row.session)
        if sess is None or not owns(principal.role, principal.ident, sess):
            raise ApiError(404, "not_found", "no such approval")
    return row


@routes.get("/v1/approvals")
async def list_approvals(request: web.Request) -> web.Response:
    principal = require(request, "harness", "approver")
    check_query(request.query, {"status": (), "session": (), "kind": KINDS}, "GET /v1/approvals")
    rows = await request.app[APPROVALS].list(status=request.query.get("status") or None,
                                             session=request.query.get("session") or None,
                                             kind=request.query.get("kind") or None)
    if principal.role == "harness":
        # One session asked for: its rows name only it, so only it is read (not every session, on every poll).
        among = {r.session for r in rows} if request.query.get("session") else None
        mine = await owned_session_ids(request, principal, among)
        rows = [r for r in rows if r.session in mine]
    return web.json_response([approval_view(r) for r in rows])


@routes.get("/v1/approvals/{aid}")
async def get_approval(request: web.Request) -> web.Response:
    principal = require(request, "harness", "approver")
    check_query(request.query, {"wait": ()}, "GET /v1/approvals/{id}")
    queue = request.app[APPROVALS]
    aid = path_param(request, "aid")
    row = await _visible(request, await queue.get(aid), principal)
    wait = request.query.get("wait")
    if wait is not None:
        try:
            seconds = float(wait)
        except ValueError:
            raise ApiError(400, "bad_request", "wait must be a number of seconds") from None
        if math.isnan(seconds):                        # max(nan, 0.0) is nan: a wait that never ended
            raise ApiError(400, "bad_request", "wait must be a number of seconds")
        seconds = min(max(seconds, 0.0), MAX_WAIT_S)
        row = await queue.wait(aid, seconds) or row
    if principal.role == "harness" and row.status == "approved" and row.used_at is None and row.kind != "access":
        # The harness proceeds on `approved`: this read uses the approval (once).
        await queue.consume(row, principal.ident)
        row = await queue.get(aid)
    return web.json_response(approval_view(row))


async def _decide(request: web.Request, verdict: str) -> web.Response:
    principal = require(request, "approver")
    body = read_body(await read_json(request), DECIDE)
    try:
        row = await request.app[APPROVALS].decide(path_param(request, "aid"), principal.ident, verdict, body.reason,
                                                  grant=body.grant)
    except ApprovalError as exc:
        raise ApiError.of(exc.code, exc.detail) from None
    return web.json_response(approval_view(row))


@routes.post("/v1/approvals/{aid}/approve")
async def approve(request: web.Request) -> web.Response:
    return await _decide(request, "approve")


@routes.post("/v1/approvals/{aid}/deny")
async def deny(request: web.Request) -> web.Response:
    return await _decide(request, "deny")
