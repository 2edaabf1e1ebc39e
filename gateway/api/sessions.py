"""Session endpoints: create, list, read, patch (freeze), delete."""
from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from gateway.api.auth import GW, require
from gateway.api.errors import ApiError
from gateway.api.timefmt import rfc3339
from gateway.api.owned import owned_session
from gateway.sessions import (MAX_TTL_S, BadRequest, build_env, new_session_id, owns, parse_session_spec,
                              renewed_expiry, session_status)
from gateway.store.models import SessionRow

routes = web.RouteTableDef()


def session_view(row: dict, now: float) -> dict:
    return {
        "id": row["id"], "workload": row["workload"], "labels": row["labels"], "allow": row["allow"],
        "secrets": row["secrets"], "workspace": row["workspace"], "ca_path": row["ca_path"],
        "frozen": row["frozen"], "created_at": rfc3339(row["created_at"]), "expires_at": rfc3339(row["expires_at"]),
        "status": session_status(row, now), "created_by": row.get("created_by", ""),
    }


async def read_json(request: web.Request) -> Any:
    if not request.can_read_body:
        return {}
    try:
        return await request.json()
    except ValueError:
        raise ApiError(400, "bad_json", "the request body is not valid JSON") from None


@routes.post("/v1/sessions")
async def create_session(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    gw = request.app[GW]
    known = gw.broker.specs if gw.broker is not None else {}
    try:
        spec = parse_session_spec(await read_json(request), known)
    except BadRequest as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    now = time.time()
    sid = new_session_id()
    placeholders = await gw.broker.new_placeholders(spec.secrets) if gw.broker is not None and spec.secrets else {}
    row = SessionRow(id=sid, workload=spec.workload, labels=spec.labels, allow=spec.allow, secrets=spec.secrets,
                     placeholders=placeholders, workspace=spec.workspace, ca_path=spec.ca_path, frozen=False,
                     created_at=now, expires_at=now + spec.ttl_s, created_by=principal.ident, updated_at=now)
    stored = await gw.store.put_session(row)
    gw.sessions.put(stored)
    if gw.broker_hooks is not None:
        gw.broker_hooks.session_added(stored)
    # The token lives as long as the session could be renewed (PATCH ttl_s); the session row decides liveness
    # on every request, so an ended or expired session's token is refused at once.
    token = gw.signer.mint("session", sid, MAX_TTL_S, session_id=sid, workload=spec.workload, now=now)
    proxy_url = f"http://sandgate:{token}@{gw.proxy_advertise}"
    env_names = {name: gw.broker.specs[name].env for name in spec.secrets} if gw.broker is not None else {}
    env = build_env(proxy_url, spec.ca_path, {env_names[n]: placeholders[n] for n in spec.secrets})
    gw.audit.record("session.created", session=sid, action="create",
                    detail={"workload": spec.workload, "by": principal.ident, "allow": spec.allow,
                            "secrets": spec.secrets, "labels": spec.labels})
    body = session_view(stored, now) | {"token": token, "proxy_url": proxy_url, "ca_pem": gw.ca_pem, "env": env}
    return web.json_response(body, status=201)


@routes.get("/v1/sessions")
async def list_sessions(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    gw = request.app[GW]
    now = time.time()
    rows = [session_view(r, now) for r in await gw.store.list_sessions() if owns(principal.role, principal.ident, r)]
    status = request.query.get("status")
    if status:
        rows = [r for r in rows if r["status"] == status]
    return web.json_response(rows)


@routes.get("/v1/sessions/{sid}")
async def get_session(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    return web.json_response(session_view(await owned_session(request, principal, request.match_info["sid"]),
                                          time.time()))


@routes.patch("/v1/sessions/{sid}")
async def patch_session(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    gw = request.app[GW]
    row = await owned_session(request, principal, request.match_info["sid"])
    if session_status(row, time.time()) != "active":
        raise ApiError(409, "session_ended", "the session has ended")
    body = await read_json(request)
    if not isinstance(body, dict) or not body or set(body) - {"frozen", "labels", "ttl_s"}:
        raise ApiError(400, "bad_request", "only 'frozen', 'labels' and 'ttl_s' can be changed")
    values: dict = {}
    if "ttl_s" in body:
        try:
            values["expires_at"] = renewed_expiry(row, body["ttl_s"], time.time())
        except BadRequest as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
    if "frozen" in body:
        if not isinstance(body["frozen"], bool):
            raise ApiError(400, "bad_request", "frozen must be a boolean")
        values["frozen"] = body["frozen"]
    if "labels" in body:
        labels = body["labels"]
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise ApiError(400, "bad_request", "labels must be an object of strings")
        values["labels"] = labels
    updated = await gw.store.update_session(row["id"], **values)
    gw.sessions.put(updated)
    gw.audit.record("session.updated", session=row["id"], action="patch", detail={**values, "by": principal.ident})
    return web.json_response(session_view(updated, time.time()))


@routes.delete("/v1/sessions/{sid}")
async def delete_session(request: web.Request) -> web.Response:
    principal = require(request, "harness")
    gw = request.app[GW]
    row = await owned_session(request, principal, request.match_info["sid"])
    if not row.get("deleted_at"):
        updated = await gw.store.update_session(row["id"], deleted_at=time.time())
        gw.sessions.put(updated)
        if gw.broker_hooks is not None:
            gw.broker_hooks.session_removed(updated)
        if gw.approvals is not None:
            await gw.approvals.cancel_session(row["id"], by=principal.ident)
        gw.audit.record("session.deleted", session=row["id"], action="delete", detail={"by": principal.ident})
    return web.Response(status=204)
