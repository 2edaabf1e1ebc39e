"""Proxy answers: 407 and 403 denials (JSON body, decision header, reason in the status line). Pure."""
from __future__ import annotations

import json
import re

from mitmproxy import http

_UNSAFE = re.compile(r"[^\x20-\x7e]")


def status_reason(text: str, limit: int = 200) -> str:
    """A reason phrase safe for an HTTP status line (printable ASCII, no CR/LF, bounded)."""
    return _UNSAFE.sub("?", text)[:limit] or "Forbidden"


def denial(code: str, reason: str, request_id: str, status: int = 403, error: str = "denied") -> http.Response:
    body = json.dumps({"error": error, "reason": reason, "code": code, "request_id": request_id})
    resp = http.Response.make(status, body.encode(), {
        "Content-Type": "application/json",
        "X-Sandgate-Decision": "deny",
        "X-Sandgate-Request-Id": request_id,
        "Cache-Control": "no-store",
    })
    resp.reason = status_reason(f"Forbidden by sandgate: {reason}" if status == 403 else reason)
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
