"""URLs -> the facts the tool-call policy reads (`describe_url`). Pure; never raises."""
from __future__ import annotations

import re
from urllib.parse import urlsplit

from gateway.net.hosts import normalise_host
from gateway.policy.inputs import parse_query

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}


def describe_url(url: str) -> dict:
    """{"parsed", "scheme", "host", "port", "path", "query"}; host canonical (lower-case, IDNA, no brackets)."""
    out = {"parsed": False, "scheme": "", "host": "", "port": 0, "path": "", "query": {}}
    try:
        parts = urlsplit(url)
        if re.search(r"[\s\\]", parts.netloc) or not parts.hostname:
            return out
        scheme = parts.scheme.lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
        host = normalise_host(parts.hostname)
    except ValueError:
        return out
    return {"parsed": True, "scheme": scheme, "host": host, "port": port, "path": parts.path or "/",
            "query": parse_query(parts.query)}
