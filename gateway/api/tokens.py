"""Token revocation (admin): `POST /v1/revocations {"jti"}` revokes one token on every replica."""
from __future__ import annotations

import re

from aiohttp import web

from gateway.api.auth import require
from gateway.api.bodies import REVOKE, read_body
from gateway.api.errors import ApiError
from gateway.api.state import REVOCATIONS, read_json
from gateway.api.timefmt import rfc3339
from gateway.store.records import Revocation

routes = web.RouteTableDef()

_JTI = re.compile(r"[A-Za-z0-9_.:-]{1,128}\Z")


def revocation_view(row: Revocation) -> dict:
    return {"jti": row.jti, "revoked_at": rfc3339(row.revoked_at), "revoked_by": row.revoked_by}


@routes.post("/v1/revocations")
async def revoke(request: web.Request) -> web.Response:
    principal = require(request, "admin")
    jti = read_body(await read_json(request), REVOKE).jti
    if not _JTI.match(jti):
        raise ApiError(400, "bad_request", "jti (a token id) is required")
    row = await request.app[REVOCATIONS].revoke(jti, principal.ident)
    return web.json_response(revocation_view(row), status=201)


@routes.get("/v1/revocations")
async def list_revocations(request: web.Request) -> web.Response:
    require(request, "admin")
    return web.json_response([revocation_view(r) for r in await request.app[REVOCATIONS].list()])
