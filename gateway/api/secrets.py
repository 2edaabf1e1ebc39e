"""Secret management (admin): names, hosts and backends — never values."""
from __future__ import annotations

from aiohttp import web

from broker.backends import parse_source
from broker.broker import BrokerError
from gateway.api.auth import require
from gateway.api.bodies import PUT_SECRET, read_body
from gateway.api.errors import ApiError
from gateway.api.state import AUDIT, BROKER, path_param, read_json

routes = web.RouteTableDef()


@routes.get("/v1/secrets")
async def list_secrets(request: web.Request) -> web.Response:
    require(request, "admin")
    out = [{"name": s.name, "hosts": list(s.hosts), "backend": parse_source(s.source).kind if s.kind == "token" else s.kind, "env": s.env,
            "inject_in": sorted(s.inject_in), "allow_plaintext": s.allow_plaintext, "ports": sorted(s.ports)}
           for s in request.app[BROKER].listing()]
    return web.json_response(out)


@routes.put("/v1/secrets/{name}")
async def put_secret(request: web.Request) -> web.Response:
    principal = require(request, "admin")
    name = path_param(request, "name")
    body = read_body(await read_json(request), PUT_SECRET)
    try:
        spec = await request.app[BROKER].put_local(name, body.value, body.hosts)
    except BrokerError as exc:
        raise ApiError.of(exc.code, exc.detail) from None
    request.app[AUDIT].record("secret.put", action="put", detail={"secret": name, "hosts": list(spec.hosts),
                                                                   "by": principal.ident})
    return web.json_response({"name": name, "hosts": list(spec.hosts), "backend": "local", "env": spec.env})


@routes.delete("/v1/secrets/{name}")
async def delete_secret(request: web.Request) -> web.Response:
    principal = require(request, "admin")
    name = path_param(request, "name")
    try:
        await request.app[BROKER].remove_local(name)
    except BrokerError as exc:
        raise ApiError.of(exc.code, exc.detail) from None
    request.app[AUDIT].record("secret.rm", action="delete", detail={"secret": name, "by": principal.ident})
    return web.Response(status=204)
