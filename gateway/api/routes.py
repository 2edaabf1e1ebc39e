"""API routes of their own: events (with long poll), health, readiness, metrics."""
from __future__ import annotations

import asyncio
import math

from aiohttp import web

from gateway.api.auth import require
from gateway.api.bodies import check_query
from gateway.api.errors import ApiError
from gateway.api.owned import owned_session, owned_session_ids
from gateway.api.state import AUDIT, DRAIN, ENGINE, METRICS, PROXY
from gateway.api.timefmt import rfc3339
from gateway.store.records import AuditEvent

routes = web.RouteTableDef()

EVENT_FIELDS = ("id", "seq", "session", "step", "kind", "action", "reasons", "codes", "request_id", "method",
                "host", "path", "http_status", "bytes_in", "bytes_out", "policy_rev", "detail")


def event_view(row: AuditEvent) -> dict:
    out = {k: getattr(row, k) for k in EVENT_FIELDS}
    out.update(ts=rfc3339(row.ts))
    return out


MAX_EVENTS_WAIT_S = 60.0
EVENTS_POLL_S = 0.2


INT_MIN, INT_MAX = -(2 ** 31), 2 ** 31 - 1        # the store's INTEGER columns (seq)


def _number(request: web.Request, name: str, default: str, kind: type) -> float | int:
    """A finite query number (NaN made a wait that never ended; integers past the store's columns were 503s)."""
    try:
        value = kind(request.query.get(name, default))
    except (ValueError, OverflowError):
        raise ApiError(400, "bad_request", f"{name} must be a number") from None
    if (kind is float and math.isnan(value)) or (kind is int and not INT_MIN <= value <= INT_MAX):
        raise ApiError(400, "bad_request", f"{name} is out of range")
    return value


@routes.get("/v1/events")
async def list_events(request: web.Request) -> web.Response:
    """A session's events in order. `after=SEQ` keeps those past a sequence number; with `wait=SECONDS` the call
    returns as soon as there is at least one (long poll), or an empty list when the wait runs out."""
    principal = require(request, "harness", "approver")
    check_query(request.query, {"session": (), "kind": (), "limit": (), "after": (), "wait": ()}, "GET /v1/events")
    audit = request.app[AUDIT]
    limit = min(_number(request, "limit", "10000", int), 100000)
    if limit < 0:
        raise ApiError(400, "bad_request", "limit must not be negative")
    session, kind = request.query.get("session"), request.query.get("kind")
    after = _number(request, "after", "-1", int) if "after" in request.query else None
    wait = min(max(_number(request, "wait", "0", float), 0.0), MAX_EVENTS_WAIT_S)
    if (after is not None or wait) and not session:
        raise ApiError(400, "bad_request", "after and wait need a session")
    if session and principal.role == "harness":
        await owned_session(request, principal, session)
    mine: set | None = None
    if principal.role == "harness" and not session:
        mine = await owned_session_ids(request, principal)
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        rows = await audit.events(session=session, kind=kind, limit=limit, after_seq=after)
        if mine is not None:
            rows = [r for r in rows if r.session in mine]
        if rows or asyncio.get_running_loop().time() >= deadline:
            return web.json_response([event_view(r) for r in rows])
        await asyncio.sleep(min(EVENTS_POLL_S, max(0.0, deadline - asyncio.get_running_loop().time())))


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """Liveness: 200 while the process serves; "status" is "degraded" while audit rows cannot be written (a
    restart would lose the rows waiting in memory, so this never fails for that)."""
    audit, engine = request.app[AUDIT], request.app[ENGINE]
    status = audit.status
    return web.json_response({"status": "ok" if status == "ok" else "degraded", "policy_rev": engine.rev,
                              "policy_error": engine.last_error is not None, "policy": engine.health(),
                              "audit": {"status": status, "pending": audit.pending,
                                        "max_pending": audit.max_pending},
                              "transparent": request.app[PROXY].transparent is not None})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """Readiness: 503 while sandgate refuses new requests (audit.max_pending rows wait to be written) and while
    it drains to stop (SIGTERM)."""
    audit = request.app[AUDIT]
    draining = request.app[DRAIN].draining
    ready = audit.accepting and not draining
    return web.json_response({"ready": ready, "audit": audit.status, "draining": draining},
                             status=200 if ready else 503)


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    metrics = request.app[METRICS]
    metrics.audit_pending.set(request.app[AUDIT].pending)
    return web.Response(body=metrics.render(), content_type="text/plain", charset="utf-8")
