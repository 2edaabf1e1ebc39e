"""Secret management (admin): names, hosts and backends — never values."""
from __future__ import annotations

from aiohttp import web

from broker.backends import SecretUnavailable, parse_source
from gateway.api.auth import GW, require
from gateway.api.errors import ApiError
from gateway.api.sessions import read_json

routes = web.RouteTableDef()


def _broker(request: web.Request):
    gw = request.app[GW]
    if gw.broker is None:
        raise ApiError(503, "broker_unavailable", "the credential broker is not configured")
    return gw


@routes.get("/v1/secrets")
async def list_secrets(request: web.Request) -> web.Response:
    require(request, "admin")
    gw = _broker(request)
    out = [{"name": s.name, "hosts": list(s.hosts), "backend": parse_source(s.source).kind, "env": s.env,
            "inject_in": sorted(s.inject_in), "allow_plaintext": s.allow_plaintext, "ports": sorted(s.ports)}
           for s in sorted(gw.broker.specs.values(), key=lambda s: s.name)]
    return web.json_response(out)


@routes.put("/v1/secrets/{name}")
async def put_secret(request: web.Request) -> web.Response:
    principal = require(request, "admin")
    gw = _broker(request)
    name = request.match_info["name"]
    body = await read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("value"), str) or not body["value"]:
        raise ApiError(400, "bad_request", "value (a non-empty string) is required")
    hosts = body.get("hosts")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise ApiError(400, "bad_request", "hosts must be a non-empty list of host names")
    existing = gw.broker.specs.get(name)
    if existing is not None and parse_source(existing.source).kind != "local":
        raise ApiError(409, "not_local", f"secret {name} is defined in the configuration with another backend")
    from gateway.broker_glue import local_spec

    try:
        # A secret defined in the configuration keeps its configured hosts, format and injection points.
        spec = existing if existing is not None and name in gw.cfg.raw["secrets"] else local_spec(name, hosts)
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    local = gw.broker.resolver.backends["local"]
    try:
        await local.put(name, body["value"], list(spec.hosts))
    except (SecretUnavailable, ValueError) as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    gw.broker.specs[name] = spec
    gw.broker.resolver.invalidate(spec.source)
    gw.audit.record("secret.put", action="put", detail={"secret": name, "hosts": list(spec.hosts),
                                                         "by": principal.ident})
    return web.json_response({"name": name, "hosts": list(spec.hosts), "backend": "local", "env": spec.env})


@routes.delete("/v1/secrets/{name}")
async def delete_secret(request: web.Request) -> web.Response:
    principal = require(request, "admin")
    gw = _broker(request)
    name = request.match_info["name"]
    spec = gw.broker.specs.get(name)
    if spec is None:
        raise ApiError(404, "not_found", "no such secret")
    if parse_source(spec.source).kind != "local" or name in gw.cfg.raw["secrets"]:
        raise ApiError(409, "not_local", "only secrets stored with `sandgate secrets put` can be removed here")
    await gw.broker.resolver.backends["local"].delete(name)
    gw.broker.specs.pop(name, None)
    gw.broker.resolver.invalidate(spec.source)
    gw.audit.record("secret.rm", action="delete", detail={"secret": name, "by": principal.ident})
    return web.Response(status=204)
