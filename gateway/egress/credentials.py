"""Parsing proxy credentials: `Proxy-Authorization: Basic base64(user:token)` (any user name). Pure."""
from __future__ import annotations

import base64
import binascii


def parse_proxy_authorization(value: str) -> str | None:
    """Return the token (the Basic password, or a Bearer token), or None when absent/malformed."""
    if not value:
        return None
    scheme, _, rest = value.strip().partition(" ")
    rest = rest.strip()
    if scheme.lower() == "bearer":
        return rest or None
    if scheme.lower() != "basic" or not rest:
        return None
    try:
        decoded = base64.b64decode(rest, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    _user, sep, password = decoded.partition(":")
    return password if sep and password else None
