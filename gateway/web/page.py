"""The approval page: server-rendered Jinja2 (autoescaped) on the API listener, live via Server-Sent Events.

Routes: `/` (queue), `/fragments/queue`, `/events` (SSE), `/approvals/{id}` (+ `/approve`, `/deny`), `/history`,
`/login`, `/logout`, `/static/...`. The page reads and decides through the services (the approval queue, the
session registry, the audit log), never the store: the queue's expiry applies, and decisions take the API's path.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web

from gateway.api.errors import STATUS_OF
from gateway.api.state import APPROVALS, AUDIT, REVOCATIONS, SESSIONS, SIGNER, TOKENS, PageSettings, path_param
from gateway.approvals.rules import FINAL_STATES, KINDS
from gateway.approvals.queue import ApprovalError
from gateway.sessions.spec import session_status
from gateway.store.records import Approval
from gateway.web import views
from gateway.web.csrf import safe_next
from gateway.web.login import LoginError, PageSessions, PageUser, clear_cookie, set_cookie
from gateway.web.oidc import OidcVerifier
from gateway.web.respond import (FORM, HOLD_S, REUSE_S, JINJA, PAGE, PageState, error_page, harden, page, redirect,
                                 render, web_quote)
from gateway.web.sse import close_streams, events

HERE = Path(__file__).resolve().parent
MAX_REASON = 2000
DENIAL_WINDOW = 500         # audit rows read back for an access request's "recent denials of this host"
DECIDE_MESSAGES = {
    "reason_required": "A deny needs a reason: say why in the Reason field.",
    "already_voted": "You already voted on this approval.",
    "forbidden": "You filed this approval, so you cannot decide it: someone else must.",
    "conflict": "The approval changed while you were deciding; look again and retry.",
}
DONE_MESSAGES = {"approved": "Approved.", "denied": "Denied.", "voted": "Your approval was recorded."}


# -- login -----------------------------------------------------------------------------------------
@page(login=False)
async def login_form(request: web.Request, user: PageUser | None) -> web.StreamResponse:
    nxt = safe_next(request.query.get("next"))
    if user is not None:
        return redirect(nxt)
    return render(request, "login.html", {"next": nxt, "error": "", "oidc": request.app[PAGE].sessions.oidc})


@page(login=False, post=True)
async def login_submit(request: web.Request, user: PageUser | None) -> web.StreamResponse:
    form = await request.post()
    nxt = safe_next(str(form.get("next") or "/"))
    token = form.get("token")
    try:
        value, ttl = await request.app[PAGE].sessions.login(token if isinstance(token, str) else "", time.time())
    except LoginError as exc:
        ctx = {"next": nxt, "error": str(exc), "oidc": request.app[PAGE].sessions.oidc}
        return render(request, "login.html", ctx, status=401)
    resp = redirect(nxt)
    set_cookie(resp, request, value, ttl)
    return resp


@page(post=True)
async def logout(request: web.Request, user: PageUser) -> web.StreamResponse:
    await request.app[PAGE].sessions.logout(user)
    resp = redirect("/login")
    clear_cookie(resp, request)
    return resp


# -- queue -----------------------------------------------------------------------------------------
async def pending(request: web.Request) -> list[dict]:
    rows = await request.app[APPROVALS].list(status="pending")
    live = {sid: request.app[SESSIONS].live_now(sid) for sid in {r.session for r in rows}}
    labels = {sid: (sess.labels if sess is not None else None) or {} for sid, sess in live.items()}
    return views.pending_items(rows, time.time(), labels)


@page()
async def queue_page(request: web.Request, user: PageUser) -> web.StreamResponse:
    return render(request, "queue.html", {"user": user, "items": await pending(request)})


async def queue_fragment(request: web.Request) -> web.StreamResponse:
    if request.app[PAGE].sessions.user(request) is None:
        return harden(web.Response(status=401, text="log in first"))
    return render(request, "_queue.html", {"items": await pending(request)})


# -- detail and decisions --------------------------------------------------------------------------
async def detail_ctx(request: web.Request, row: Approval) -> dict:
    now = time.time()
    sess = await request.app[SESSIONS].get(row.session)
    evs = await request.app[AUDIT].events(session=row.session, limit=20, newest=True)
    status = session_status(sess, now) if sess else "unknown"
    # an access request: the session's recent denials of its host (read from a bounded window of its audit rows)
    denials = (await request.app[AUDIT].events(session=row.session, limit=DENIAL_WINDOW, newest=True)
               if row.kind == "access" else ())
    view = views.detail_view(row, sess, status, evs, now, hold_s=request.app[HOLD_S], reuse_s=request.app[REUSE_S],
                             denials=denials)
    return {"a": view, "message": "", "error": "", "reason_text": ""}


@page()
async def detail_page(request: web.Request, user: PageUser) -> web.StreamResponse:
    row = await request.app[APPROVALS].get(path_param(request, "aid"))
    if row is None:
        return error_page(request, 404, "There is no such approval.", user)
    ctx = await detail_ctx(request, row)
    ctx.update(user=user, message=DONE_MESSAGES.get(request.query.get("done", ""), ""))
    return render(request, "detail.html", ctx)


async def decide(request: web.Request, user: PageUser, verdict: str) -> web.StreamResponse:
    aid, queue, form = path_param(request, "aid"), request.app[APPROVALS], request[FORM]
    reason = form.get("reason")
    reason = reason.strip()[:MAX_REASON] if isinstance(reason, str) else ""
    grant = grant_from_form(form) if verdict == "approve" else None
    try:
        row = await queue.decide(aid, user.ident, verdict, reason or None, grant=grant)
    except ApprovalError as exc:
        row = await queue.get(aid)
        if row is None:
            return error_page(request, 404, "There is no such approval.", user)
        ctx = await detail_ctx(request, row)
        msg = DECIDE_MESSAGES.get(exc.code) or (f"Not decided: {exc.detail}." if exc.code == "bad_request" else
                                                f"This approval was already decided: it is {row.status}.")
        ctx.update(user=user, error=msg, reason_text=reason)
        return render(request, "detail.html", ctx, status=STATUS_OF.get(exc.code, 400))
    done = row.status if row.status in ("approved", "denied") else "voted"
    return redirect(f"/approvals/{web_quote(aid)}?done={done}")


def grant_from_form(form: Any) -> dict | None:
    """The narrowing an access approval's form asks for (None for other forms: they have no grant fields). A field
    that is not a number stays text: the queue refuses it (400 on the page)."""
    if "grant_ttl_s" not in form and "grant_path_prefix" not in form:
        return None
    grant: dict = {"methods": [m for m in form.getall("grant_method", []) if isinstance(m, str)] or ["-"]}
    prefix = form.get("grant_path_prefix")
    if isinstance(prefix, str) and prefix.strip():
        grant.update(path_prefix=prefix.strip())
    ttl = form.get("grant_ttl_s")
    if isinstance(ttl, str) and ttl.strip():
        try:
            grant.update(ttl_s=float(ttl))
        except ValueError:
            grant.update(ttl_s=ttl)
    return grant


@page(post=True)
async def approve(request: web.Request, user: PageUser) -> web.StreamResponse:
    return await decide(request, user, "approve")


@page(post=True)
async def deny(request: web.Request, user: PageUser) -> web.StreamResponse:
    return await decide(request, user, "deny")


# -- history ---------------------------------------------------------------------------------------
@page()
async def history_page(request: web.Request, user: PageUser) -> web.StreamResponse:
    q = request.query
    session = q.get("session", "").strip()[:100]
    kind = q.get("kind", "") if q.get("kind", "") in KINDS else ""
    state = q.get("state", "") if q.get("state", "") in FINAL_STATES else ""
    rows: list[dict] = []
    for status in [state] if state else FINAL_STATES:
        rows += await request.app[APPROVALS].list(status=status, session=session or None, kind=kind or None,
                                                  limit=5000)
    ctx = {"user": user, "items": views.history_items(rows), "f": {"session": session, "kind": kind,
                                                                     "state": state},
           "kinds": KINDS, "states": FINAL_STATES}
    return render(request, "history.html", ctx)


def setup_page(app: web.Application, settings: PageSettings) -> None:
    """The approval page's routes on `app`, whose services (api/state.py) are already installed."""
    env = aiohttp_jinja2.setup(app, app_key=JINJA, loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                               autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters.update(reveal=views.reveal)
    oidc = OidcVerifier(settings.oidc) if settings.oidc else None
    app[PAGE] = PageState(PageSessions(app[TOKENS], app[SIGNER], oidc, app[REVOCATIONS]))
    app[HOLD_S] = settings.hold_timeout_s
    app[REUSE_S] = settings.reuse_window_s
    r = app.router
    r.add_get("/", queue_page)
    r.add_get("/login", login_form)
    r.add_post("/login", login_submit)
    r.add_post("/logout", logout)
    r.add_get("/fragments/queue", queue_fragment)
    r.add_get("/events", events)
    r.add_get("/history", history_page)
    r.add_get("/approvals/{aid}", detail_page)
    r.add_post("/approvals/{aid}/approve", approve)
    r.add_post("/approvals/{aid}/deny", deny)
    r.add_static("/static/", HERE / "static", name="static", append_version=False)
    app.on_shutdown.append(close_streams)
