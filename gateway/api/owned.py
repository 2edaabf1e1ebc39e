"""A harness reaches only the sessions it created (admin: all); another harness's session is 404."""
from __future__ import annotations

from aiohttp import web

from gateway.api.auth import GW
from gateway.api.errors import ApiError
from gateway.auth import Principal
from gateway.sessions import owns


async def owned_session(request: web.Request, principal: Principal, sid: object) -> dict:
    if not isinstance(sid, str) or not sid:
        raise ApiError(400, "bad_request", "session is required")
    row = await request.app[GW].store.get_session(sid)
    if row is None or not owns(principal.role, principal.ident, row):
        raise ApiError(404, "not_found", "no such session")
    return row
