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


PROXY_AUTHORIZATION = b"proxy-authorization"

Fields = tuple[tuple[bytes, bytes], ...]


def take_proxy_authorization(fields: Fields) -> tuple[Fields, list[str]]:
    """A request head's fields without any Proxy-Authorization field (the same tuple when it has none), and those
    fields' values in order, decoded as mitmproxy's `Headers.get_all` decodes them (names compare case-blind, as
    `Headers` compares them). One pass where `get_all` and `del` took several."""
    values = [value for name, value in fields if name.lower() == PROXY_AUTHORIZATION]
    if not values:
        return fields, []
    kept = tuple(field for field in fields if field[0].lower() != PROXY_AUTHORIZATION)
    return kept, [value.decode("utf-8", "surrogateescape") for value in values]
