"""Responses of the approval page and the wrapper every page handler runs in.

The wrapper applies, in order: the cross-origin check on POSTs (`Sec-Fetch-Site`, then `Origin`), the login
check (a missing or expired page session goes back to /login), the CSRF token on POSTs, and a catch-all so
that no error ever shows a stack trace. Every response carries hardening headers (a strict CSP: scripts and
styles only from /static, no inline script, no framing).
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from urllib.parse import quote

import aiohttp_jinja2
import jinja2
from aiohttp import web
from multidict import MultiDictProxy

from gateway.web.csrf import FIELD, check_request_origin, token_matches
from gateway.web.login import PageSessions, PageUser

log = logging.getLogger("sandgate.web")

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass
class PageState:
    sessions: PageSessions
    streams: set = field(default_factory=set)


PAGE: web.AppKey = web.AppKey("sandgate_page", PageState)
JINJA: web.AppKey = web.AppKey("sandgate_jinja", jinja2.Environment)
HOLD_S: web.AppKey = web.AppKey("sandgate_hold_s", float)      # egress.hold_timeout_s, shown on held requests
REUSE_S: web.AppKey = web.AppKey("sandgate_reuse_s", float)    # approvals.reuse_window_s, shown on every item
FORM: web.RequestKey = web.RequestKey("sandgate_form", MultiDictProxy)   # a POST's form, its CSRF token checked


def harden(resp: web.StreamResponse) -> web.StreamResponse:
    for name, value in SECURITY_HEADERS.items():
        resp.headers.setdefault(name, value)
    return resp


def web_quote(path: str) -> str:
    return quote(path, safe="/")


def redirect(location: str) -> web.Response:
    return harden(web.Response(status=303, headers={"Location": location}))


def render(request: web.Request, name: str, ctx: dict, status: int = 200) -> web.Response:
    ctx.setdefault("user", None)
    return harden(aiohttp_jinja2.render_template(name, request, ctx, status=status, app_key=JINJA))


def error_page(request: web.Request, status: int, message: str, user: PageUser | None = None) -> web.Response:
    return render(request, "error.html", {"status": status, "message": message, "user": user}, status=status)


def page(*, login: bool = True, post: bool = False):
    """Wrap a handler `(request, user)`: origin check and CSRF token for POSTs, login, no stack trace ever."""
    def wrap(handler):
        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                user = request.app[PAGE].sessions.user(request)
                if post:
                    refused = check_request_origin(request.method, request.headers, request.host)
                    if refused:
                        return error_page(request, 403, refused, user)
                if login and user is None:
                    return redirect("/login?next=" + web_quote(request.path_qs if not post else "/"))
                if post and login:
                    form = await request.post()
                    if not token_matches(user.csrf, form.get(FIELD)):
                        return error_page(request, 403, "The form's CSRF token is missing or wrong: "
                                                        "reload the page and try again.", user)
                    request[FORM] = form
                return await handler(request, user)
            except Exception:  # noqa: BLE001 - never a stack trace on the page
                log.exception("page error on %s %s", request.method, request.path)
                return error_page(request, 500, "Something went wrong. The error was logged.")
        return run
    return wrap
