"""URLs -> the facts the tool-call policy reads (`describe_url`). Pure; never raises."""
from __future__ import annotations

import re
from urllib.parse import urlsplit

from gateway.net.addresses import classify_ip, parse_ip_literal
from gateway.net.hosts import normalise_host
from gateway.policy.inputs import parse_query

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}


def describe_url(url: str) -> dict:
    """{"parsed", "scheme", "host", "port", "path", "query", "ip_class"}; host canonical (lower-case, IDNA, no
    brackets)."""
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
            "query": parse_query(parts.query), "ip_class": host_class(host)}


def host_class(host: str) -> str:
    """The address class of a host that is an IP literal in any spelling (`127.1`, `0x7f000001`, `[::ffff:...]`)
    or a loopback name (`localhost`, `*.localhost`): "public", "loopback", "link_local", ... (gateway.net
    classify_ip); "" for other names (only known once resolved)."""
    name = host.rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    try:
        address = parse_ip_literal(name)
    except ValueError:
        return ""
    return classify_ip(address) if address is not None else ""
