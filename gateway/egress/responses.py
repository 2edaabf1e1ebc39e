"""Proxy answers: 407 and 403 denials (JSON body, decision header, reason in the status line). Pure."""
from __future__ import annotations

import json
import re

from mitmproxy import http

from gateway.approvals.access import ENDPOINT as ACCESS_ENDPOINT, HINT as ACCESS_HINT

_UNSAFE = re.compile(r"[^\x20-\x7e]")


def status_reason(text: str, limit: int = 200) -> str:
    """A reason phrase safe for an HTTP status line (printable ASCII, no CR/LF, bounded)."""
    return _UNSAFE.sub("?", text)[:limit] or "Forbidden"


def denial(code: str, reason: str, request_id: str, status: int = 403, error: str = "denied") -> http.Response:
    doc = {"error": error, "reason": reason, "code": code, "request_id": request_id}
    if status == 403:               # a denial the agent can act on: where to ask a person for access
        doc |= {"access_request": ACCESS_ENDPOINT, "hint": ACCESS_HINT}
    body = json.dumps(doc)
    resp = http.Response.make(status, body.encode(), {
        "Content-Type": "application/json",
        "X-Sandgate-Decision": "deny",
        "X-Sandgate-Request-Id": request_id,
        "Cache-Control": "no-store",
    })
    if status == 403:               # the status line names it too (a CONNECT client may show only that)
        resp.reason = status_reason(f"Forbidden by sandgate: {status_reason(reason)} (ask: {ACCESS_ENDPOINT})", 300)
    else:
        resp.reason = status_reason(reason)
    return resp


def auth_required(request_id: str, reason: str = "proxy authentication required") -> http.Response:
    body = json.dumps({"error": "proxy_auth_required", "reason": reason, "code": "auth.proxy",
                       "request_id": request_id})
    resp = http.Response.make(407, body.encode(), {
        "Content-Type": "application/json",
        "Proxy-Authenticate": 'Basic realm="sandgate"',
        "X-Sandgate-Decision": "deny",
    })
    resp.reason = status_reason(f"Proxy Authentication Required: {reason}")
    return resp
