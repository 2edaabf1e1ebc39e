"""Access requests a harness files for its session, and the session's grants (withdrawn with DELETE)."""
from __future__ import annotations

from aiohttp import web

from gateway.api.approvals import approval_view
from gateway.api.auth import require
from gateway.api.bodies import ACCESS_REQUEST, check_body
from gateway.api.errors import ApiError
from gateway.api.owned import owned_session
from gateway.api.state import APPROVALS, path_param, read_json
from gateway.approvals.access import BadAccess
from gateway.approvals.queue import ApprovalQueue, TooManyPending

routes = web.RouteTableDef()


async def file_access_request(queue: ApprovalQueue, session_id: str, body: object, requested_by: str) -> web.Response:
    """202 {"id", "status"}; 400 for a request sandgate refuses; 409 with the pending one's id; 429 beyond
    sessions.max_pending_approvals."""
    try:
        req = queue.access.parse(body)
    except BadAccess as exc:
        raise ApiError(400, exc.code, str(exc)) from None
    try:
        row, filed = await queue.file_access(session_id, req, requested_by)
    except TooManyPending as exc:
        raise ApiError(429, TooManyPending.code, str(exc)) from None
    if not filed:
        return web.json_response({"error": "already_pending", "id": row.id, "status": row.status,
                                  "detail": f"an access request for {req.host} is already pending"}, status=409)
    return web.json_response({"id": row.id, "status": row.status}, status=202)


@routes.post("/v1/sessions/{sid}/access-requests")
async def harness_files(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    row = await owned_session(request, principal, path_param(request, "sid"))
    body = check_body(await read_json(request), ACCESS_REQUEST)
    return await file_access_request(request.app[APPROVALS], row.id, body, principal.ident)


@routes.delete("/v1/sessions/{sid}/grants/{aid}")
async def withdraw_grant(request: web.Request) -> web.Response:
    principal = require(request, "harness", "approver")
    sid = path_param(request, "sid")
    if principal.role == "harness":
        await owned_session(request, principal, sid)
    queue = request.app[APPROVALS]
    row = await queue.get(path_param(request, "aid"))
    if row is None or row.session != sid or row.kind != "access":
        raise ApiError(404, "not_found", "no such grant")
    if not await queue.withdraw(row.id, principal.ident):
        raise ApiError(409, "not_live", "the grant is not in force (not approved, expired or withdrawn)")
    return web.json_response(approval_view(await queue.get(row.id)))
