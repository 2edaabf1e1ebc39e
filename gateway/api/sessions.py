"""Session endpoints: create, list, read, patch (freeze, labels, renewal), delete."""
from __future__ import annotations

import asyncio
import time

from aiohttp import web

from broker.specs import check_session_secrets
from gateway.api.auth import require
from gateway.api.bodies import CREATE_SESSION, PATCH_SESSION, check_query, read_body
from gateway.api.errors import ApiError
from gateway.api.owned import owned_session
from gateway.api.state import (APPROVALS, BROKER, PROXY, SESSIONS, SIGNER, TOKENS, TransparentEndpoint, path_param,
                               read_json)
from gateway.api.approvals import grant_view
from gateway.api.timefmt import rfc3339
from gateway.sessions.budgets import parse_own
from gateway.sessions.database import database_url, make_verifier, new_password
from gateway.sessions.spec import (BadRequest, build_env, check_labels, owns, parse_session_spec, parse_source,
                                  renewed_expiry, session_status)
from gateway.sessions.registry import SessionRegistry, SourceInUse
from gateway.store.records import Session

routes = web.RouteTableDef()


def session_view(row: Session, now: float, sessions: SessionRegistry) -> dict:
    return {
        "id": row.id, "workload": row.workload, "labels": row.labels, "allow": row.allow,
        "secrets": row.secrets, "workspace": row.workspace, "ca_path": row.ca_path,
        "frozen": row.frozen, "created_at": rfc3339(row.created_at), "expires_at": rfc3339(row.expires_at),
        "status": session_status(row, now), "created_by": row.created_by,
        "source": sessions.source_of(row.id), "databases": list(row.databases or []),
        **{k: v for k, v in sessions.with_stats(row).items() if k in ("budgets", "budgets_spent", "stats")},
    }


@routes.post("/v1/sessions")
async def create_session(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    broker = request.app[BROKER]
    body = read_body(await read_json(request), CREATE_SESSION)
    proxy = request.app[PROXY]
    sessions = request.app[SESSIONS]
    try:
        spec = parse_session_spec(body.doc, broker.specs, proxy.postgres.env_names if proxy.postgres else (),
                                  sessions.lifetimes)
        check_session_secrets(spec.secrets, broker.specs)
        source = _source(body.source, proxy.transparent)
    except ValueError as exc:                      # BadRequest included
        raise ApiError(400, "bad_request", str(exc)) from None
    if source is not None and sessions.source_holder(source) is not None:
        raise ApiError(409, "source_in_use", f"another live session is bound to {source}")
    now = time.time()
    placeholders = await broker.new_placeholders(spec.secrets) if spec.secrets else {}
    db_password = new_password() if spec.databases else ""
    # PBKDF2 (4,096 rounds) off the loop
    db_login = {"scram": (await asyncio.to_thread(make_verifier, db_password)).to_json()} if spec.databases else None
    stored = await sessions.create(spec, placeholders, principal.ident, now, db_login=db_login)
    sid = stored.id
    # The token lives as long as the session could be renewed (PATCH ttl_s: its lifetime ceiling, none by default
    # for a persistent session); the session row decides liveness on every request, so an ended or expired
    # session's token is refused at once.
    token = request.app[SIGNER].mint("session", sid, sessions.ceiling(spec.workload), session_id=sid,
                                     workload=spec.workload, now=now)
    extra: dict = {}
    if source is not None and proxy.transparent is not None:
        try:
            sessions.bind_source(sid, source, request.app[TOKENS].verify(token))
        except (SourceInUse, KeyError):
            await sessions.delete(stored, principal.ident)
            raise ApiError(409, "source_in_use", f"another live session is bound to {source}") from None
        extra.update(transparent={"listen": proxy.transparent.listen, "dns": proxy.transparent.dns})
    proxy_url = f"http://sandgate:{token}@{proxy.authority}"
    env = build_env(proxy_url, spec.ca_path, broker.env(placeholders, spec.ca_path))
    if spec.databases and proxy.postgres is not None:
        env |= {proxy.postgres.env_names[n]: database_url(sid, db_password, proxy.postgres.advertise, n, spec.ca_path)
                for n in spec.databases}
    out = session_view(stored, now, sessions) | {"token": token, "proxy_url": proxy_url,
                                                 "ca_pem": proxy.ca_pem, "env": env} | extra
    return web.json_response(out, status=201)


def _source(source: str | None, transparent: TransparentEndpoint | None) -> str | None:
    """The source address a new session is bound to (the body's `source`), or None; BadRequest when it cannot
    be."""
    if source is None:
        return None
    if transparent is None:
        raise BadRequest("this sandgate has no transparent listener (set proxy.transparent_listen and "
                         "proxy.dns_listen), so a session cannot be bound to a source address")
    return parse_source(source, transparent.sources)


@routes.get("/v1/sessions")
async def list_sessions(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    check_query(request.query, {"status": ("active", "expired", "deleted")}, "GET /v1/sessions")
    now = time.time()
    status = request.query.get("status")
    rows = [session_view(r, now, request.app[SESSIONS]) for r in await request.app[SESSIONS].list()
            if owns(principal.role, principal.ident, r) and (not status or session_status(r, now) == status)]
    return web.json_response(rows)


@routes.get("/v1/sessions/{sid}")
async def get_session(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    row = await owned_session(request, principal, path_param(request, "sid"))
    now = time.time()
    grants = await request.app[APPROVALS].grants_for(row.id, now)
    return web.json_response(session_view(row, now, request.app[SESSIONS])
                             | {"grants": [grant_view(g) for g in grants]})


@routes.patch("/v1/sessions/{sid}")
async def patch_session(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    row = await owned_session(request, principal, path_param(request, "sid"))
    if session_status(row, time.time()) != "active":
        raise ApiError(409, "session_ended", "the session has ended")
    body = read_body(await read_json(request), PATCH_SESSION)
    if not body.given():
        raise ApiError(400, "bad_request", "only 'frozen', 'labels', 'ttl_s' and 'budgets' can be changed")
    values: dict = {}                      # the columns changed
    if body.ttl_s is not None:
        try:
            values.update(expires_at=renewed_expiry(row, body.ttl_s, time.time(),
                                                    request.app[SESSIONS].ceiling(row.workload)))
        except BadRequest as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
    if body.frozen is not None:
        values.update(frozen=body.frozen)
    if body.labels is not None:
        try:
            values.update(labels=check_labels(body.labels))
        except BadRequest as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
    if body.budgets is not None:
        try:                               # the keys given replace the session's own (0 = none), the rest stay
            values.update(budgets={**(row.budgets or {}), **parse_own(body.budgets)})
        except ValueError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
    try:
        updated = await request.app[SESSIONS].patch(row.id, values, principal.ident)
    except KeyError:
        raise ApiError(404, "not_found", "no such session") from None
    return web.json_response(session_view(updated, time.time(), request.app[SESSIONS]))


@routes.delete("/v1/sessions/{sid}")
async def delete_session(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    row = await owned_session(request, principal, path_param(request, "sid"))
    await request.app[SESSIONS].delete(row, principal.ident)
    return web.Response(status=204)
