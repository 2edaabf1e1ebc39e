"""The aiohttp application: API routes, health, metrics (and the approval page when present)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from gateway.api import sessions
from gateway.api.auth import GW, require
from gateway.api.errors import ApiError, errors_middleware
from gateway.api.timefmt import rfc3339

if TYPE_CHECKING:
    from gateway.app import Gateway

routes = web.RouteTableDef()

EVENT_FIELDS = ("id", "seq", "session", "step", "kind", "action", "reasons", "codes", "request_id", "method",
                "host", "path", "http_status", "bytes_in", "bytes_out", "policy_rev", "detail")


def event_view(row: dict) -> dict:
    out = {k: row.get(k) for k in EVENT_FIELDS}
    out["ts"] = rfc3339(row["ts"])
    return out


@routes.get("/v1/events")
async def list_events(request: web.Request) -> web.Response:
    require(request, "harness", "approver")
    gw = request.app[GW]
    try:
        limit = min(int(request.query.get("limit", "10000")), 100000)
    except ValueError:
        raise ApiError(400, "bad_request", "limit must be an integer") from None
    await gw.audit.flush()
    rows = await gw.store.list_events(session=request.query.get("session"), kind=request.query.get("kind"),
                                      limit=limit)
    return web.json_response([event_view(r) for r in rows])


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    gw = request.app[GW]
    return web.json_response({"status": "ok", "policy_rev": gw.engine.rev,
                              "policy_error": gw.engine.last_error is not None})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    gw = request.app[GW]
    return web.Response(body=gw.metrics.render(), content_type="text/plain", charset="utf-8")


def create_app(gw: "Gateway") -> web.Application:
    from gateway.api import approvals, secrets, toolcalls
    from gateway.web.page import setup_page

    app = web.Application(middlewares=[errors_middleware], client_max_size=4 * 1024 * 1024)
    app[GW] = gw
    for module_routes in (routes, sessions.routes, toolcalls.routes, approvals.routes, secrets.routes):
        app.add_routes(module_routes)
    setup_page(app, gw)
    return app
