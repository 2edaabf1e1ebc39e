"""CSRF defence for the approval page, as pure helpers (no aiohttp, no clock).

Two independent checks guard every state-changing POST:

1. Fetch metadata, then Origin (datasette / Filippo Valsorda's algorithm): a browser that says the request is
   `cross-site` or `same-site`, or an `Origin` whose host is not ours, is refused. A client that sends neither
   header (curl, requests) is not a browser riding on a victim's cookie and passes this check.
2. A synchronizer token: a random value bound to the login (the page-session JWT's `jti`), rendered as a hidden
   field in every form and compared in constant time.
"""
from __future__ import annotations

import hmac
from typing import Mapping
from urllib.parse import urlsplit

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
FIELD = "csrf_token"


def check_request_origin(method: str, headers: Mapping[str, str], host: str) -> str | None:
    """None when the request may proceed, else a short reason. `host` is the request's Host (netloc)."""
    if method.upper() in SAFE_METHODS:
        return None
    site = (headers.get("Sec-Fetch-Site") or "").strip().lower()
    if site:
        if site in ("same-origin", "none"):
            return None
        return f"cross-origin request refused (Sec-Fetch-Site: {site})"
    origin = (headers.get("Origin") or "").strip()
    if not origin:
        return None
    if origin == "null":
        return "cross-origin request refused (opaque origin)"
    if urlsplit(origin).netloc.lower() != host.strip().lower():
        return "cross-origin request refused (Origin does not match)"
    return None


def token_matches(expected: str | None, given: object) -> bool:
    """Constant-time comparison; a missing or non-string token never matches."""
    if not expected or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def safe_next(target: str | None, default: str = "/") -> str:
    """A local path to return to after login; anything that could leave the site becomes `default`."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return default
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        return default
    if target.startswith(("/login", "/logout", "/events")):
        return default
    return target
