"""The aiohttp application on the API listener: the API and the approval page.

`create_app(services)` is the factory (aiohttp-demos style): it installs one typed key per service
(api/state.py), through which every handler reads what it needs, and adds the routes.
"""
from __future__ import annotations

from aiohttp import web

from gateway.api import access, approvals, decisions, mcp, routes, scrub, secrets, sessions, tokens, toolcalls
from gateway.api.errors import errors_middleware
from gateway.api.state import ApiServices, install
from gateway.web.forwarded import forwarded_proto_middleware
from gateway.web.page import setup_page

MAX_BODY_BYTES = 4 * 1024 * 1024


def create_app(services: ApiServices) -> web.Application:
    middlewares = [errors_middleware]
    if services.page.trusted_proxies:
        middlewares.insert(0, forwarded_proto_middleware(services.page.trusted_proxies))
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    install(app, services)
    for module in (routes, sessions, toolcalls, approvals, access, secrets, scrub, mcp, tokens, decisions):
        app.add_routes(module.routes)
    setup_page(app, services.page)
    return app
