"""A harness reaches only the sessions it created (admin: all); another harness's session is 404."""
from __future__ import annotations

from aiohttp import web

from gateway.api.errors import ApiError
from gateway.api.state import SESSIONS
from gateway.auth.tokens import Principal
from gateway.sessions.spec import owns
from gateway.store.records import Session


async def owned_session(request: web.Request, principal: Principal, sid: object) -> Session:
    if not isinstance(sid, str) or not sid:
        raise ApiError(400, "bad_request", "session is required")
    row = await request.app[SESSIONS].get(sid)
    if row is None or not owns(principal.role, principal.ident, row):
        raise ApiError(404, "not_found", "no such session")
    return row


async def owned_session_ids(request: web.Request, principal: Principal, among: set[str] | None = None) -> set[str]:
    """The ids of the sessions this principal may see; of `among` only, when given: one read of each of those
    (a harness polling its one session's approvals) instead of reading every session."""
    if among is not None:
        sessions = request.app[SESSIONS]
        return {sid for sid in among
                if sid and (row := await sessions.get(sid)) is not None and owns(principal.role, principal.ident, row)}
    return {s.id for s in await request.app[SESSIONS].list() if owns(principal.role, principal.ident, s)}
