"""`GET /v1/decisions` (admin): the decision log in OPA's decision-log format, for `sandgate audit export` run by
someone without access to the database. Filters: `since`, `until` (Unix seconds or RFC 3339), `kind`, `session`,
`id` (a decision's), `request_id` (the proxy's, from a 403 body, or a tool call's `t_...`). Pages of at most
`limit` rows (MAX_LIMIT): `next` is the `after` of the following page, null on the last."""
from __future__ import annotations

import math
import time

from aiohttp import web

from gateway.api.auth import require
from gateway.api.errors import ApiError
from gateway.api.state import DECISIONS
from gateway.policy.logcommands import KINDS, opa_decision_log_entry, parse_since

routes = web.RouteTableDef()

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
_TEXT_FILTERS = ("session", "id", "request_id")
_KNOWN = frozenset({"since", "until", "kind", "after", "limit", *_TEXT_FILTERS})


def _int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    try:
        value = int(request.query.get(name, str(default)))
    except ValueError:
        raise ApiError(400, "bad_request", f"{name} must be an integer") from None
    if not low <= value <= high:
        raise ApiError(400, "bad_request", f"{name} must be between {low} and {high}")
    return value


def _time(request: web.Request, name: str, now: float) -> float | None:
    if name not in request.query:
        return None
    try:
        value = parse_since(request.query[name], now)
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc).replace("--since", name)) from None
    if not math.isfinite(value):
        raise ApiError(400, "bad_request", f"{name} is out of range")
    return value


@routes.get("/v1/decisions")
async def list_decisions(request: web.Request) -> web.Response:
    require(request, "admin")
    unknown = sorted(set(request.query) - _KNOWN)
    if unknown:
        raise ApiError(400, "unknown_field", f"unknown query parameter: {unknown[0]}")
    store = request.app[DECISIONS]
    if store is None:
        raise ApiError(404, "not_found", "the decision log is off (policy.decision_log = false)")
    now = time.time()
    kind = request.query.get("kind")
    if kind is not None and kind not in KINDS:
        raise ApiError(400, "bad_request", f"kind must be one of {', '.join(KINDS)}")
    limit = _int(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    after = _int(request, "after", -1, -1, 2 ** 62) if "after" in request.query else None
    filters = {name: request.query.get(name) or None for name in _TEXT_FILTERS}
    rows = await store.list_decisions(_time(request, "since", now) or 0.0, _time(request, "until", now), kind,
                                      limit=limit + 1, after_seq=after, **filters)
    more = len(rows) > limit
    rows = rows[:limit]
    return web.json_response({"decisions": [opa_decision_log_entry(r) for r in rows],
                              "next": rows[-1]["seq"] if more else None})
